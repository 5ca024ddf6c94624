"""`s3 analyze RUN_DIR...`: what searchers do, over `s3 eval` runs (searcher and Search-R1 modes) and training runs.

    runs = [load_run(Path(d)) for d in dirs]                 # results.jsonl + contexts.jsonl + run.json + questions
    a = analyze_s3(run, probe=bridge_probe(retriever, k), genacc=PrefixGenAcc(accuracy, docs, limit=40))
    write_analysis([a, ...], out)                            # analysis.md, behavior.csv, per_turn.csv, PNGs (+ hops.csv)

s3 mode (eval/behavior.py holds the definitions, shared with the trainer's `search/` rows): redundant turns,
premature stops, marginal support recall and GenAcc per turn, selection precision / recall, query drift, and the
searches-vs-hops table (MuSiQue: the hop count in the question id; Bamboogle: 2 hops). Search-R1 mode: over-search
and under-search by the Search Wisely procedure (eval/oversearch.py).

Two measurements cost model calls and are bounded:
  - "another turn would have found it" (premature stop): a retrieval probe. One more search turn's query is unknown
    without the policy, so the probe asks the retriever the query a multi-hop searcher's next hop would ask: the
    question with the titles of the documents it kept (the bridge entities), top-k like every turn.
  - marginal GenAcc per turn: the generator answers from D_s3 after each earlier turn (the final D_s3's answer is
    the run's own row), for the first `limit` questions of each run; identical documents reuse one answer.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.behavior import QuestionBehavior, Trace, bridge_query, needs_probe, question_behavior, summarize
from eval.stats import mean_ci
from generator_adapters.client import run_sync
from s3core.errors import DataFormatError, S3Error
from s3core.io import iter_jsonl, latest_by_id, stored

log = logging.getLogger("s3.analyze")

__all__ = ["RunData", "S3Analysis", "analyze_s3", "bridge_probe", "hops_of", "load_run", "resolve_recorded",
           "write_analysis"]


@dataclass
class RunData:
    """One `s3 eval` run directory, read: rows by question id, trajectories by id, the run's identity, gold."""

    name: str
    dir: Path
    method: str
    config: dict[str, Any]
    rows: dict[str, dict[str, Any]]
    contexts: dict[str, dict[str, Any]]
    gold: dict[str, set[str]]  # question id -> gold supporting paragraph ids
    datasets: dict[str, str]  # question id -> dataset name (metadata.dataset, else the data folder's name)
    dataset_dir: Path | None
    max_turns: int
    k: int

    @property
    def label(self) -> str:
        return self.name


def resolve_recorded(run_dir: Path, recorded: str | None, sibling: str | None = None) -> Path | None:
    """Where a folder run.json recorded is now, or None.

    Runs record paths relative to the run directory (eval/build.py), tried first. Older runs recorded the absolute
    path of the machine that ran them (or one relative to the shell's folder): the run may have moved together with
    its data (a committed run in a fresh clone elsewhere), so a tail of the recorded path (at least two parts) that
    exists under the run's folder or its nearest parent comes next, then the path as recorded, then the run's
    sibling folder `sibling`.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "clone/results/x/data").mkdir(parents=True); (root / "clone/results/x/run").mkdir()
    >>> resolve_recorded(root / "clone/results/x/run", "/old/machine/results/x/data") == root / "clone/results/x/data"
    True
    >>> resolve_recorded(root / "clone/results/x/run", "../data") == root / "clone/results/x/run/../data"
    True
    """
    if recorded:
        p = Path(recorded)
        if not p.is_absolute() and (run_dir / p).is_dir():
            return run_dir / p
        parts = p.parts[1:] if p.is_absolute() else p.parts
        if ".." not in parts:
            here = run_dir.resolve()
            homes = [here, *here.parents][:-1]  # not the filesystem root: that is the recorded path itself
            for home in homes:  # the nearest folder first, there the longest tail (of >= 2 parts) first
                for i in range(len(parts) - 1):
                    if (home / Path(*parts[i:])).is_dir():
                        return home / Path(*parts[i:])
        if p.is_absolute() and p.is_dir():
            return p
    if sibling is not None and (run_dir.parent / sibling).is_dir():
        return run_dir.parent / sibling
    return None


