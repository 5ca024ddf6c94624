"""The transfer studies' one table of methods: every context source they evaluate, by name, with the `s3 eval` settings
it runs with and one line saying what it is. `benchmarks/transfer_checks.py --help` and `benchmarks/transfer.py
--help` print it (`help_table`).

The settings the studies pass to `s3` live here and nowhere else: a renamed setting is an edit of this table.
`{N}` and `{NAME}` in a name are read from the name asked for (`naive_rag_top4`: N = 4); `{policy}` (--policy DIR) and
`{k}` (the config's retriever.k) in a setting are filled by the caller.

One searcher, one name: the title-following script is `title_following` (the product's searcher.kind and `s3 eval
--method`; the checks first called it "heuristic"), and the controls built on its documents are `title_following_*`.
Those that read one page further live (title_following_links1, _ranker1, _reader) are the reading searcher (`s3 eval
--method searcher` with searcher.kind = "reading" and its [searcher.reading] settings); they keep their names and their
results folders. Their runs made before that searcher had its own kind record `--method title_following` and the
flat searcher.read_last / ranker / reader: `run` leaves a finished one as it is, and `s3 eval` refuses to extend one
(another identity).
Their files of hotpotqa_dev500 keep the names they were written under (contexts/heuristic.jsonl, runs/GEN/heuristic/,
changed/GEN/heuristic_plus_gold/, ...): `stored_name` says where a method's files are, `canonical` reads an old name (a
folder, a command line in docs/transfer.md) as the method.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from experiments.transfer.checks import DOC_CAP, SPAN_K

CONTEXTS_DATASET = "hotpotqa_dev500"  # the one dataset with contexts files (benchmarks/transfer_checks.py prepare)
SCRIPT = ("title_following",)
SCRIPT_SETS = (f"searcher.k={SPAN_K}", f"searcher.context_cap={DOC_CAP}", "searcher.max_turns=1")  # the checks' script
READING = ("searcher",)  # the reading searcher, run live: `s3 eval --method searcher` with searcher.kind = "reading"
# the script's settings, then one page of the question's own ranks 4-16, the ranker's pick ([searcher.reading])
READS = ("searcher.kind=reading", *SCRIPT_SETS, "searcher.reading.read_last=16")
ON_VLLM = "searcher.policy=vllm"  # a policy searcher's greedy rollouts on the vLLM engine


@dataclass(frozen=True)
class Method:
    about: str  # one line: what it is
    method: tuple[str, ...] = ()  # `s3 eval --method` and what follows it; () = its contexts file only
    sets: tuple[str, ...] = ()  # its `--set KEY=VALUE`s
    contexts: bool = False  # on hotpotqa_dev500: replayed from its contexts file, contexts/<stored name>.jsonl
    extra: bool = False  # takes `--additive KEY=VALUE`s of its own (a variant's settings, a policy's loop)
    base: str | None = None  # --only-changed: the control whose rows it keeps for the questions it does not change
    old: str | None = None  # the name its files of hotpotqa_dev500 keep
    study: str = "checks"  # "checks" (benchmarks/transfer_checks.py), "attempt" (benchmarks/transfer.py) or "both"


METHODS: dict[str, Method] = {
    # the baselines
    "naive_rag_top{N}": Method("the retriever's top-N of the question: top3 is naive RAG, the bar; top4, top5 more "
                               "documents, no better ones", ("naive_rag",), ("retriever.k={N}",)),
    "naive_rag": Method("naive RAG at the config's retriever.k: the bar", ("naive_rag",), study="attempt"),
    "no_retrieval": Method("the generator alone, no documents (reads no index)", ("no_retrieval",), study="both"),
    "untrained": Method("the untrained base searcher model in the config's loop, greedy", ("searcher",),
                        ("searcher.policy_path=null", ON_VLLM), study="both"),
    "trained": Method("the attempt's trained searcher (--results' policy/), greedy", ("searcher",),
                      ("searcher.policy_path={policy}", ON_VLLM), study="attempt"),
    "trained_cap": Method("the trained searcher at the equal budget: no more documents than naive RAG", ("searcher",),
                          ("searcher.policy_path={policy}", ON_VLLM, "searcher.context_cap={k}"), study="attempt"),
    "untrained_cap": Method("the untrained searcher at the equal budget", ("searcher",),
                            ("searcher.policy_path=null", ON_VLLM, "searcher.context_cap={k}"), study="attempt"),
    # ceilings
    "a1": Method("naive RAG's top-3 + every missing gold paragraph a copyable teacher would add (title visible)",
                 contexts=True),
    "a2": Method("naive RAG's top-3 + every missing gold paragraph, visible or not: a perfect searcher", contexts=True),
    # the title-following script and the controls built on its documents
    "title_following": Method("the title-following script (one span turn, k 8 a span, cap 5; the checks' 'heuristic'): "
                              "hotpotqa_dev500 from its contexts file, live elsewhere", SCRIPT, SCRIPT_SETS,
                              contexts=True, old="heuristic"),
    "title_following_pruned": Method("the script's documents without its non-gold additions (oracle-pruned)",
                                     contexts=True, old="heuristic_pruned"),
    "title_following_plus_gold": Method("the script, then the gold among the question's bm25 ranks 4-8: a perfect "
                                        "selector where it ends", contexts=True, old="heuristic_plus_gold"),
    "title_following_plus_gold16": Method("the same over ranks 4-16: a perfect reader of what `read` reads",
                                          contexts=True, old="heuristic_plus_gold16"),
    "title_following_plus_next": Method("the script, then the next bm25 document: no reading", contexts=True,
                                        old="heuristic_plus_next"),
    "title_following_plus_reader": Method("the script, then a trained reader's picks among ranks 4-16 above a "
                                          "threshold (`read`)", contexts=True, old="heuristic_plus_reader"),
    "title_following_plus_reader1": Method("the script, then that reader's best page, always (`read`)", contexts=True,
                                           old="heuristic_plus_reader1"),
    "title_following_plus_links1": Method("the script, then the best of a ranker without the reader's score (`read`)",
                                          contexts=True, base="title_following_plus_reader1",
                                          old="heuristic_plus_links1"),
    "title_following_plus_ranker1": Method("the script, then the best of a ranker over the reader's score and what the "
                                           "script found (`read`)", contexts=True,
                                           base="title_following_plus_reader1", old="heuristic_plus_ranker1"),
    "title_following_plus_ranker1_shipped": Method("the same ranker over the reader as it ships (float16; `read "
                                                   "--ship-reader`)", contexts=True,
                                                   base="title_following_plus_ranker1",
                                                   old="heuristic_plus_ranker1_shipped"),
    "title_following_links1": Method("the reading searcher live with the shipped no-reading ranker (links-hotpotqa): "
                                     "the script, then that ranker's page", READING,
                                     (*READS, "searcher.reading.ranker=links-hotpotqa")),
    "title_following_ranker1": Method("the reading searcher live with the ranker over the probe's reader (`read`'s "
                                      "ranker file)", READING,
                                      (*READS, "searcher.reading.ranker=benchmarks/results/transfer3/checks/rankers/"
                                               "heuristic_plus_ranker1.json",
                                       "searcher.reading.reader=runs/selection_probe/readers/"
                                       "smollm2-135m-instruct-pointwise")),
    "title_following_reader": Method("the reading searcher live as it ships: the shipped ranker over the shipped LoRA "
                                     "reader (`s3 demo`'s searcher)", READING,
                                     (*READS, "searcher.reading.ranker=links-reader-hotpotqa")),
    "title_following_{NAME}": Method("the script live with other settings: --additive KEY=VALUE (repeatable)", SCRIPT,
                                     SCRIPT_SETS, extra=True),
    "reading_{NAME}": Method("the reading searcher live with other settings: --additive KEY=VALUE (repeatable; "
                             "searcher.reading.ranker / reader / read_last)", READING, READS, extra=True),
    # trained searchers
    "a0": Method("attempt 2's policy made additive (--policy DIR: from commit f54b212)", ("searcher",),
                 ("searcher.policy_path={policy}", "searcher.additive=true", "searcher.context_cap=5")),
    "policy_{NAME}": Method("a searcher trained under configs/transfer3.toml (--policy DIR), its loop's settings by "
                            "--additive", ("searcher",), ("searcher.policy_path={policy}",), extra=True),
}

OLD_NAMES = {m.old: name for name, m in METHODS.items() if m.old}  # old name -> method


def reads(m: Method) -> bool:
    """Whether `m` is the reading searcher (the script, then one page read further).

    >>> reads(METHODS["title_following_reader"]), reads(METHODS["title_following"]), reads(METHODS["a0"])
    (True, False, False)
    """
    return m.method == READING and READS[0] in m.sets


def scripted(m: Method) -> bool:
    """Whether `m` runs the title-following script live, alone or reading further: no sampling, and documents that
    never depend on the generator (another generator's run may replay them: `run --documents-from`).

    >>> scripted(METHODS["title_following_ranker1"]), scripted(METHODS["title_following_{NAME}"])
    (True, True)
    >>> scripted(METHODS["policy_{NAME}"]), scripted(METHODS["title_following_plus_gold"])
    (False, False)
    """
    return m.method == SCRIPT or reads(m)


def canonical(name: str) -> str:
    """The method an old name (a results folder, a contexts file, a command line from before) stands for.

    >>> canonical("heuristic"), canonical("heuristic_plus_gold_mt16"), canonical("policy_shipped")
    ('title_following', 'title_following_plus_gold_mt16', 'policy_shipped')
    """
    if name in OLD_NAMES:
        return OLD_NAMES[name]
    stem, sep, tokens = name.rpartition("_mt")  # a max_tokens run: METHOD_mtN
    if sep and tokens.isdigit() and stem in OLD_NAMES:
        return f"{OLD_NAMES[stem]}_mt{tokens}"
    return name


def stored_name(name: str, dataset: str = CONTEXTS_DATASET) -> str:
    """The name a method's files have (its run folder, its contexts file): its old one on hotpotqa_dev500 where it has
    one, else its own.

    >>> stored_name("title_following"), stored_name("title_following", "musique_dev200"), stored_name("a1")
    ('heuristic', 'title_following', 'a1')
    >>> stored_name("title_following_plus_gold_mt16")
    'heuristic_plus_gold_mt16'
    """
    stem, sep, tokens = name.rpartition("_mt")  # a max_tokens run: METHOD_mtN
    if sep and tokens.isdigit():
        return f"{stored_name(stem, dataset)}_mt{tokens}"
    m = METHODS.get(name)
    return m.old if m is not None and m.old and dataset == CONTEXTS_DATASET else name


def lookup(name: str) -> tuple[str, Method, dict[str, str]]:
    """(table key, its entry, the values of its name's {fields}) of a method name (an old one read as its method); an
    unknown name, or a {N} that is not a count, is a ValueError naming the table.

    >>> lookup("naive_rag_top4")[0::2], lookup("heuristic")[0]
    (('naive_rag_top{N}', {'N': '4'}), 'title_following')
    """
    name = canonical(name)
    if name in METHODS:
        return name, METHODS[name], {}
    for key, m in METHODS.items():
        head, brace, field = key.partition("{")
        if brace and name.startswith(head) and len(name) > len(head):
            value = name[len(head):]
            if field == "N}" and not (value.isdigit() and int(value) >= 1):
                raise ValueError(f"{head}N takes N >= 1, got {name!r}")
            return key, m, {field.rstrip("}"): value}
    raise ValueError(f"unknown method {name!r}: one of {', '.join(METHODS)} (benchmarks/transfer_checks.py --help)")


def eval_args(
    name: str, contexts: Path, policy: str | None = None, extra: Sequence[str] = (), *,
    dataset: str = CONTEXTS_DATASET, k: int | None = None,
) -> tuple[list[str], list[str], bool]:
    """What method `name` runs as on `dataset`: the `s3 eval --method` arguments, its `--set`s, and whether the run
    reads the index (no_retrieval does not, and `s3 eval` refuses an `--index` it would not use). `contexts` is the
    folder of the contexts files; `policy` fills {policy} (--policy DIR), `k` {k}; `extra` are --additive settings,
    taken by a method whose entry says so, and elsewhere only where the table already sets them. A missing piece is a
    ValueError that says what to pass.

    >>> eval_args("naive_rag_top4", Path("c"))
    (['naive_rag'], ['retriever.k=4'], True)
    >>> eval_args("no_retrieval", Path("c"))
    (['no_retrieval'], [], False)
    >>> eval_args("heuristic", Path("c"))
    (['searcher', '--contexts', 'c/heuristic.jsonl'], [], True)
    >>> eval_args("title_following", Path("c"), dataset="musique_dev200")
    (['title_following'], ['searcher.k=8', 'searcher.context_cap=5', 'searcher.max_turns=1'], True)
    >>> eval_args("title_following_links1", Path("c"), None, ["searcher.reading.read_last=16"])
    (['searcher'], ['searcher.kind=reading', 'searcher.k=8', 'searcher.context_cap=5', 'searcher.max_turns=1', 'searcher.reading.read_last=16', 'searcher.reading.ranker=links-hotpotqa'], True)
    >>> eval_args("title_following_links1", Path("c"), None, ["searcher.reading.read_last=8"])
    Traceback (most recent call last):
    ValueError: title_following_links1 runs with searcher.kind=reading searcher.k=8 searcher.context_cap=5 searcher.max_turns=1 searcher.reading.read_last=16 searcher.reading.ranker=links-hotpotqa (the METHODS table); for other settings name a variant reading_NAME
    >>> eval_args("reading_wide", Path("c"), None, ["searcher.reading.read_last=24"])[1][-2:]
    ['searcher.reading.read_last=16', 'searcher.reading.read_last=24']
    >>> eval_args("policy_x", Path("c"), "p", ["searcher.min_turns=2"])
    (['searcher'], ['searcher.policy_path=p', 'searcher.min_turns=2'], True)
    """
    key, m, fields = lookup(name)
    name = canonical(name)
    if m.contexts and dataset == CONTEXTS_DATASET:
        if extra:
            raise ValueError(f"{name} on {dataset} is its contexts file: --additive would change nothing")
        return ["searcher", "--contexts", str(contexts / f"{stored_name(name, dataset)}.jsonl")], [], True
    if not m.method:
        raise ValueError(f"{name} is a contexts file of {CONTEXTS_DATASET} (`prepare` / `read`): it runs there only")
    if "{policy}" in " ".join(m.sets) and policy is None:
        raise ValueError(f"{name} needs --policy DIR (a checkpoint's policy/ folder or an exported policy)")
    sets = [s.format(policy=policy, k=k, **fields) for s in m.sets]
    if m.extra:
        if key.endswith("{NAME}") and scripted(m) and not extra:
            raise ValueError(f"{name} is the " + ("reading searcher with other settings: pass them with --additive "
                                                  "KEY=VALUE (e.g. searcher.reading.read_last=8)" if reads(m) else
                                                  "title-following script with other settings: pass them with "
                                                  "--additive KEY=VALUE (e.g. searcher.title_following.words=60)"))
        sets += list(extra)  # a later --set of a key wins: a variant's own settings over the table's
    elif any(s not in sets for s in extra):  # a named method is its table's settings; repeating them is harmless
        raise ValueError(f"{name} runs with {' '.join(sets) or 'no settings'} (the METHODS table); for other settings "
                         "name a variant " + ("reading_NAME" if reads(m) else "title_following_NAME"
                                              if m.method == SCRIPT else "policy_NAME"))
    return list(m.method), sets, m.method[0] != "no_retrieval"


def order(names: Sequence[str]) -> list[str]:
    """`names` in the table's order (a name of a {field} entry where that entry is; ties by name).

    >>> order(["policy_b", "a1", "naive_rag_top4", "policy_a", "naive_rag_top3", "title_following"])
    ['naive_rag_top3', 'naive_rag_top4', 'a1', 'title_following', 'policy_a', 'policy_b']
    """
    keys = list(METHODS)

    def place(name: str) -> tuple[int, str]:
        try:
            return keys.index(lookup(name)[0]), name
        except ValueError:
            return len(keys), name

    return sorted(names, key=place)


def help_table(study: str) -> str:
    """The table as `--help` prints it: the methods of `study` ("checks" or "attempt"), each with what it is and what
    it runs."""
    mine = {name: m for name, m in METHODS.items() if m.study in (study, "both")}
    old = ", ".join(f"{m.old}={name}" for name, m in mine.items() if m.old)
    lines = textwrap.wrap("methods (experiments/transfer/methods.py METHODS"
                          + (f"; an old name is read as its method: {old}" if old else "") + "):", 118)
    for name, m in mine.items():
        runs = []
        if m.contexts:
            runs.append(f"{CONTEXTS_DATASET}: contexts/{m.old or name}.jsonl")
        if m.method:
            runs.append("s3 eval --method " + " ".join(m.method) + "".join(f" --set {s}" for s in m.sets)
                        + (" [--additive ...]" if m.extra else ""))
        lines += [f"  {name}", f"      {m.about}", *(f"      {r}" for r in runs)]
    return "\n".join(lines)
