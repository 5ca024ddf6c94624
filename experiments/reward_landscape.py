"""The reward landscape of a training set: the frozen generator's accuracy under different contexts.

    .venv/bin/python benchmarks/reward_landscape.py [--config configs/cpu_train.toml] [--set key=value ...] \
        [--sample 200] [--out benchmarks/results/transfer/reward_landscape_qwen05]

Before training a searcher for a generator, it is worth knowing what any searcher could gain. For the training
questions of the config (the held-out ones excluded) this prints the generator's mean accuracy (the training metric)
with: naive RAG's top-k, a deeper top-2k, the gold supporting paragraphs (metadata.supporting_ids), top-k plus the
gold paragraphs, and one random document of the top-k. Calls go through the config's generator and its response
cache, so a second run is free. If the gold paragraphs do not beat top-k, GBR has little to reward; the share of
questions the generator fails even from the gold paragraphs is the share of GRPO groups that are flat whatever the
searcher does (`training.data.keep_answerable` drops them).

`--landscape833` (issue 31, step 1): the landscape of the paper's 8:3:3 loop (8 documents per query, up to 3
selected, 3 turns) on two sets of training questions, the ones naive RAG FAILS (s3's training filter) and a seeded
sample of all of them:

    S3_LLAMA_THREADS=2 .venv/bin/python benchmarks/reward_landscape.py --config configs/transfer.toml --landscape833 \
        --set generator.cache_path=$RUNS/transfer/llm_cache.sqlite \
        --fails 200 --sample 200 --runs $RUNS/landscape --out benchmarks/results/transfer/landscape_833 \
        [--searcher smollm2-135m:100 --searcher qwen2.5-0.5b:100 --searcher qwen2.5-1.5b:60]

- (b) / (a) oracle selection from the question's top-3 / top-8: the gold supporting paragraphs among them (at most
  max_select, in supporting_ids order), naive top-3 where none is among them;
- (c) oracle selection from the top-8 plus the top-8 of ONE ideal second query: the title of the first gold paragraph
  missing from the top-8 (a question with both gold paragraphs in its top-8 needs no second query: (c) = (a));
- the gold paragraphs themselves (the ceiling of any context built from them), and the counts after each filter
  (answerable-from-gold = the generator answers from the gold paragraphs; cached in the training directory's
  gold.jsonl under training/prep/data.py's key, so `training.data.keep_answerable` reuses it);
- (d) untrained searchers in the s3 loop at 8:3:3 (begin-with-search top-k0 = naive RAG's 3, then up to 3 search
  turns of 8 documents, up to 3 selected per window): the generator's accuracy on the searcher's documents, searches
  per question, the share of questions whose documents hold a gold paragraph naive top-3 missed. `NAME:N` runs it on
  the first N questions of each set (the sets are prefixes of one seeded order, so a larger N extends a run).
  Trajectories are appended to RUNS/trajectories_<name>_<settings>.jsonl: a killed run resumes where it stopped;
- the searcher's view: the share of answer-bearing gold paragraphs whose answer survives the per-document token
  budget (the first N whitespace words / SmolLM2 tokens, N = 48, 96, 160).

A naive top-3 context reuses the prepared training set's cached baseline (its rows are checked against today's
top-3 document ids), and every context that equals another one of the same question is scored once.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator_adapters.client import run_sync
from s3core.types import Document, QAExample

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------------------------------ oracle selection


def gold_among(ranked: Sequence[Document], gold_ids: Sequence[str], max_select: int = 3) -> list[Document]:
    """The gold paragraphs among `ranked`, at most `max_select`, in `gold_ids` order (the order the gold-paragraph
    context uses, so an oracle that finds every gold paragraph asks the generator the gold context's prompt).

    >>> d = [Document(id=i, title=i, text="") for i in "abcd"]
    >>> [x.id for x in gold_among(d, ["d", "x", "b"])]
    ['d', 'b']
    """
    by_id = {d.id: d for d in ranked}
    out: list[Document] = []
    for g in dict.fromkeys(gold_ids):
        if g in by_id and len(out) < max_select:
            out.append(by_id[g])
    return out


def oracle_select(
    ranked: Sequence[Document], gold_ids: Sequence[str], naive: Sequence[Document], max_select: int = 3
) -> tuple[list[Document], bool]:
    """Oracle selection from `ranked`: its gold paragraphs (at most max_select), else naive RAG's documents.
    Returns (documents, whether any gold paragraph was found)."""
    found = gold_among(ranked, gold_ids, max_select)
    return (found, True) if found else (list(naive), False)


def missing_gold(ranked: Sequence[Document], gold_ids: Sequence[str]) -> list[str]:
    """The gold ids not among `ranked`, in gold order."""
    have = {d.id for d in ranked}
    return [g for g in dict.fromkeys(gold_ids) if g not in have]


def merge_ranked(*lists: Sequence[Document]) -> list[Document]:
    """The documents of several result lists, deduplicated by id, first list first."""
    seen: dict[str, Document] = {}
    for docs in lists:
        for d in docs:
            seen.setdefault(d.id, d)
    return list(seen.values())


@dataclass
class OracleContexts:
    """Per question: the oracle contexts of the landscape and where the gold paragraphs were."""

    naive: list[list[Document]]
    top3: list[list[Document]]           # (b)
    top8: list[list[Document]]           # (a)
    second: list[list[Document]]         # (c)
    gold: list[list[Document]]
    second_query: list[str | None]
    gold_in_top3: list[int] = field(default_factory=list)
    gold_in_top8: list[int] = field(default_factory=list)
    gold_in_second: list[int] = field(default_factory=list)


def oracle_contexts(
    examples: Sequence[QAExample], retriever: Any, *, naive_k: int = 3, k: int = 8, max_select: int = 3
) -> OracleContexts:
    """(a), (b), (c) and the gold context for each question (`retriever`: search(queries, k) and get(ids)).

    The ideal second query is the title of the first gold paragraph missing from the question's top-k; its top-k is
    merged after the question's. Questions without gold ids get naive RAG's documents everywhere."""
    deep = retriever.search([e.question for e in examples], k)
    naive = [d[:naive_k] for d in deep]
    gold = [retriever.get(list(e.supporting_ids)) if e.supporting_ids else [] for e in examples]
    queries: list[str | None] = []
    for e, d, gs in zip(examples, deep, gold, strict=True):
        miss = missing_gold(d, e.supporting_ids)
        titles = {g.id: g.title for g in gs}
        queries.append(titles.get(miss[0]) if miss else None)
    asked = [i for i, q in enumerate(queries) if q]
    extra: dict[int, list[Document]] = {}
    if asked:
        for i, res in zip(asked, retriever.search([queries[i] for i in asked], k), strict=True):
            extra[i] = list(res)
    out = OracleContexts(naive=naive, top3=[], top8=[], second=[], gold=gold, second_query=queries)
    for i, (e, d, n) in enumerate(zip(examples, deep, naive, strict=True)):
        ids = e.supporting_ids
        pool = merge_ranked(d, extra.get(i, []))
        out.top3.append(oracle_select(n, ids, n, max_select)[0])
        out.top8.append(oracle_select(d, ids, n, max_select)[0])
        out.second.append(oracle_select(pool, ids, n, max_select)[0])
        out.gold_in_top3.append(len(gold_among(n, ids, 99)))
        out.gold_in_top8.append(len(gold_among(d, ids, 99)))
        out.gold_in_second.append(len(gold_among(pool, ids, 99)))
    return out


# ------------------------------------------------------------------------------------------------ the searcher's view


def answer_survives(text: str, answers: Sequence[str], budget: int | None,
                    count_tokens: Callable[[str], int] | None = None) -> bool:
    """Does a gold answer (span check) appear in the first `budget` tokens of `text` (the searcher's view of a
    document, searcher.protocol.truncate_words)?

    >>> answer_survives("one two three Paris", ["Paris"], 3), answer_survives("one two three Paris", ["Paris"], 4)
    (False, True)
    """
    from eval.metrics import span_check
    from searcher.protocol import truncate_words

    return span_check([truncate_words(" ".join(text.split()), budget, count_tokens)], [list(answers)])[0] == 1.0


# ------------------------------------------------------------------------------------------------ the training set


@dataclass
class Prepared:
    """The config's training questions (held-out excluded), their cached naive-RAG baseline, the counts."""

    data_dir: Path
    index_dir: Path
    examples: list[QAExample]
    baseline: dict[str, float]       # question id -> Acc(G(Q, naive top-3)), rows checked against today's top-3
    naive_ids: dict[str, list[str]]  # question id -> today's naive top-3 ids
    counts: dict[str, int]
    baseline_note: str
    gold_path: Path
    gold_hash: str


def load_prepared(cfg: Any, retriever_factory: Callable[[Path], Any]) -> Prepared:
    """questions.jsonl, corpus.jsonl and the index of the prepared training directory (written here as `s3
    prepare-training` writes them when missing, without its baseline step), yes/no dropped, the held-out tail cut,
    and the committed baseline cache: a row counts when its key is today's (generator, prompt, retriever, k, metric;
    the index fingerprint of today's index or of the manifest's) and its document ids are today's top-3."""
    from dataprep.training_sources import load_sources
    from s3core.io import read_jsonl, write_json_atomic, write_jsonl_atomic
    from training.prep import data as td

    d = td.training_dir(cfg)
    qpath, cpath = d / "questions.jsonl", d / "corpus.jsonl"
    if not qpath.is_file() or not cpath.is_file():
        docs, qs, _ = load_sources(cfg.training.data.sources, cfg.base_dir)
        if cfg.training.data.exclude_sources:
            docs, qs, _ = td._exclude(docs, qs, cfg.training.data.exclude_sources, cfg.base_dir)
        if cfg.training.data.shuffle_seed is not None:
            random.Random(cfg.training.data.shuffle_seed).shuffle(qs)
        if cfg.training.data.max_questions:
            qs = qs[: cfg.training.data.max_questions]
        d.mkdir(parents=True, exist_ok=True)
        write_jsonl_atomic(cpath, [{"id": x.id, "contents": x.contents} for x in docs])
        write_jsonl_atomic(qpath, [q.model_dump() for q in qs])
        if not (d / "preparation.json").is_file():
            write_json_atomic(d / "preparation.json", {"loaded_questions": len(qs)})
    prep = json.loads((d / "preparation.json").read_text()) if (d / "preparation.json").is_file() else {}
    manifest = json.loads((d / "manifest.json").read_text()) if (d / "manifest.json").is_file() else {}
    index_dir = td.Preparation(cfg, d).ensure_index()
    questions = [QAExample.model_validate(r) for r in read_jsonl(qpath)]
    counts = {"loaded": int(prep.get("loaded_questions", len(questions))),
              "after_exclude_sources": len(questions)}
    if cfg.training.data.drop_yes_no:
        questions = [q for q in questions if not td.is_yes_no(q.golden_answers)]
    counts["no_yes_no"] = len(questions)
    held = cfg.training.heldout.questions
    training = questions[:-held] if 0 < held < len(questions) else questions
    counts["training_without_heldout"] = len(training)

    key = td.baseline_key(cfg, td._index_fingerprint(index_dir))
    accepted = {td._key_hash(key)}
    old_index = (manifest.get("baseline_key") or {}).get("index")
    if old_index and old_index != key["index"]:
        accepted.add(td._key_hash({**key, "index": old_index}))  # same generator etc.; doc ids checked per row
    retriever = retriever_factory(index_dir)
    top = retriever.search([q.question for q in training], cfg.retriever.k)
    naive_ids = {q.id: [x.id for x in docs] for q, docs in zip(training, top, strict=True)}
    rows = read_jsonl(d / "baseline.jsonl", torn_tail="skip") if (d / "baseline.jsonl").is_file() else []
    # read-only: the rule prepare-training's rekey_baseline applies, without appending the carried rows
    kept, stale = td.rows_with_todays_topk(rows, accepted, naive_ids)
    baseline = {i: float(r["acc"]) for i, r in kept.items()}
    note = (f"{len(baseline)} of {len(training)} training questions have a cached naive-RAG baseline whose top-3 ids "
            f"are today's ({stale} stale rows)")
    if old_index and old_index != key["index"]:
        note += (f"; the cache was written for index fingerprint {old_index}, today's rebuilt index is {key['index']} "
                 "(same top-3 ids: the rows are used)")
    gkey = {k: v for k, v in key.items() if k not in ("retriever", "index", "k")} | {"context": "gold supporting paragraphs"}
    return Prepared(d, index_dir, training, baseline, naive_ids, counts, note, d / "gold.jsonl", td._key_hash(gkey))


# ------------------------------------------------------------------------------------------------ scoring


class Scorer:
    """Acc(G(Q, D)) per (question, context) with a memo: naive RAG's cached baseline and the gold-context cache are
    free, and a context that equals another one of the same question is asked once. Progress on tqdm."""

    def __init__(self, cfg: Any, prep: Prepared) -> None:
        from s3core.io import read_jsonl
        from training.prep.data import make_accuracy

        self.accuracy = make_accuracy(cfg)
        self.prep = prep
        self.memo: dict[tuple[str, tuple[str, ...]], float | None] = {}
        for qid, acc in prep.baseline.items():
            self.memo[(qid, tuple(prep.naive_ids[qid]))] = acc
        self.gold_written: set[tuple[str, tuple[str, ...]]] = set()
        if prep.gold_path.is_file():
            for r in read_jsonl(prep.gold_path, torn_tail="skip"):
                if r.get("key") == prep.gold_hash and r.get("acc") is not None and r.get("doc_ids"):
                    self.memo[(r["id"], tuple(r["doc_ids"]))] = float(r["acc"])
                    self.gold_written.add((r["id"], tuple(r["doc_ids"])))
        self.calls = 0
        self.seconds = 0.0
        self.batch = 8

    def __call__(self, examples: Sequence[QAExample], contexts: Sequence[Sequence[Document]], desc: str,
                 gold_cache: bool = False) -> list[float | None]:
        from tqdm import tqdm

        keys = [(e.id, tuple(d.id for d in ds)) for e, ds in zip(examples, contexts, strict=True)]
        todo: dict[tuple[str, tuple[str, ...]], tuple[QAExample, Sequence[Document]]] = {}
        for k, e, ds in zip(keys, examples, contexts, strict=True):
            if k not in self.memo and k not in todo:
                todo[k] = (e, ds)
        items = list(todo.items())
        if items:
            with tqdm(total=len(items), desc=f"generator: {desc}", unit="call", dynamic_ncols=True) as bar:
                for lo in range(0, len(items), self.batch):
                    chunk = items[lo : lo + self.batch]
                    t0 = time.perf_counter()
                    accs = run_sync(self.accuracy([e.question for _, (e, _) in chunk], [list(ds) for _, (_, ds) in chunk],
                                                     [e.golden_answers for _, (e, _) in chunk]))
                    self.seconds += time.perf_counter() - t0
                    self.calls += len(chunk)
                    for (k, _), a in zip(chunk, accs, strict=True):
                        self.memo[k] = a
                    if gold_cache:
                        self._append_gold([k for k, _ in chunk])
                    bar.update(len(chunk))
        if gold_cache:  # also the gold contexts another condition had already asked (same documents)
            self._append_gold(keys)
        return [self.memo[k] for k in keys]

    def _append_gold(self, keys: Sequence[tuple[str, tuple[str, ...]]]) -> None:
        """Gold-context accuracies in training/prep/data.py's gold.jsonl format (training.data.keep_answerable reads them)."""
        from s3core.io import append_jsonl

        rows = []
        for k in dict.fromkeys(keys):
            if k not in self.gold_written and self.memo.get(k) is not None:
                rows.append({"id": k[0], "acc": self.memo[k], "key": self.prep.gold_hash, "doc_ids": list(k[1])})
                self.gold_written.add(k)
        if rows:
            append_jsonl(self.prep.gold_path, rows)


def mean(xs: Sequence[float | None]) -> float | None:
    ok = [x for x in xs if x is not None]
    return sum(ok) / len(ok) if ok else None


# ------------------------------------------------------------------------------------------------ searchers (d)

SEARCHERS: dict[str, dict[str, str]] = {
    # the transformers policy (token ids, as training runs it), the offline GGUF dequantized to torch
    "smollm2-135m": {"policy": "transformers", "model": "smollm2-135m-instruct"},
    # the same SmolLM2 GGUF through llama.cpp (chat turns, the KV cache kept across turns): many times faster on CPU
    "smollm2-135m-llamacpp": {"policy": "litellm", "model": "local/smollm2-135m-instruct"},
    # the offline Qwen2.5-Coder GGUFs through llama.cpp (litellm's local/ provider), chat turns
    "qwen2.5-0.5b": {"policy": "litellm", "model": "local/qwen2.5-coder-0.5b-instruct"},
    "qwen2.5-1.5b": {"policy": "litellm", "model": "local/qwen2.5-coder-1.5b-instruct"},
}


def searcher_overrides(name: str, args: argparse.Namespace, cfg: Any) -> list[str]:
    spec = SEARCHERS[name]
    budget = args.doc_token_budget if args.doc_token_budget is not None else cfg.searcher.doc_token_budget
    return [f"searcher.policy={spec['policy']}", f"searcher.model={spec['model']}", "searcher.policy_path=null",
            f"searcher.k={args.k}", f"searcher.max_select={args.max_select}", f"searcher.max_turns={args.max_turns}",
            f"searcher.doc_token_budget={budget if budget is not None else 'null'}",
            f"searcher.max_new_tokens={args.max_new_tokens}", "searcher.temperature=0.0", "searcher.context_cap=null",
            "searcher.min_turns=0"]


def run_searcher(name: str, examples: Sequence[QAExample], cfg: Any, retriever: Any, path: Path,
                 threads: int = 1) -> dict[str, dict[str, Any]]:
    """The untrained searcher's trajectories for `examples`, appended to `path` as they finish (resumable)."""
    from tqdm import tqdm

    from s3core.io import append_jsonl, read_jsonl, repair_tail
    from searcher.agent import admission_stats
    from searcher.build import build_policy, build_searcher

    done: dict[str, dict[str, Any]] = {}
    if path.is_file():
        repair_tail(path)
        done = {r["id"]: r for r in read_jsonl(path, torn_tail="skip")}
    todo = [e for e in examples if e.id not in done]
    if not todo:
        return done
    scfg = cfg.searcher
    policy = build_policy(scfg, threads=threads)
    searcher = build_searcher(scfg, retriever, policy, k0=cfg.retriever.k)
    chunk = 16 if scfg.policy == "transformers" else 1
    with tqdm(total=len(examples), initial=len(examples) - len(todo), desc=f"searcher {name}", unit="q",
              dynamic_ncols=True) as bar:
        for lo in range(0, len(todo), chunk):
            batch = todo[lo : lo + chunk]
            t0 = time.perf_counter()
            results = searcher.search(batch)
            dt = time.perf_counter() - t0
            rows: list[dict[str, Any]] = []
            for e, res in zip(batch, results, strict=True):
                rows.append({
                    "id": e.id, "documents": [x.id for x in res.documents], "error": res.error,
                    "seconds": dt / len(batch), "stats": admission_stats(res),
                    "steps": [{"turn": s.turn, "query": s.query, "retrieved_ids": s.retrieved_ids,
                               "selected_ids": s.selected_ids, "selection_fallback": s.selection_fallback,
                               "search_complete": s.search_complete, "invalid_reason": s.invalid_reason,
                               "policy_text": s.policy_text} for s in res.steps],
                })
            append_jsonl(path, rows)
            done.update({r["id"]: r for r in rows})
            bar.update(len(batch))
    close = getattr(policy, "close", None)
    if callable(close):
        close()
    return done


def parse_searcher(spec: str, default_n: int) -> tuple[str, int, str | None]:
    """NAME[:N[:SET]] -> (name, N, SET or None = both sets)."""
    name, _, rest = spec.partition(":")
    n, _, only = rest.partition(":")
    if name not in SEARCHERS:
        raise SystemExit(f"unknown searcher {name!r}; known: {', '.join(SEARCHERS)}")
    if only and only not in ("fails", "all"):
        raise SystemExit(f"--searcher {spec!r}: the set is 'fails' or 'all'")
    return name, int(n) if n else default_n, only or None


def settings_of(cfg: Any, scfg: Any, args: argparse.Namespace) -> str:
    """The loop settings a trajectory file was written with (part of its name: other settings, another file)."""
    return (f"k0{cfg.retriever.k}_k{args.k}_s{args.max_select}_t{args.max_turns}_"
            f"b{scfg.searcher.doc_token_budget}_m{args.max_new_tokens}")


def searcher_summary(rows: Sequence[dict[str, Any]], accs: Sequence[float | None], examples: Sequence[QAExample],
                     naive_ids: dict[str, list[str]]) -> dict[str, Any]:
    """What the searcher did on these questions: accuracy, searches, documents, new gold found / kept."""
    n = len(rows)
    new_gold_kept = new_gold_seen = same_as_naive = 0
    for r, e in zip(rows, examples, strict=True):
        missed = set(e.supporting_ids) - set(naive_ids[e.id])
        new_gold_kept += bool(missed & set(r["documents"]))
        seen = {i for s in r["steps"] if s["turn"] > 0 for i in s["retrieved_ids"]}
        new_gold_seen += bool(missed & seen)
        same_as_naive += set(r["documents"]) == set(naive_ids[e.id])
    replies = sum(r["stats"]["replies"] for r in rows)
    return {
        "questions": n, "acc": mean(accs), "scored": sum(a is not None for a in accs),
        "searches_per_question": sum(r["stats"]["search_turns"] for r in rows) / max(n, 1),
        "documents": sum(len(r["documents"]) for r in rows) / max(n, 1),
        "new_gold_kept": new_gold_kept / max(n, 1), "new_gold_retrieved": new_gold_seen / max(n, 1),
        "same_documents_as_naive": same_as_naive / max(n, 1),
        "invalid_replies": sum(r["stats"]["invalid_replies"] for r in rows) / max(replies, 1),
        "by_fallback": sum(r["stats"]["by_fallback"] for r in rows) / max(n, 1),
        "errors": sum(r["error"] is not None for r in rows),
        "seconds_per_question": sum(r["seconds"] for r in rows) / max(n, 1),
    }


# ------------------------------------------------------------------------------------------------ the searcher's view


def survival_table(examples: Sequence[QAExample], retriever: Any, budgets: Sequence[int]) -> dict[str, Any]:
    """Share of the answer-bearing gold paragraphs whose answer is still in the searcher's view at each budget, in
    whitespace words (what the litellm policies count) and in SmolLM2 tokens (the transformers policy's)."""
    from eval.metrics import span_check

    counters: dict[str, Callable[[str], int] | None] = {"words": None}
    try:
        from transformers import AutoTokenizer

        from searcher.policy.transformers_policy import resolve_checkpoint

        tok = AutoTokenizer.from_pretrained(str(resolve_checkpoint("smollm2-135m-instruct")))
        counters["smollm2 tokens"] = lambda s: len(tok.encode(s, add_special_tokens=False))
    except Exception as err:  # the word count alone is still the litellm policies' view
        print(f"survival: no SmolLM2 tokenizer ({err}); words only", flush=True)
    paragraphs = 0
    bearing: list[tuple[str, list[str]]] = []
    in_title = 0
    lengths: list[int] = []
    for e in examples:
        for g in retriever.get(list(e.supporting_ids)) if e.supporting_ids else []:
            paragraphs += 1
            lengths.append(len(g.text.split()))
            if span_check([g.title], [e.golden_answers])[0] == 1.0:
                in_title += 1
            if span_check([g.text], [e.golden_answers])[0] == 1.0:
                bearing.append((g.text, e.golden_answers))
    out: dict[str, Any] = {"gold_paragraphs": paragraphs, "answer_in_text": len(bearing), "answer_in_title": in_title,
                           "median_words": sorted(lengths)[len(lengths) // 2] if lengths else None, "survives": {}}
    for unit, count in counters.items():
        out["survives"][unit] = {}
        for b in budgets:
            kept = sum(answer_survives(t, a, b, count) for t, a in bearing)
            whole = sum((count(" ".join(t.split())) if count else len(t.split())) <= b for t, _ in bearing)
            out["survives"][unit][str(b)] = {"answer_survives": kept / max(len(bearing), 1),
                                             "paragraph_whole": whole / max(len(bearing), 1)}
    return out


def legacy_landscape(args: argparse.Namespace) -> int:
    """The first landscape: naive top-k, top-2k, the gold paragraphs, top-k + gold, one random top-k document."""
    from s3.config import load_config
    from searcher.retrieval import load_retriever
    from training.prep.data import load_training_set, make_accuracy

    cfg = load_config(args.config, args.overrides)
    data = load_training_set(cfg)
    held = cfg.training.heldout.questions
    examples = data.examples[:-held] if 0 < held < len(data.examples) else data.examples
    if args.sample and args.sample < len(examples):
        examples = random.Random(args.seed).sample(examples, args.sample)
    retriever = load_retriever(cfg.retriever, data.index_dir)
    k = cfg.retriever.k
    questions = [e.question for e in examples]
    golden = [e.golden_answers for e in examples]
    deep = retriever.search(questions, 2 * k)
    gold = [retriever.get(e.supporting_ids) if e.supporting_ids else [] for e in examples]
    rng = random.Random(args.seed)
    variants = {
        f"naive RAG top-{k}": [d[:k] for d in deep],
        f"top-{2 * k}": deep,
        "gold supporting paragraphs": gold,
        f"top-{k} + gold paragraphs (at most {2 * k})": [
            (d[:k] + [g for g in gs if g.id not in {x.id for x in d[:k]}])[: 2 * k] for d, gs in zip(deep, gold, strict=True)
        ],
        f"one random document of the top-{k}": [rng.sample(d[:k], 1) if d else [] for d in deep],
    }
    accuracy = make_accuracy(cfg)
    sampled = f" (a seeded sample of {len(examples)})" if args.sample else ""
    lines = [
        f"{len(examples)} training questions{sampled}, generator {cfg.generator.model}, metric {cfg.eval.metric}, "
        f"retriever {cfg.retriever.backend}",
        "",
        "| context | docs | Acc | questions answered |",
        "| --- | ---: | ---: | ---: |",
    ]
    print("\n".join(lines), flush=True)
    rows = []
    for name, docs in variants.items():
        acc = run_sync(accuracy(questions, docs, golden))
        ok = [a for a in acc if a is not None]
        mean_docs = sum(len(d) for d in docs) / max(len(docs), 1)
        missing = f" ({len(acc) - len(ok)} calls failed)" if len(ok) < len(acc) else ""
        line = f"| {name} | {mean_docs:.2f} | {sum(ok) / max(len(ok), 1):.3f} | {int(sum(ok))} of {len(ok)}{missing} |"
        lines.append(line)
        print(line, flush=True)
        rows.append({"context": name, "mean_docs": mean_docs, "acc": sum(ok) / max(len(ok), 1), "answered": int(sum(ok)),
                     "scored": len(ok), "failed": len(acc) - len(ok), "per_question": dict(zip([e.id for e in examples], acc, strict=True))})
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        cmd = " ".join(["benchmarks/reward_landscape.py", *sys.argv[1:]])
        args.out.with_suffix(".md").write_text(f"`{cmd}`\n\n" + "\n".join(lines) + "\n")
        args.out.with_suffix(".json").write_text(json.dumps({
            "command": cmd, "generator": cfg.generator.model, "metric": cfg.eval.metric, "k": k,
            "questions": len(examples), "sample_seed": args.seed if args.sample else None, "variants": rows}, indent=1))
    return 0

# ------------------------------------------------------------------------------------------------ the 8:3:3 landscape

CONDITIONS = (
    ("naive", "naive RAG top-3"),
    ("top3", "(b) oracle selection from top-3"),
    ("top8", "(a) oracle selection from top-8"),
    ("second", "(c) oracle from top-8 + top-8 of the ideal 2nd query"),
    ("gold", "the gold paragraphs (ceiling)"),
)
NOTES_MARK = "<!-- notes: kept when the script rewrites this file -->"


def _fmt(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def landscape833(args: argparse.Namespace) -> int:
    from s3.config import load_config
    from searcher.build import build_retriever

    t_start = time.perf_counter()
    cfg = load_config(args.config, args.overrides)
    prep = load_prepared(cfg, lambda d: build_retriever(cfg.retriever, d))
    retriever = build_retriever(cfg.retriever, prep.index_dir)
    print(prep.baseline_note, flush=True)
    order = list(prep.examples)
    random.Random(args.seed).shuffle(order)
    rank = {e.id: i for i, e in enumerate(order)}
    known = [e for e in order if e.id in prep.baseline]
    sets = {
        "fails": [e for e in known if prep.baseline[e.id] == 0.0][: args.fails],
        "all": known[: args.sample],
    }
    union = list({e.id: e for e in sets["fails"] + sets["all"]}.values())
    pos = {e.id: i for i, e in enumerate(union)}
    counts = dict(prep.counts)
    counts["with_cached_baseline"] = len(known)
    counts["naive_rag_fails"] = sum(prep.baseline[e.id] == 0.0 for e in known)
    print(f"counts so far: {counts}; fails set {len(sets['fails'])}, whole-sample set {len(sets['all'])}, "
          f"{len(union)} distinct questions", flush=True)

    if args.trajectories_only:  # only the searchers' trajectories (another process scores them): no generator call
        for spec in args.searchers:
            name, n_q, only = parse_searcher(spec, max(len(v) for v in sets.values()))
            scfg = load_config(args.config, [*args.overrides, *searcher_overrides(name, args, cfg)])
            qs = list({e.id: e for s in sets if only is None or s == only for e in sets[s][:n_q]}.values())
            qs.sort(key=lambda e: rank[e.id])
            run_searcher(name, qs, scfg, retriever, args.runs / f"trajectories_{name}_{settings_of(cfg, scfg, args)}.jsonl",
                         threads=args.threads)
        return 0

    scorer = Scorer(cfg, prep)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    oc = oracle_contexts(union, retriever, naive_k=cfg.retriever.k, k=args.k, max_select=args.max_select)
    contexts = {"naive": oc.naive, "top3": oc.top3, "top8": oc.top8, "second": oc.second, "gold": oc.gold}
    acc: dict[str, list[float | None]] = {}
    for key, label in CONDITIONS:
        acc[key] = scorer(union, contexts[key], label, gold_cache=(key == "gold"))
    timings["oracle_conditions_s"] = time.perf_counter() - t0

    def landscape_rows(name: str) -> dict[str, Any]:
        idx = [pos[e.id] for e in sets[name]]
        rows = []
        for key, label in CONDITIONS:
            a = [acc[key][i] for i in idx]
            rows.append({"key": key, "context": label, "acc": mean(a), "answered": int(sum(x or 0 for x in a)),
                         "scored": sum(x is not None for x in a),
                         "mean_docs": sum(len(contexts[key][i]) for i in idx) / max(len(idx), 1)})
        reach = {
            "gold_any_top3": sum(oc.gold_in_top3[i] > 0 for i in idx) / max(len(idx), 1),
            "gold_any_top8": sum(oc.gold_in_top8[i] > 0 for i in idx) / max(len(idx), 1),
            "gold_any_second": sum(oc.gold_in_second[i] > 0 for i in idx) / max(len(idx), 1),
            "gold_all_top3": sum(oc.gold_in_top3[i] >= 2 for i in idx) / max(len(idx), 1),
            "gold_all_top8": sum(oc.gold_in_top8[i] >= 2 for i in idx) / max(len(idx), 1),
            "gold_all_second": sum(oc.gold_in_second[i] >= 2 for i in idx) / max(len(idx), 1),
            "needs_second_query": sum(oc.second_query[i] is not None for i in idx) / max(len(idx), 1),
        }
        return {"questions": len(idx), "rows": rows, "reach": reach}

    result: dict[str, Any] = {
        "command": " ".join(["benchmarks/reward_landscape.py", *sys.argv[1:]]),
        "generator": cfg.generator.model, "metric": cfg.eval.metric, "retriever": cfg.retriever.backend,
        "naive_k": cfg.retriever.k, "k": args.k, "max_select": args.max_select, "max_turns": args.max_turns,
        "seed": args.seed, "baseline_note": prep.baseline_note, "counts": counts, "distinct_questions": len(union),
        "llama_threads": os.environ.get("S3_LLAMA_THREADS"),
        "sets": {name: landscape_rows(name) for name in sets}, "searchers": {}, "timings": timings,
    }
    write_outputs(args, result, acc, union, sets, oc)

    if not args.skip_answerable:  # answerable-from-gold among ALL naive-RAG failures of the training set
        t0 = time.perf_counter()
        fails = [e for e in known if prep.baseline[e.id] == 0.0][: args.answerable]
        gold_ctx = [retriever.get(list(e.supporting_ids)) for e in fails]
        g = scorer(fails, gold_ctx, "gold context of every naive-RAG failure (answerable count)", gold_cache=True)
        counts["naive_rag_fails_answerable_from_gold"] = sum(x == 1.0 for x in g)
        counts["naive_rag_fails_checked_from_gold"] = len(fails)
        counts["naive_rag_fails_gold_failed_calls"] = sum(x is None for x in g)
        g_all = [scorer.memo.get((e.id, tuple(e.supporting_ids))) for e in known]
        if all(x is not None for x in g_all):
            counts["training_answerable_from_gold"] = sum(x == 1.0 for x in g_all)
        timings["answerable_count_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    result["survival"] = survival_table(union, retriever, args.budgets)
    timings["survival_s"] = time.perf_counter() - t0
    write_outputs(args, result, acc, union, sets, oc)

    for spec in args.searchers:
        name, n_q, only = parse_searcher(spec, max(len(v) for v in sets.values()))
        scfg = load_config(args.config, [*args.overrides, *searcher_overrides(name, args, cfg)])
        settings = settings_of(cfg, scfg, args)
        subsets = {s: sets[s][:n_q] for s in sets if only is None or s == only}
        qs = list({e.id: e for s in subsets.values() for e in s}.values())
        qs.sort(key=lambda e: rank[e.id])
        path = args.runs / f"trajectories_{name}_{settings}.jsonl"
        t0 = time.perf_counter()
        rows = run_searcher(name, qs, scfg, retriever, path, threads=args.threads)
        t_search = time.perf_counter() - t0
        t0 = time.perf_counter()
        docs = [retriever.get(rows[e.id]["documents"]) for e in qs]
        a = scorer(qs, docs, f"searcher {name}'s documents")
        t_gen = time.perf_counter() - t0
        by_id = dict(zip([e.id for e in qs], a, strict=True))
        entry: dict[str, Any] = {"policy": SEARCHERS[name]["policy"], "model": SEARCHERS[name]["model"],
                                 "settings": settings, "doc_token_budget": scfg.searcher.doc_token_budget,
                                 "max_new_tokens": args.max_new_tokens, "trajectories": str(path),
                                 "search_s": t_search, "generator_s": t_gen, "sets": {}}
        for s, sub in subsets.items():
            summ = searcher_summary([rows[e.id] for e in sub], [by_id[e.id] for e in sub], sub, prep.naive_ids)
            for key in ("naive", "top8", "second"):
                summ[f"{key}_acc_same_questions"] = mean([acc[key][pos[e.id]] for e in sub])
            summ["per_question"] = {e.id: by_id[e.id] for e in sub}
            entry["sets"][s] = summ
        result["searchers"][name] = entry
        timings[f"searcher_{name}_s"] = t_search + t_gen
        write_outputs(args, result, acc, union, sets, oc)
    timings["total_s"] = time.perf_counter() - t_start
    timings["generator_calls"] = scorer.calls
    timings["generator_seconds"] = scorer.seconds
    write_outputs(args, result, acc, union, sets, oc)
    return 0


def write_outputs(args: argparse.Namespace, result: dict[str, Any], acc: dict[str, list[float | None]],
                  union: Sequence[QAExample], sets: dict[str, list[QAExample]], oc: OracleContexts) -> None:
    """OUT.md, OUT.json (per-question accuracies included) and OUT.png; any notes below NOTES_MARK in OUT.md stay."""
    lines = render_md(result)
    print("\n".join(lines), flush=True)
    if not args.out:
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    md = args.out.with_suffix(".md")
    notes = ""
    if md.is_file() and NOTES_MARK in md.read_text():
        notes = md.read_text().split(NOTES_MARK, 1)[1]
    md.write_text("\n".join(lines) + "\n\n" + NOTES_MARK + (notes or "\n"))
    per_q = {e.id: {"set": [s for s in sets if any(x.id == e.id for x in sets[s])],
                    "second_query": oc.second_query[i], "gold_in_top3": oc.gold_in_top3[i],
                    "gold_in_top8": oc.gold_in_top8[i], "gold_in_second": oc.gold_in_second[i],
                    **{k: acc[k][i] for k in acc}} for i, e in enumerate(union)}
    args.out.with_suffix(".json").write_text(json.dumps({**result, "per_question": per_q}, indent=1))
    try:
        plot(result, args.out.with_suffix(".png"))
    except Exception as e:  # the numbers are written; a missing plot is said, not fatal
        print(f"plot failed: {e}", flush=True)


def _answerable(c: dict[str, Any]) -> str:
    if "naive_rag_fails_answerable_from_gold" not in c:
        return "not computed"
    a, n, total = c["naive_rag_fails_answerable_from_gold"], c["naive_rag_fails_checked_from_gold"], c["naive_rag_fails"]
    if n >= total:
        return str(a)
    return f"{a} of the first {n} checked ({a / max(n, 1):.3f}; ~{round(a / max(n, 1) * total)} of {total} estimated)"


def render_md(result: dict[str, Any]) -> list[str]:
    c = result["counts"]
    sets = result["sets"]
    n_f, n_a = sets["fails"]["questions"], sets["all"]["questions"]
    lines = [
        "# The 8:3:3 landscape before training (issue 31, step 1)", "",
        f"`{result['command']}`", "",
        f"Generator {result['generator']} (llama.cpp, greedy), metric {result['metric']} (the training reward's Acc), "
        f"retriever {result['retriever']}, naive RAG top-{result['naive_k']}; {result['k']} documents per query, "
        f"up to {result['max_select']} selected, {result['max_turns']} turns. Training questions of "
        f"configs/transfer.toml (the 110 held-out ones excluded), in one seeded order (seed {result['seed']}): "
        f"**fails** = the first {n_f} that naive RAG gets wrong, **all** = the first {n_a} of any kind.", "",
        f"Baseline cache: {result['baseline_note']}.", "",
        "## Counts", "",
        "| filter | questions |", "| --- | ---: |",
        f"| loaded (HotpotQA TRAIN) | {c.get('loaded')} |",
        f"| without gold paragraphs in the evaluation slices | {c.get('after_exclude_sources')} |",
        f"| no yes/no | {c.get('no_yes_no')} |",
        f"| training (held-out 110 excluded) | {c.get('training_without_heldout')} |",
        f"| naive RAG fails (span, top-3) | {c.get('naive_rag_fails')} |",
        f"| naive RAG fails and answerable from the gold paragraphs | {_answerable(c)} |",
    ]
    if "training_answerable_from_gold" in c:
        lines.append(f"| (all training questions answerable from gold) | {c['training_answerable_from_gold']} |")
    lines += ["", "## Landscape: the generator's accuracy by context", "",
              f"| context | fails ({n_f}) Acc | docs | all ({n_a}) Acc | docs |", "| --- | ---: | ---: | ---: | ---: |"]
    for rf, ra in zip(sets["fails"]["rows"], sets["all"]["rows"], strict=True):
        lines.append(f"| {rf['context']} | **{_fmt(rf['acc'])}** ({rf['answered']}/{rf['scored']}) | {rf['mean_docs']:.2f} "
                     f"| **{_fmt(ra['acc'])}** ({ra['answered']}/{ra['scored']}) | {ra['mean_docs']:.2f} |")
    rf, ra = sets["fails"]["reach"], sets["all"]["reach"]
    lines += ["", "Where the gold paragraphs are (share of questions; HotpotQA questions have 2):", "",
              "| | fails: >= 1 gold | fails: both | all: >= 1 gold | all: both |", "| --- | ---: | ---: | ---: | ---: |"]
    for where, label in (("top3", "naive top-3"), ("top8", "top-8"), ("second", "top-8 + ideal 2nd query")):
        lines.append(f"| {label} | {rf['gold_any_' + where]:.3f} | {rf['gold_all_' + where]:.3f} | "
                     f"{ra['gold_any_' + where]:.3f} | {ra['gold_all_' + where]:.3f} |")
    lines.append(f"| (questions with a gold paragraph missing from the top-8) | {rf['needs_second_query']:.3f} | | "
                 f"{ra['needs_second_query']:.3f} | |")
    if result.get("searchers"):
        lines += ["", "## (d) Untrained searchers in the s3 loop", "",
                  "Begin-with-search top-3 (naive RAG's documents), then up to 3 search turns of 8 documents, up to 3 "
                  "selected per window (#MaxContexts 9), greedy. *new gold kept*: the searcher's documents hold a gold "
                  "paragraph naive top-3 missed; *new gold retrieved*: one of its search windows did (kept or not). The "
                  "naive / oracle columns are on the same questions.", "",
                  "| searcher | set (n) | Acc | naive top-3 | (a) oracle top-8 | (c) oracle + 2nd query | searches / q "
                  "| docs | new gold kept | new gold retrieved | same docs as naive | invalid replies | s / q |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, e in result["searchers"].items():
            for s, m in e["sets"].items():
                lines.append(
                    f"| {name} ({e['policy']}, budget {e['doc_token_budget']}) | {s} ({m['questions']}) | **{_fmt(m['acc'])}** "
                    f"| {_fmt(m['naive_acc_same_questions'])} | {_fmt(m['top8_acc_same_questions'])} "
                    f"| {_fmt(m['second_acc_same_questions'])} | {m['searches_per_question']:.2f} | {m['documents']:.2f} "
                    f"| {m['new_gold_kept']:.3f} | {m['new_gold_retrieved']:.3f} | {m['same_documents_as_naive']:.3f} "
                    f"| {m['invalid_replies']:.3f} | {m['seconds_per_question']:.1f} |")
    if "survival" in result:
        sv = result["survival"]
        lines += ["", "## The searcher's view: does the answer survive the per-document token budget?", "",
                  f"{sv['gold_paragraphs']} gold paragraphs of the {result.get('distinct_questions')} distinct questions of "
                  f"both sets (median {sv['median_words']} "
                  f"words); {sv['answer_in_text']} contain a gold answer in their text (span check), "
                  f"{sv['answer_in_title']} in their title (titles are never cut). Of the answer-bearing ones:", "",
                  "| budget | unit | answer still in view | whole paragraph in view |", "| ---: | --- | ---: | ---: |"]
        for unit, by_b in sv["survives"].items():
            for b, v in by_b.items():
                lines.append(f"| {b} | {unit} | {v['answer_survives']:.3f} | {v['paragraph_whole']:.3f} |")
    t = result["timings"]
    lines += ["", f"## Time (seconds; this shared 2-core machine, S3_LLAMA_THREADS={result.get('llama_threads')}, nice 10)", "",
              ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}" for k, v in t.items())]
    return lines


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["naive\ntop-3", "(b) oracle\ntop-3", "(a) oracle\ntop-8", "(c) oracle\n+2nd query", "gold\nparagraphs"]
    series: dict[str, list[float | None]] = {s: [r["acc"] or 0.0 for r in result["sets"][s]["rows"]] for s in ("fails", "all")}
    for name, e in result.get("searchers", {}).items():  # a searcher run on one set only has no bar for the other
        ns = "/".join(str(m["questions"]) for m in e["sets"].values())
        labels.append(f"(d) {name.replace('-llamacpp', ' (llama.cpp)').replace(' (', chr(10) + '(')}\nn={ns}")
        for s in series:
            series[s].append((e["sets"][s]["acc"] or 0.0) if s in e["sets"] else None)
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(labels)), 4.5))
    w = 0.38
    for j, (s, vals) in enumerate(series.items()):
        n = result["sets"][s]["questions"]
        shown = [(i, v) for i, v in enumerate(vals) if v is not None]
        xs = [i + (j - 0.5) * w for i, _ in shown]
        bars = ax.bar(xs, [v for _, v in shown], w, label=f"{'naive RAG fails' if s == 'fails' else 'all training'} ({n})")
        for b, (_, v) in zip(bars, shown, strict=True):
            ax.text(b.get_x() + b.get_width() / 2, v + 0.005, f"{v:.2f}", ha="center", fontsize=7)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(f"generator Acc ({result['metric']})")
    ax.set_title(f"8:3:3 landscape, generator {result['generator']}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ the CLI


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "cpu_train.toml"))
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", type=int, default=None,
                    help="a random sample of this many training questions (seeded); with --landscape833 the size of "
                         "the whole-training-set sample (default 200)")
    ap.add_argument("--out", type=Path, default=None, help="also write OUT.md and OUT.json (and OUT.png)")
    ap.add_argument("--landscape833", action="store_true", help="the 8:3:3 landscape of issue 31 (see above)")
    ap.add_argument("--fails", type=int, default=200, help="naive-RAG failures in the fails set")
    ap.add_argument("--k", type=int, default=8, help="documents per query")
    ap.add_argument("--max-select", type=int, default=3)
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--searcher", action="append", default=[], dest="searchers", metavar="NAME[:N[:SET]]",
                    help=f"an untrained searcher ({', '.join(SEARCHERS)}) on the first N questions of each set "
                         "(or of SET only: fails / all)")
    ap.add_argument("--doc-token-budget", type=int, default=None, help="the searcher's per-document budget "
                    "(default: the config's searcher.doc_token_budget)")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="tokens a searcher reply may have")
    ap.add_argument("--budgets", type=int, nargs="+", default=[48, 96, 160], help="budgets of the survival table")
    ap.add_argument("--answerable", type=int, default=None, help="check answerable-from-gold on only the first N "
                    "naive-RAG failures of the seeded order (default: all of them)")
    ap.add_argument("--skip-answerable", action="store_true", help="skip the gold-context calls of every failure")
    ap.add_argument("--threads", type=int, default=1, help="torch / policy threads of a searcher (llama.cpp: "
                    "S3_LLAMA_THREADS); on a shared 2-core machine 1 is several times faster than 2")
    ap.add_argument("--trajectories-only", action="store_true",
                    help="only run the searchers' trajectories (no generator call): a second process can run the "
                         "slow searcher while the first scores")
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "landscape", help="trajectories (jsonl) go here")
    args = ap.parse_args()
    if not args.landscape833:
        return legacy_landscape(args)
    if args.sample is None:
        args.sample = 200
    args.runs.mkdir(parents=True, exist_ok=True)
    return landscape833(args)