def dataset_rebuild_hint(data: Path, missing: str) -> str:
    """`data/missing` (corpus.jsonl, questions.jsonl) is not there: the `s3 data prepare` command that rebuilds the
    folder from the sources its manifest.json records (paths relative to the folder), or what to do without them."""
    where = f"{data / missing} is missing (a committed run need not keep its data)"
    try:
        manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = {}
    fmt = manifest.get("format")
    sources = [data / str(src["path"]) for src in manifest.get("sources") or [] if isinstance(src, dict) and src.get("path")]
    if not fmt or not sources:
        return f"{where}: put it there, or pass --dataset DIR, a folder `s3 data prepare` wrote"
    inputs = " ".join(shlex.quote(os.path.relpath(p.resolve())) for p in sources)
    cmd = f"s3 data prepare {fmt} --input {inputs} --out {shlex.quote(os.path.relpath(data.resolve()))}"
    gone = [os.path.relpath(p.resolve()) for p in sources if not p.is_file()]
    note = (f" (not found from here: {', '.join(gone)}; give your copies: manifest.json has their sha256)"
            if gone else "")
    return f"{where}: rebuild the folder with `{cmd}`{note}, then run the command again"


def load_run(run_dir: Path, dataset_dir: Path | None = None, name: str | None = None) -> RunData:
    """Read an `s3 eval` RUN_DIR. The dataset folder (questions.jsonl with metadata.supporting_ids) is `dataset_dir`,
    else the one run.json names, else RUN_DIR/../data."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise S3Error(f"{run_dir}: no such run directory")
    results = stored(run_dir / "results.jsonl")  # or results.jsonl.gz: a run archived in benchmarks/results
    if not results.is_file():
        raise S3Error(f"{run_dir}: no results.jsonl (an `s3 eval` run directory has one; a training run has "
                      "metrics.jsonl: pass it to `s3 analyze` as well)")
    rj = run_dir / "run.json"
    config: dict[str, Any] = json.loads(rj.read_text()).get("config", {}) if rj.is_file() else {}
    rows = latest_by_id(results, what="results row")
    ctx_path = run_dir / "contexts.jsonl"
    contexts = latest_by_id(ctx_path, what="contexts row")  # {} when the run kept none
    ds = dataset_dir or resolve_recorded(run_dir, (config.get("dataset") or {}).get("dir"), "data")
    gold: dict[str, set[str]] = {}
    datasets: dict[str, str] = {}
    questions = stored(ds / "questions.jsonl") if ds is not None else None  # or questions.jsonl.gz
    if questions is not None and questions.is_file():
        for lineno, q in iter_jsonl(questions, what="question"):
            if "id" not in q:
                raise DataFormatError(f"{questions}:{lineno}: a question without an id")
            meta = q.get("metadata") or {}
            gold[str(q["id"])] = set(meta.get("supporting_ids") or [])
            datasets[str(q["id"])] = str(meta.get("dataset") or questions.parent.parent.name)
    elif contexts:
        fix = (dataset_rebuild_hint(ds, "questions.jsonl") if ds is not None else
               "no dataset folder found (run.json's dataset.dir, RUN_DIR/../data): pass --dataset DIR")
        log.warning(f"warning: {run_dir}: gold paragraphs unknown, so support recall, redundancy and selection "
                    f"precision are not measured: {fix}")
    searcher = config.get("searcher") or {}
    retr = config.get("retriever") or {}
    return RunData(
        name=name or f"{run_dir.parent.name}/{run_dir.name}", dir=run_dir, method=str(config.get("method") or
        ("searcher" if contexts else "unknown")), config=config, rows=rows, contexts=contexts, gold=gold,
        datasets=datasets, dataset_dir=ds, max_turns=int(searcher.get("max_turns") or 3), k=int(retr.get("k") or 3),
    )


def index_dir_of(run: RunData) -> Path | None:
    """The run's retrieval index: the one run.json recorded (`resolve_recorded`), else RUN_DIR/../index."""
    return resolve_recorded(run.dir, (run.config.get("retriever") or {}).get("index"), "index")


# ----------------------------------------------------------------------------------------------- hops


_HOPS = re.compile(r"^(\d)hop")


def hops_of(qid: str, dataset: str) -> int | None:
    """Annotated hops: MuSiQue's id starts with the hop count ("2hop__...", "3hop1__..."); every Bamboogle question
    has 2; None elsewhere.

    >>> hops_of("3hop1__9285_5188_23307", "musique"), hops_of("bb-12", "bamboogle"), hops_of("5a8c", "hotpotqa")
    (3, 2, None)
    """
    m = _HOPS.match(qid)
    if m and "musique" in dataset.lower():
        return int(m.group(1))
    if "bamboogle" in dataset.lower():
        return 2
    return None


def hop_table(items: Sequence[tuple[int, int, float | None]]) -> dict[str, Any]:
    """(searches, hops, correct) per question -> the Search Wisely Table 4 shares: Less / Match / More x Correct /
    Incorrect, in % of the questions with hops (a question whose correctness is unknown counts in Sum only)."""
    n = len(items)
    out: dict[str, Any] = {"questions": n}
    for cat, test in (("less", lambda s, h: s < h), ("match", lambda s, h: s == h), ("more", lambda s, h: s > h)):
        sel = [c for s, h, c in items if test(s, h)]
        out[cat] = {"correct": 100 * sum(1 for c in sel if c == 1.0) / n if n else None,
                    "incorrect": 100 * sum(1 for c in sel if c == 0.0) / n if n else None,
                    "sum": 100 * len(sel) / n if n else None}
    return out


# ----------------------------------------------------------------------------------------------- s3 mode


ProbeFn = Callable[[list[Trace]], list[list[str]]]


def bridge_probe(retriever: Any, k: int, titles: Callable[[list[str]], dict[str, str]]) -> ProbeFn:
    """What one more search turn would retrieve, without the policy: top-k of the question + the titles of the
    documents in D_s3 (the bridge entities a next hop would ask about), one batched retrieval call."""

    def probe(traces: list[Trace]) -> list[list[str]]:
        ids = sorted({i for t in traces for i, _ in t.documents})
        names = titles(ids)
        queries = [bridge_query(t.question, [names.get(i, "") for i, _ in t.documents]) for t in traces]
        return [[d.id for d in docs] for docs in retriever.search(queries, k)] if queries else []

    return probe


@dataclass
class PrefixGenAcc:
    """Marginal GenAcc: Acc(G(Q, D_s3 after turn t)) for each turn t before the last, for the first `limit` questions.
    `documents(ids)` gives the texts; `accuracy` is eval/accuracy.py's Acc (the run's generator and judge)."""

    accuracy: Any
    documents: Callable[[set[str]], dict[str, Any]]
    limit: int = 40
    calls: int = 0

    def __call__(self, run: RunData, traces: list[Trace]) -> dict[str, list[float | None]]:
        from tqdm import tqdm

        want: list[tuple[str, int, tuple[str, ...]]] = []
        out: dict[str, list[float | None]] = {}
        for tr in traces[: self.limit]:
            row = run.rows.get(tr.qid)
            final = (row or {}).get("metrics", {}).get("genacc") if row else None
            last = tr.last_turn
            prefix: list[float | None] = [None] * last
            out[tr.qid] = [*prefix, final]
            final_docs = tr.d_after(last)
            for t in range(last):
                d = tr.d_after(t)
                if d == final_docs:
                    out[tr.qid][t] = final
                else:
                    order = tuple(i for i, turn in tr.documents if turn <= t)
                    want.append((tr.qid, t, order))
        unique = sorted({w[2] for w in want})
        if not unique:
            return out
        texts = self.documents({i for o in unique for i in o})
        qtext = {tr.qid: tr.question for tr in traces}
        gold = {q: (run.rows.get(q) or {}).get("golden_answers") or [] for q in qtext}
        by_key: dict[tuple[str, tuple[str, ...]], float | None] = {}
        keys = sorted({(q, o) for q, _, o in want})
        bar = tqdm(total=len(keys), desc=f"per-turn GenAcc {run.name}", unit="answer")
        for start in range(0, len(keys), 8):
            chunk = keys[start : start + 8]
            accs = run_sync(self.accuracy([qtext[q] for q, _ in chunk], [[texts[i] for i in o] for _, o in chunk],
                                             [gold[q] for q, _ in chunk]))
            self.calls += len(chunk)
            by_key.update(zip(chunk, accs, strict=True))
            bar.update(len(chunk))
        bar.close()
        for q, t, o in want:
            out[q][t] = by_key[(q, o)]
        return out


@dataclass
class S3Analysis:
    run: RunData
    behaviors: list[QuestionBehavior]
    summary: dict[str, Any]
    hops: dict[str, Any] | None
    by_dataset: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def traces_of(run: RunData) -> list[Trace]:
    """The run's trajectories in results order (questions without one are left out)."""
    order = [q for q in run.rows if q in run.contexts] or list(run.contexts)
    return [Trace.from_row(run.contexts[q]) for q in order]


def analyze_s3(run: RunData, probe: ProbeFn | None = None, genacc: PrefixGenAcc | None = None,
               n_resamples: int = 1000) -> S3Analysis:
    """The s3-mode behaviour of one searcher run (see the module docstring)."""
    traces = traces_of(run)
    if not traces:
        raise S3Error(f"{run.dir}: no trajectories (contexts.jsonl): a searcher run made by `s3 eval --method searcher`"
                      " keeps them; an older run or another method has none to analyse")
    notes = []
    untraced = sum(1 for q in run.rows if q not in run.contexts)
    # GenAcc is the run's, over every scored row (what summary.json and the leaderboard say); the behaviour needs a
    # trajectory, so it is over the questions with one, and a row without one is said, never silently dropped
    run_genacc = mean_ci([(row.get("metrics") or {}).get("genacc") for row in run.rows.values()],
                         n_resamples=n_resamples)
    if untraced:
        notes.append(f"{untraced} of the run's {len(run.rows)} results rows have no trajectory in contexts.jsonl: "
                     f"GenAcc is over the {run_genacc['n']} scored rows, every behaviour number over the "
                     f"{len(traces)} questions with a trajectory")
    probes: dict[str, list[str]] = {}
    if probe is not None:
        stopped = [t for t in traces if needs_probe(t, run.gold.get(t.qid, set()), run.max_turns)]
        for start in range(0, len(stopped), 64):
            chunk = stopped[start : start + 64]
            probes.update({t.qid: p for t, p in zip(chunk, probe(chunk), strict=True)})
        notes.append(f"premature stops judged by a bridge-query retrieval probe on the {len(stopped)} stops with "
                     "support missing")
    gen = genacc(run, traces) if genacc is not None else {}
    if genacc is not None:
        notes.append(f"marginal GenAcc on the first {min(genacc.limit, len(traces))} questions "
                     f"({genacc.calls} generator answers: a prefix with the final documents reuses the row)")
    bs = [question_behavior(t, run.gold.get(t.qid, set()), run.max_turns,
                            probe_ids=probes.get(t.qid, []) if probe is not None else None,
                            genacc_after=gen.get(t.qid)) for t in traces]
    summary = summarize(bs, run.max_turns, n_resamples=n_resamples)
    summary["genacc"] = run_genacc
    summary["rows"], summary["rows_without_trajectory"] = len(run.rows), untraced
    hop_items = []
    for b, _t in zip(bs, traces, strict=True):
        h = hops_of(b.qid, run.datasets.get(b.qid, run.dir.parent.name))
        if h is not None:
            hop_items.append((1 + b.search_turns, h, (run.rows.get(b.qid) or {}).get("metrics", {}).get("genacc")))
    return S3Analysis(run=run, behaviors=bs, summary=summary, hops=hop_table(hop_items) if hop_items else None,
                      notes=notes)


# ----------------------------------------------------------------------------------------------- output


def _fmt(r: dict[str, Any] | None, pct: bool = False, with_n: bool = False) -> str:
    """A rate as `mean [lo, hi]`; `with_n` adds what it is a rate OF (its denominator: questions, search turns,
    stops), so "100.0 [100.0, 100.0] (n=1)" is not read as a finding.

    >>> _fmt({"mean": 1.0, "ci95": [1.0, 1.0], "n": 1}, pct=True, with_n=True)
    '100.0 [100.0, 100.0] (n=1)'
    >>> _fmt({"mean": None, "ci95": None, "n": 0}, pct=True, with_n=True)
    '- (n=0)'
    """
    n = f" (n={r['n']})" if with_n and r is not None and r.get("n") is not None else ""
    if not r or r.get("mean") is None:
        return "-" + n
    m = r["mean"] * (100 if pct else 1)
    ci = r.get("ci95")
    if ci and ci[0] == ci[0]:
        lo, hi = (c * (100 if pct else 1) for c in ci)
        return (f"{m:.1f} [{lo:.1f}, {hi:.1f}]" if pct else f"{m:.3f} [{lo:.3f}, {hi:.3f}]") + n
    return (f"{m:.1f}" if pct else f"{m:.3f}") + n


S3_RATES = [
    ("genacc", "GenAcc (final D_s3, every scored row)", True),
    ("queries_per_question", "queries per question", False),
    ("redundant_turn_rate", "redundant turns (% of search turns)", True),
    ("redundant_support_rate", "... support already complete", True),
    ("redundant_answer_rate", "... generator already right", True),
    ("stop_rate", "stopped before the budget (% of questions)", True),
    ("stop_missing_support_rate", "stops with support missing (% of stops)", True),
    ("premature_stop_rate", "premature stops (% of stops)", True),
    ("invalid_turn_rate", "invalid replies (% of the policy's replies)", True),
    ("support_recall", "support recall of D_s3", True),
    ("selection_precision", "selection precision (gold share of D_s3)", True),
    ("selection_recall", "selection recall (of gold shown)", True),
    ("query_overlap", "query overlap with the question", True),
    ("query_is_question_rate", "queries that restate the question", True),
]


def s3_rows(analyses: Sequence[S3Analysis]) -> list[dict[str, Any]]:
    """One CSV row per run x rate: run, rate, mean, ci_lo, ci_hi, n."""
    out = []
    for a in analyses:
        for key, _, _ in S3_RATES:
            r = a.summary.get(key)
            if not r:
                continue
            ci = r.get("ci95") or [None, None]
            out.append({"run": a.run.name, "rate": key, "mean": r.get("mean"), "ci_lo": ci[0], "ci_hi": ci[1],
                        "n": r.get("n")})
    return out


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> bool:
    """Write `rows` as CSV; False (nothing written) when there are none."""
    if not rows:
        return False
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return True


def s3_markdown(analyses: Sequence[S3Analysis]) -> list[str]:
    """The s3-mode part of analysis.md: the rates side by side, per-turn tables, hop tables."""
    if not analyses:
        return []
    lines = ["## Searchers (s3 mode)", "",
             "Rates in %, with 95% percentile-bootstrap intervals over questions (1,000 resamples) and n, what the "
             "rate is a share of (questions, search turns, stops, replies); a rate per turn or per stop resamples whole "
             "questions.", ""]
    lines += ["| | " + " | ".join(a.run.name for a in analyses) + " |", "| --- |" + " ---: |" * len(analyses)]
    lines.append("| questions with a trajectory | " + " | ".join(str(a.summary["questions"]) for a in analyses)
                 + " |")
    if any(a.summary.get("rows_without_trajectory") for a in analyses):
        lines.append("| results rows without one | " + " | ".join(str(a.summary.get("rows_without_trajectory", 0))
                                                             for a in analyses) + " |")
    for key, label, pct in S3_RATES:
        if any(key in a.summary for a in analyses):
            lines.append(f"| {label} | " + " | ".join(_fmt(a.summary.get(key), pct, with_n=True) for a in analyses)
                         + " |")
    lines.append("")
    lines += ["### Per turn", "",
              "recall after t: support recall of D_s3 after turn t over all questions (a question that stopped keeps "
              "its documents); marginal recall: recall gained at turn t over the questions that searched at t (n); "
              "marginal GenAcc likewise, on the questions measured; overlap: query overlap with the question.", ""]
    for a in analyses:
        lines += [f"**{a.run.name}**", "", "| turn | questions | recall after | marginal recall (n) | GenAcc after | "
                  "marginal GenAcc (n) | query overlap |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in a.summary["per_turn"]:
            def f(v: Any) -> str:
                return "-" if v is None else f"{v:.3f}"
            lines.append(f"| {r['turn']} | {r['questions']} | {f(r['recall_after'])} | {f(r['marginal_recall'])} "
                         f"({r['marginal_recall_n']}) | {f(r['genacc_after'])} | {f(r['marginal_genacc'])} "
                         f"({r['marginal_genacc_n']}) | {f(r['query_overlap'])} |")
        lines.append("")
        lines += [f"- {n}" for n in a.notes]
        if a.notes:
            lines.append("")
    hop_runs = [a for a in analyses if a.hops]
    if hop_runs:
        lines += ["### Retrievals vs annotated hops", "",
                  "Retrievals = 1 (begin-with-search on the question) + search turns; % of questions (Search Wisely "
                  "Table 4's layout; Correct / Incorrect by GenAcc).", "",
                  "| run | retrievals vs hops | correct % | incorrect % | sum % |", "| --- | --- | ---: | ---: | ---: |"]
        lines += _hop_lines(hop_runs)
        lines.append("")
    return lines


def _hop_lines(items: Sequence[Any]) -> list[str]:
    out = []
    for a in items:
        for cat in ("less", "match", "more"):
            c = a.hops[cat]
            out.append(f"| {a.run.name} | {cat} | {c['correct']:.1f} | {c['incorrect']:.1f} | {c['sum']:.1f} |")
    return out


def hop_rows(items: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"run": a.run.name, "category": cat, **a.hops[cat], "questions": a.hops["questions"]}
            for a in items if a.hops for cat in ("less", "match", "more")]


def plot_s3(analyses: Sequence[S3Analysis], path: Path) -> Path | None:
    """Per-turn support recall (cumulative) and marginal recall per run, and the main rates with intervals."""
    if not analyses:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for a in analyses:
        pt = a.summary["per_turn"]
        ts = [r["turn"] for r in pt]
        axes[0].plot(ts, [r["recall_after"] if r["recall_after"] is not None else float("nan") for r in pt],
                     marker="o", label=a.run.name)
        axes[1].plot(ts, [r["marginal_recall"] if r["marginal_recall"] is not None else float("nan") for r in pt],
                     marker="o", label=a.run.name)
    axes[0].set_title("support recall of D_s3 after turn t")
    axes[0].set_ylim(0, 1)
    axes[1].set_title("marginal support recall of turn t")
    for ax in axes[:2]:
        ax.set_xlabel("turn")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # turns are whole: no 0.5, 1.5 ticks
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    keys = [("redundant_turn_rate", "redundant\nturns"), ("stop_rate", "stops"),
            ("premature_stop_rate", "premature\nstops"), ("invalid_turn_rate", "invalid\nreplies"),
            ("selection_precision", "selection\nprecision"), ("support_recall", "support\nrecall")]
    width = 0.8 / len(analyses)
    for j, a in enumerate(analyses):
        xs, ys, lo, hi = [], [], [], []
        for i, (k, _) in enumerate(keys):
            r = a.summary.get(k) or {}
            if r.get("mean") is None:
                continue
            xs.append(i + j * width)
            ys.append(r["mean"])
            ci = r.get("ci95") or [r["mean"], r["mean"]]
            lo.append(max(0.0, r["mean"] - ci[0]))
            hi.append(max(0.0, ci[1] - r["mean"]))
        axes[2].bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=a.run.name)
    axes[2].set_xticks([i + 0.4 - width / 2 for i in range(len(keys))], [lab for _, lab in keys], fontsize=7)
    axes[2].set_title("rates (95% bootstrap CI over questions)")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_analysis(s3: Sequence[S3Analysis], r1: Sequence[Any], training: Sequence[Any], out: Path,
                   extra_md: Sequence[str] = ()) -> dict[str, Path]:
    """analysis.md (+ .json), behavior.csv, per_turn.csv, hops.csv (only where questions carry annotated hops:
    `hops_of`), behavior.png; the Search-R1 and training parts come from eval/oversearch.py and training/collapse.py objects
    (their own `markdown`, `rows`, `plot`). Returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    md = ["# What the searchers do", ""]
    md += s3_markdown(s3)
    for part in r1:
        md += part.markdown()
    for part in training:
        md += part.markdown()
    md += list(extra_md)
    hop_items: list[Any] = [a for a in s3 if a.hops] + [p for p in r1 if getattr(p, "hops", None)]
    for name, rows in (("behavior.csv", s3_rows(s3) + [r for p in r1 for r in p.rows()]),
                       ("per_turn.csv", [{"run": a.run.name, **r} for a in s3 for r in a.summary["per_turn"]]),
                       ("hops.csv", hop_rows(hop_items))):
        if _write_csv(out / name, rows):
            files[name] = out / name
    if (s3 or r1) and not hop_items:
        (out / "hops.csv").unlink(missing_ok=True)  # an earlier analysis's, of other runs
        md += ["No hops.csv: no question of these runs carries an annotated hop count (MuSiQue's ids, Bamboogle); "
               "HotpotQA and 2WikiMultihopQA have none.", ""]
    p = plot_s3(s3, out / "behavior.png")
    if p:
        md += ["![per-turn recall and rates](behavior.png)", ""]
        files["behavior.png"] = p
    for part in r1:
        q = part.plot(out)
        if q:
            md += [f"![Search-R1 steps]({q.name})", ""]
            files[q.name] = q
    for part in training:
        q = part.plot(out)
        if q:
            md += [f"![collapse]({q.name})", ""]
            files[q.name] = q
    (out / "analysis.md").write_text("\n".join(md) + "\n")
    summary = {"s3": {a.run.name: {k: v for k, v in a.summary.items()} | {"hops": a.hops} for a in s3},
               "search_r1": {p.run.name: p.summary for p in r1},
               "training": {str(t.run_dir): t.summary() for t in training}}
    (out / "analysis.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    files.update({"analysis.md": out / "analysis.md", "analysis.json": out / "analysis.json"})
    return files
