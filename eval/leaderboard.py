"""The generator leaderboard: one table from many `s3 eval` runs, in the s3 paper's style.

Rows = generator x label, columns = datasets, cells = GenAcc with EM in brackets ("62.4 (11.1)"), then the mean
over datasets, total $ cost and mean latency per question. A run's *label* is its method unless it is given one
(`labels`, `s3 leaderboard --label RUN_DIR=NAME`; nothing a run writes names it, so the label comes from the command
line): two runs of one method sit side by side under two labels (`naive_rag_top4`, `searcher_trained`).

GBR rows give a label's GenAcc minus a baseline label's (points, EM in brackets), per dataset and on the mean:

- without `baseline` (the paper's GBR, today's default): every label of a `searcher` run minus `naive_rag`, so with
  no labels given the one row is searcher - naive RAG, as it always was;
- with `baseline=LABEL` (`--baseline LABEL`): every other label of the generator minus LABEL.

Where both runs kept results.jsonl, a GBR cell is the paired difference over the questions both runs scored, with
a paired-bootstrap 95% interval that resamples those questions (eval/stats.py `paired_diff_ci`: 2,000 resamples,
`seed`): "+11.0 [+4.0, +20.0] (+9.0)". When the runs scored the same questions this is the difference of their
summaries' means; a run without results.jsonl falls back to that difference, with no interval. The mean column's
interval pools the paired questions of every dataset, so it is given only when each dataset has the same number
(then the pooled mean is the mean over datasets). A generator without the baseline gets no GBR row and a one-line
note; an unknown `baseline` is refused, naming the labels present.

Runs of one method must share retriever backend and generator prompt, and (on the same dataset) the corpus; runs
of one label must also share k (naive RAG top-4 may sit beside top-3 under its own label). Otherwise the board is
refused with a message naming each difference. Two runs for one cell (generator, label, dataset) are refused too.

The CSV appends label, baseline and, per dataset and the mean, the GBR interval and its paired-question count after
the columns it always had (their names and order are unchanged); the PNG adds a panel of the GBR rows when any.
With no labels and no baseline the rows and their order are what they were before labels existed; what changed:
a GBR cell of runs with results.jsonl is the paired difference with its interval (it differs from the old
difference of summaries only where one run scored a question the other did not), the CSV's appended columns, the
PNG's GBR panel, and a note where a generator has a searcher run but no naive_rag one.

    board = build_leaderboard([Path("runs/eval/qwen05-hotpot-rag"), ...])
    board = build_leaderboard(paths, labels={Path("runs/top4"): "naive_rag_top4"}, baseline="naive_rag")
    write_leaderboard(board, Path("runs/leaderboard"))   # leaderboard.md / .csv / .html / .png
                                                         # + reports/*/index.html: each searcher run's trajectory
                                                         # browser (eval/browser.py), linked from the .html
"""

from __future__ import annotations

import csv
import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.harness import GENERIC_DIR_NAMES, dataset_name
from eval.methods import METHODS
from eval.rundir import RESULTS_FILE, read_results, row_failed
from eval.stats import paired_diff_ci, stratified_mean_ci
from s3core.errors import DataFormatError, S3Error
from s3core.io import stored

METHOD_LABELS = {
    "no_retrieval": "No retrieval",
    "naive_rag": "Naive RAG",
    "title_following": "Title-following script",
    "searcher": "s3 searcher",
    "search_r1": "Search-R1",
    "search_r1_ret": "Search-R1 (Ret)",
}
GBR = "gbr"
DEFAULT_BASELINE = "naive_rag"  # the paper's GBR: searcher - naive RAG
GBR_RESAMPLES = 2000  # paired_diff_ci's resamples (benchmarks/transfer_checks.py's report uses the same)
_GBR_NAMES = {"naive_rag": "naive RAG", "title_following": "title-following"}
_LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


class LeaderboardError(S3Error):
    """The runs cannot be put in one table (they differ where they must not, or two fill one cell)."""


@dataclass
class RunInfo:
    """What the leaderboard needs from one run's summary.json."""

    path: Path
    dataset: str
    method: str
    generator: str
    genacc: float | None
    em: float | None
    f1: float | None
    genacc_ci: list[float] | None
    n_scored: int
    n_failed: int
    cost_usd: float | None  # None: a paid answer's price was unknown
    mean_latency_s: float | None
    retriever: dict[str, Any]
    prompt_sha256: str | None
    config: dict[str, Any] = field(repr=False, default_factory=dict)
    correct: float | None = None  # sum of GenAcc over scored rows (the denominator of cost per correct answer)
    saved_usd: float = 0.0  # what the response cache's hits saved
    cache_hits: int = 0
    label: str = ""  # the row this run fills; "" = its method

    def __post_init__(self) -> None:
        self.label = self.label or self.method

    @property
    def run_dir(self) -> Path:
        return self.path if self.path.is_dir() else self.path.parent


def _metric(summary: dict[str, Any], key: str) -> tuple[float | None, list[float] | None]:
    m = summary.get("metrics", {}).get(key) or {}
    return m.get("mean"), m.get("ci95")


def load_run(path: Path, label: str | None = None) -> RunInfo:
    """Read RUN_DIR/summary.json (or a summary.json path) into a RunInfo; `label` names its row (default: method)."""
    f = path / "summary.json" if path.is_dir() else path
    if not f.is_file():
        raise DataFormatError(f"{path}: no summary.json (is this an `s3 eval --out` folder? has the run finished once?)")
    try:
        s = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataFormatError(f"{f}: not valid JSON ({e.msg})") from None
    cfg = s.get("config") or {}
    try:
        dataset = str(cfg["dataset"]["name"])
        if dataset.lower() in GENERIC_DIR_NAMES and cfg["dataset"].get("dir"):  # a run written before names were fixed
            dataset = dataset_name(f.parent / str(cfg["dataset"]["dir"]))
        method = str(cfg["method"])
        generator = str((cfg.get("generator") or {}).get("model") or cfg.get("agent", {}).get("model") or "?")
    except (KeyError, TypeError):
        raise DataFormatError(f"{f}: summary has no config.dataset.name / config.method") from None
    genacc, ci = _metric(s, "genacc")
    em, _ = _metric(s, "em")
    f1, _ = _metric(s, "f1")
    totals = s.get("totals") or {}
    return RunInfo(
        path=path,
        dataset=dataset,
        method=method,
        generator=generator,
        genacc=genacc,
        em=em,
        f1=f1,
        genacc_ci=ci,
        n_scored=int(s.get("n_scored", 0)),
        n_failed=int(s.get("n_failed", 0)),
        cost_usd=None if "cost_usd" in totals and totals["cost_usd"] is None else float(totals.get("cost_usd") or 0.0),
        mean_latency_s=totals.get("wall_s_per_question") or totals.get("mean_latency_s"),
        retriever=cfg.get("retriever") or {},
        prompt_sha256=(cfg.get("generator") or {}).get("prompt_sha256"),
        config=cfg,
        correct=totals.get("correct"),
        saved_usd=float(totals.get("saved_usd") or 0.0),
        cache_hits=int(totals.get("cache_hits") or 0),
        label=label or method,
    )


def parse_label(spec: str) -> tuple[Path, str]:
    """`RUN_DIR=NAME` (s3 leaderboard --label) -> (RUN_DIR, NAME).

    >>> parse_label("runs/top4=naive_rag_top4")
    (PosixPath('runs/top4'), 'naive_rag_top4')
    """
    run, sep, name = spec.rpartition("=")
    if not sep or not run:
        raise LeaderboardError(f"label {spec!r}: give it as RUN_DIR=NAME, e.g. runs/qwen/top4=naive_rag_top4")
    check_label(name)
    return Path(run), name


def check_label(name: str) -> None:
    """A label is letters, digits and _ . + - (it names a row, a CSV cell and a file), starting with a letter/digit."""
    if not _LABEL_RE.fullmatch(name):
        raise LeaderboardError(f"label {name!r}: use letters, digits and _ . + - only (e.g. naive_rag_top4)")
    if name == GBR:
        raise LeaderboardError(f"label {name!r} is the GBR rows' own; choose another")


def check_comparable(runs: list[RunInfo]) -> None:
    """Refuse runs of one method that differ in retriever backend, corpus (same dataset) or generator prompt, runs of
    one label that differ in k or in method, and two runs for one (generator, label, dataset) cell.

    k is compared only among runs with the same label: naive RAG's top-4 under its own label is a different row from
    top-3, not a broken copy of it. With no labels given the label is the method, and the checks are the old ones."""
    problems: list[str] = []
    by_method: dict[str, list[RunInfo]] = {}
    by_label: dict[str, list[RunInfo]] = {}
    for r in runs:
        by_method.setdefault(r.method, []).append(r)
        by_label.setdefault(r.label, []).append(r)
    for method, group in by_method.items():
        ref = group[0]
        for r in group[1:]:
            a, b = ref.retriever.get("backend"), r.retriever.get("backend")
            if a != b:
                problems.append(f"{method}: retriever backend {a!r} ({ref.path}) != {b!r} ({r.path})")
            if ref.prompt_sha256 != r.prompt_sha256:
                problems.append(
                    f"{method}: generator prompt sha256 {str(ref.prompt_sha256)[:12]} ({ref.path}) != "
                    f"{str(r.prompt_sha256)[:12]} ({r.path})"
                )
        by_ds: dict[str, RunInfo] = {}
        for r in group:
            first = by_ds.setdefault(r.dataset, r)
            a, b = first.retriever.get("corpus_sha256"), r.retriever.get("corpus_sha256")
            if a != b:
                problems.append(
                    f"{method} on {r.dataset}: corpus sha256 {str(a)[:12]} ({first.path}) != {str(b)[:12]} ({r.path})"
                )
    for label, group in by_label.items():
        ref = group[0]
        for r in group[1:]:
            if r.method != ref.method:
                problems.append(f"label {label}: runs of two methods, {ref.method} ({ref.path}) and {r.method} "
                                f"({r.path})")
                continue
            a, b = ref.retriever.get("k"), r.retriever.get("k")
            if a != b:
                problems.append(f"{label}: retriever k {a!r} ({ref.path}) != {b!r} ({r.path})")
    cells: dict[tuple[str, str, str], RunInfo] = {}
    for r in runs:
        cell_key = (r.generator, r.label, r.dataset)
        if cell_key in cells:
            problems.append(f"two runs for {r.generator} / {r.label} / {r.dataset}: {cells[cell_key].path} and "
                            f"{r.path} (give one its own label: --label RUN_DIR=NAME)")
        cells[cell_key] = r
    if problems:
        raise LeaderboardError("runs are not comparable:\n  " + "\n  ".join(problems))


@dataclass
class Row:
    generator: str
    method: str  # a METHODS entry or "gbr"
    cells: dict[str, tuple[float | None, float | None]]  # dataset -> (genacc, em), fractions (GBR: differences)
    mean: tuple[float | None, float | None]
    cost_usd: float | None
    mean_latency_s: float | None
    n_failed: int = 0
    cost_per_correct_usd: float | None = None
    saved_usd: float | None = None
    name: str = ""  # the runs' label ("" = the method); a GBR row: the label compared with `baseline`
    baseline: str | None = None  # GBR rows: the baseline label
    ci: dict[str, list[float] | None] = field(default_factory=dict)  # GBR rows: dataset -> paired-bootstrap 95%
    n_paired: dict[str, int] = field(default_factory=dict)  # GBR rows: dataset -> questions both runs scored
    mean_ci: list[float] | None = None  # GBR rows: the mean column's interval (see the module docstring)
    n_scored: dict[str, int] = field(default_factory=dict)  # dataset -> questions its run scored (not GBR rows)

    def __post_init__(self) -> None:
        self.name = self.name or self.method

    @property
    def label(self) -> str:
        if self.method == GBR:
            base = self.baseline or DEFAULT_BASELINE
            return f"GBR ({_GBR_NAMES.get(self.name, self.name)} - {_GBR_NAMES.get(base, base)})"
        return METHOD_LABELS.get(self.method, self.method) if self.name == self.method else self.name


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _pct(x: float | None, signed: bool) -> str:
    return "" if x is None else f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


@dataclass
class Leaderboard:
    datasets: list[str]
    rows: list[Row]
    runs: list[RunInfo]
    baseline: str | None = None  # None: the paper's GBR (searcher labels - naive_rag)
    notes: list[str] = field(default_factory=list)  # one line each: generators left without a GBR row
    n_resamples: int = GBR_RESAMPLES
    seed: int = 0

    # ---- formatting
    @staticmethod
    def fmt_cell(cell: tuple[float | None, float | None], signed: bool = False,
                 ci: list[float] | None = None) -> str:
        g, e = cell
        if g is None:
            return "-"
        out = _pct(g, signed)
        if ci:
            out += f" [{_pct(ci[0], signed)}, {_pct(ci[1], signed)}]"
        return f"{out} ({_pct(e, signed)})" if e is not None else out

    def header(self) -> list[str]:
        return ["Generator", "Method", *self.datasets, "Mean", "Cost ($)", "$ / correct", "Cache saved ($)",
                "Latency (s/q)"]

    def mixed(self) -> set[str]:
        """Datasets whose runs scored different numbers of questions: their cells are not over one question set."""
        out = set()
        for d in self.datasets:
            ns = {r.n_scored[d] for r in self.rows if r.method != GBR and d in r.n_scored}
            if len(ns) > 1:
                out.add(d)
        return out

    def partial(self, r: Row) -> bool:
        """A row (not GBR) without a run on every dataset of the board: its Mean averages fewer datasets."""
        return r.method != GBR and len(self.datasets) > 1 and set(r.n_scored) != set(self.datasets)

    def table(self) -> list[list[str]]:
        out = []
        mixed = self.mixed()
        for r in self.rows:
            signed = r.method == GBR
            cells = [self.fmt_cell(r.cells.get(d, (None, None)), signed, r.ci.get(d))
                     + (f" n={r.n_scored[d]}" if d in mixed and d in r.n_scored else "") for d in self.datasets]
            mean = self.fmt_cell(r.mean, signed, r.mean_ci)
            if r.method != GBR and (mixed & set(r.n_scored) or self.partial(r)) and mean != "-":
                mean += " *"  # over other question sets than the rows beside it: see the footnote
            cost = ("unknown" if r.method != GBR else "-") if r.cost_usd is None else f"{r.cost_usd:.4f}"
            per = "-" if r.cost_per_correct_usd is None else f"{r.cost_per_correct_usd:.5f}"
            saved = "-" if r.saved_usd is None else f"{r.saved_usd:.4f}"
            lat = "-" if r.mean_latency_s is None else f"{r.mean_latency_s:.2f}"
            out.append([r.generator, r.label, *cells, mean, cost, per, saved, lat])
        return out

    def footnotes(self) -> list[str]:
        """The lines under the table (markdown and HTML): what cells and GBR rows are, intervals, notes."""
        gbr = "searcher - naive RAG" if self.baseline is None else f"each label - {self.baseline}"
        lines = [f"Cells: GenAcc (EM in brackets), % over scored questions; GBR rows: {gbr}, points."]
        if any(r.ci.get(d) for r in self.rows for d in self.datasets):
            lines.append(f"GBR [interval]: paired-bootstrap 95% over the questions both runs scored "
                         f"({self.n_resamples} resamples, seed {self.seed}; eval/stats.py paired_diff_ci).")
        mixed = self.mixed()
        if mixed:
            lines.append(f"n=: the runs of {', '.join(sorted(mixed))} scored different numbers of questions, so their "
                         "cells are not over one question set; Mean * averages such cells and is not comparable "
                         "between rows (the GBR rows are paired over the questions both runs scored).")
        partial = [f"{r.generator}/{r.label}" for r in self.rows if self.partial(r)]
        if partial:
            lines.append(f"Mean * of {', '.join(partial)}: a row without a run on every dataset averages only the "
                         "datasets it has, so its Mean is not comparable with the other rows'.")
        failed = [f"{r.generator}/{r.label}/{r.dataset}: {r.n_failed}" for r in self.runs if r.n_failed]
        if failed:
            lines.append("Failed (unscored, excluded from means) questions: " + "; ".join(failed) + ".")
        ns = sorted({r.n_scored for r in self.runs})
        lines.append(f"Scored questions per run: {', '.join(str(n) for n in ns)}.")
        return lines + self.notes

    def markdown(self) -> str:
        head = self.header()
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.table()]
        lines.append("")
        foot = self.footnotes()
        lines.append(foot[0])
        lines.append("Cost: dollars spent on generator and judge calls over every dataset (unknown = a model without a "
                     "price); $ / correct: cost over the correct answers (GenAcc summed); cache saved: what answers "
                     "served from the response cache would have cost.")
        lines += foot[1:]
        return "\n".join(lines) + "\n"

    def html(self, reports: dict[str, str] | None = None) -> str:
        """The table as a page; `reports`: run label -> relative link of its trajectory browser (`s3 report`)."""
        links = "".join(f"<li><a href='{html.escape(href)}'>{html.escape(name)}</a></li>"
                        for name, href in (reports or {}).items())
        links = f"<h3>Trajectories (s3 report)</h3><ul>{links}</ul>" if links else ""
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header())
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in self.table()
        )
        foot = "".join(f"<p>{html.escape(line)}</p>" for line in self.footnotes())
        return (
            "<!doctype html><html><head><meta charset='utf-8'><title>s3 leaderboard</title>"
            "<style>table{border-collapse:collapse;font-family:sans-serif}td,th{border:1px solid #bbb;"
            "padding:4px 8px;text-align:right}td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}</style>"
            f"</head><body><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            f"{foot}{links}</body></html>\n"
        )

    def csv_rows(self) -> list[list[Any]]:
        """The table as CSV rows (GenAcc / EM in %): the columns it always had, then label, baseline and each GBR
        row's interval (lo, hi) and paired-question count per dataset and on the mean (empty elsewhere)."""
        head: list[Any] = ["generator", "method"]
        for d in self.datasets:
            head += [f"{d}_genacc", f"{d}_em"]
        head += ["mean_genacc", "mean_em", "cost_usd", "cost_per_correct_usd", "cache_saved_usd", "mean_latency_s",
                 "n_failed", "label", "baseline"]
        for d in [*self.datasets, "mean"]:
            head += [f"{d}_gbr_ci95_lo", f"{d}_gbr_ci95_hi", f"{d}_gbr_n"]
        rows: list[list[Any]] = [head]

        def pct(x: float | None) -> Any:
            return "" if x is None else round(100 * x, 2)

        for r in self.rows:
            vals: list[Any] = [r.generator, r.method]
            for d in self.datasets:
                g, e = r.cells.get(d, (None, None))
                vals += [pct(g), pct(e)]
            g, e = r.mean
            vals += [pct(g), pct(e),
                     "" if r.cost_usd is None else r.cost_usd,
                     "" if r.cost_per_correct_usd is None else r.cost_per_correct_usd,
                     "" if r.saved_usd is None else r.saved_usd,
                     "" if r.mean_latency_s is None else round(r.mean_latency_s, 4), r.n_failed,
                     r.name, r.baseline or ""]
            n_mean = sum(r.n_paired.values()) if r.mean_ci else None
            for ci, n in [*((r.ci.get(d), r.n_paired.get(d)) for d in self.datasets), (r.mean_ci, n_mean)]:
                vals += [pct(ci[0]) if ci else "", pct(ci[1]) if ci else "", "" if n is None else n]
            rows.append(vals)
        return rows


def _scores(run: RunInfo, cache: dict[Path, dict[str, tuple[float | None, float | None]] | None]
            ) -> dict[str, tuple[float | None, float | None]] | None:
    """question id -> (GenAcc, EM) of a run's results.jsonl (None: not scored); None when the run kept no rows."""
    key = run.run_dir.resolve()
    if key not in cache:
        f = stored(run.run_dir / RESULTS_FILE)
        if not f.is_file():
            cache[key] = None
        else:
            out: dict[str, tuple[float | None, float | None]] = {}
            for qid, row in read_results(f).items():
                m = row.get("metrics") or {}
                em = m.get("em")
                out[qid] = (None, None) if row_failed(row) else (float(m["genacc"]), None if em is None else float(em))
            cache[key] = out
    return cache[key]


def gbr_row(g: str, row: Row, base: Row, cell: dict[tuple[str, str, str], RunInfo], datasets: list[str], *,
            n_resamples: int = GBR_RESAMPLES, seed: int = 0,
            cache: dict[Path, dict[str, tuple[float | None, float | None]] | None] | None = None) -> Row:
    """`row` - `base` for generator `g`: per dataset both have, the paired difference over the questions both runs
    scored with its paired-bootstrap interval (`paired_diff_ci`), or the summaries' difference when a run has no
    results.jsonl; the mean column as the module docstring says."""
    cache = {} if cache is None else cache
    cells: dict[str, tuple[float | None, float | None]] = {}
    ci: dict[str, list[float] | None] = {}
    n_paired: dict[str, int] = {}
    pooled_a: dict[str, float | None] = {}
    pooled_b: dict[str, float | None] = {}
    for d in datasets:
        if d not in row.cells or d not in base.cells:
            continue
        ra, rb = cell[(g, row.name, d)], cell[(g, base.name, d)]
        sa, sb = _scores(ra, cache), _scores(rb, cache)
        if sa is None or sb is None:
            (ag, ae), (bg, be) = row.cells[d], base.cells[d]
            cells[d] = (None if ag is None or bg is None else ag - bg, None if ae is None or be is None else ae - be)
            continue
        ga = {i: v[0] for i, v in sa.items()}
        gb = {i: v[0] for i, v in sb.items()}
        p = paired_diff_ci(ga, gb, n_resamples=n_resamples, seed=seed)
        ids = [i for i in ga.keys() & gb.keys() if ga[i] is not None and gb[i] is not None]
        ems = [(sa[i][1], sb[i][1]) for i in ids]
        em_d = [a - b for a, b in ems if a is not None and b is not None]
        cells[d] = (p["diff"], sum(em_d) / len(em_d) if em_d and len(em_d) == len(ids) else None)
        ci[d] = p["ci95"]
        n_paired[d] = p["n"]
        pooled_a.update({f"{d}\x00{i}": ga[i] for i in ids})
        pooled_b.update({f"{d}\x00{i}": gb[i] for i in ids})
    mean_ci: list[float] | None = None
    if cells and len(ci) == len(cells) and all(ci.values()) and len(set(n_paired.values())) == 1:
        only = next(iter(ci.values())) if len(ci) == 1 else None
        mean_ci = only or paired_diff_ci(pooled_a, pooled_b, n_resamples=n_resamples, seed=seed)["ci95"]
    return Row(
        generator=g, method=GBR, cells=cells,
        mean=(_mean([c[0] for c in cells.values()]), _mean([c[1] for c in cells.values()])),
        cost_usd=None, mean_latency_s=None, name=row.name, baseline=base.name, ci=ci, n_paired=n_paired,
        mean_ci=mean_ci,
    )


def _attach_labels(paths: list[Path], labels: Mapping[Path, str] | None) -> list[str | None]:
    """Each path's label from `labels` (keys compared as resolved run folders); a label for no given run is an error."""
    def key(p: Path) -> Path:
        return (p if p.is_dir() or p.suffix != ".json" else p.parent).resolve()

    want = {key(p): name for p, name in (labels or {}).items()}
    for name in want.values():
        check_label(name)
    keys = [key(p) for p in paths]
    stray = [str(p) for p in (labels or {}) if key(p) not in keys]
    if stray:
        raise LeaderboardError(f"a label for {', '.join(stray)}, which is not one of the runs given")
    return [want.get(k) for k in keys]


def build_leaderboard(paths: list[Path], labels: Mapping[Path, str] | None = None, baseline: str | None = None, *,
                      n_resamples: int = GBR_RESAMPLES, seed: int = 0) -> Leaderboard:
    """Load the runs, check they are comparable, and assemble the rows (plus GBR rows).

    `labels`: run folder -> its row's label (default: its method). `baseline`: the label every other label is
    compared with in the GBR rows (default: the paper's GBR, each searcher label - naive_rag; module docstring)."""
    if not paths:
        raise LeaderboardError("no runs given")
    runs = [load_run(p, label) for p, label in zip(paths, _attach_labels(paths, labels), strict=True)]
    check_comparable(runs)
    present = sorted({r.label for r in runs})
    if baseline is not None and baseline not in present:
        raise LeaderboardError(f"baseline {baseline!r} is not a label of the runs given; labels present: "
                               f"{', '.join(present)}")
    datasets = sorted({r.dataset for r in runs})
    generators = sorted({r.generator for r in runs})
    cell = {(r.generator, r.label, r.dataset): r for r in runs}
    method_of = {r.label: r.method for r in runs}
    order = (*METHODS,)
    rows: list[Row] = []
    notes: list[str] = []
    cache: dict[Path, dict[str, tuple[float | None, float | None]] | None] = {}
    base_label = DEFAULT_BASELINE if baseline is None else baseline
    for g in generators:
        by_label: dict[str, Row] = {}
        mine_labels = {r.label for r in runs if r.generator == g}
        for lab in sorted(mine_labels, key=lambda x: (order.index(method_of[x]) if method_of[x] in order
                                                      else len(order), method_of[x], x != method_of[x], x)):
            mine = [cell[(g, lab, d)] for d in datasets if (g, lab, d) in cell]
            cells = {r.dataset: (r.genacc, r.em) for r in mine}
            lat_w = [(r.mean_latency_s, r.n_scored) for r in mine if r.mean_latency_s is not None and r.n_scored]
            lat = sum(x * n for x, n in lat_w) / sum(n for _, n in lat_w) if lat_w else None
            costs = [r.cost_usd for r in mine]
            cost = None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None))
            corrects = [r.correct for r in mine]
            correct = None if any(c is None for c in corrects) else sum(c for c in corrects if c is not None)
            row = Row(
                generator=g, method=method_of[lab], cells=cells,
                mean=(_mean([c[0] for c in cells.values()]), _mean([c[1] for c in cells.values()])),
                cost_usd=cost, mean_latency_s=lat, n_failed=sum(r.n_failed for r in mine),
                cost_per_correct_usd=cost / correct if cost is not None and correct else None,
                saved_usd=sum(r.saved_usd for r in mine), name=lab, n_scored={r.dataset: r.n_scored for r in mine},
            )
            by_label[lab] = row
            rows.append(row)
        compared = [lab for lab, r in by_label.items()
                    if lab != base_label and (baseline is not None or r.method == "searcher")]
        if not compared:
            continue
        if base_label not in by_label:
            notes.append(f"{g}: no {base_label} run, so no GBR row for {', '.join(compared)}.")
            continue
        for lab in compared:
            rows.append(gbr_row(g, by_label[lab], by_label[base_label], cell, datasets, n_resamples=n_resamples,
                                seed=seed, cache=cache))
    return Leaderboard(datasets=datasets, rows=rows, runs=runs, baseline=baseline, notes=notes,
                       n_resamples=n_resamples, seed=seed)


def mean_interval(board: Leaderboard, row: Row,
                  cache: dict[Path, dict[str, tuple[float | None, float | None]] | None] | None = None
                  ) -> list[float] | None:
    """The 95% interval of a row's mean over datasets, for the PNG: a bootstrap over questions, each dataset's
    questions resampled within it (eval/stats.py `stratified_mean_ci`; a GBR row resamples its paired differences and
    keeps the table's pooled interval where it has one). A row of one dataset: that dataset's interval. None where a
    run kept no results.jsonl (then the PNG draws no bar and says so)."""
    cache = {} if cache is None else cache
    if row.method == GBR and row.mean_ci:
        return row.mean_ci
    present = [d for d in board.datasets if row.cells.get(d, (None, None))[0] is not None]
    runs = {(r.generator, r.label, r.dataset): r for r in board.runs}
    if len(present) == 1:
        return row.ci.get(present[0]) if row.method == GBR else runs[(row.generator, row.name, present[0])].genacc_ci
    groups: list[list[float]] = []
    for d in present:
        names = [row.name] + ([row.baseline or DEFAULT_BASELINE] if row.method == GBR else [])
        scores = [_scores(runs[(row.generator, name, d)], cache) for name in names]
        if any(sc is None for sc in scores):
            return None
        per_q = [{q: g for q, (g, _) in sc.items() if g is not None} for sc in scores if sc is not None]
        if len(per_q) == 1:
            groups.append(list(per_q[0].values()))
        else:  # a GBR row: the paired differences over the questions both runs scored
            groups.append([per_q[0][q] - per_q[1][q] for q in sorted(per_q[0].keys() & per_q[1].keys())])
    ci = stratified_mean_ci(groups, n_resamples=board.n_resamples, seed=board.seed)
    return list(ci) if ci else None


def plot_leaderboard(board: Leaderboard, path: Path) -> None:
    """Grouped bars: one group per dataset (+ mean), one bar per generator x label, GenAcc with 95% CI; with GBR
    rows, a second panel of their differences (points) with their paired-bootstrap intervals. One colour per run
    (generator x label) in both panels, one legend; a GBR bar has the colour of the run it compares (hatched). The
    mean bars' intervals: `mean_interval`; no error bar where there is no interval (never a zero-width one)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Patch

    rows = [r for r in board.rows if r.method != GBR]
    gbrs = [r for r in board.rows if r.method == GBR]
    groups = [*board.datasets, "mean"]
    ci = {(r.generator, r.label, r.dataset): r.genacc_ci for r in board.runs}
    palette = plt.get_cmap("tab10" if len(rows) <= 10 else "tab20")
    colour = {(r.generator, r.name): palette(i % palette.N) for i, r in enumerate(rows)}
    cache: dict[Path, dict[str, tuple[float | None, float | None]] | None] = {}
    mean_ci = {id(r): mean_interval(board, r, cache) for r in board.rows}
    w = max(7.0, 1.8 * len(groups) + 0.5 * len(rows))
    if gbrs:
        fig, axes = plt.subplots(2, 1, figsize=(w, 9.6))
        ax, gax = axes[0], axes[1]
    else:
        fig, ax = plt.subplots(figsize=(w, 4.8))
    x = np.arange(len(groups))
    missing_mean = False

    def bars(axis: Any, these: list[Row], interval: Any, scale: float, hatch: str | None) -> None:
        nonlocal missing_mean
        bw = 0.8 / max(len(these), 1)
        for i, r in enumerate(these):
            vals, lo, hi = [], [], []
            for d in groups:
                g = r.mean[0] if d == "mean" else r.cells.get(d, (None, None))[0]
                v = scale * g if g is not None else np.nan
                vals.append(v)
                c = mean_ci[id(r)] if d == "mean" else interval(r, d)
                missing_mean |= d == "mean" and g is not None and not c
                lo.append(v - scale * c[0] if c and g is not None else np.nan)  # nan: no error bar
                hi.append(scale * c[1] - v if c and g is not None else np.nan)
            axis.bar(x + (i - (len(these) - 1) / 2) * bw, vals, bw, yerr=[lo, hi], capsize=2,
                     color=colour[(r.generator, r.name)], hatch=hatch, edgecolor="white" if hatch else None,
                     label=f"{r.generator} · {r.label}")
        axis.set_xticks(x)
        axis.set_xticklabels(groups)
        axis.grid(axis="y", alpha=0.3)

    bars(ax, rows, lambda r, d: ci.get((r.generator, r.name, d)), 100.0, None)
    ax.set_ylabel("GenAcc (%)")
    ax.set_title("GenAcc by dataset (bars: 95% bootstrap CI over questions)")
    if gbrs:
        bars(gax, gbrs, lambda r, d: r.ci.get(d), 100.0, "//")
        gax.axhline(0.0, color="black", linewidth=0.8)
        gax.set_ylabel("GenAcc difference (points)")
        gax.set_title("GBR rows: the run of that colour minus the baseline (paired-bootstrap 95% CI over the "
                      "questions both runs scored)")
    handles = [Patch(color=colour[(r.generator, r.name)], label=f"{r.generator} · {r.label}") for r in rows]
    handles += [Patch(facecolor=colour[(r.generator, r.name)], hatch="//", edgecolor="white",
                      label=f"{r.generator} · {r.label}") for r in gbrs]
    note = ("mean: the mean over datasets, its interval a bootstrap over each dataset's questions"
            + ("; no error bar where a run kept no results.jsonl" if missing_mean else ""))
    fig.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, frameon=False,
               title=note, title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def _trajectory_reports(board: Leaderboard, out: Path) -> dict[str, str]:
    """A trajectory browser (eval/browser.py) for every run that kept its trajectories (contexts.jsonl), written
    under out/reports/; label -> link relative to the leaderboard page."""
    from eval.browser import build_report

    links: dict[str, str] = {}
    for i, r in enumerate(board.runs):
        if r.path.is_dir() and stored(r.path / "contexts.jsonl").is_file():
            shown = METHOD_LABELS.get(r.method, r.method) if r.label == r.method else r.label
            name = f"{r.generator} · {shown} · {r.dataset}"
            try:
                page = build_report(r.path, out / "reports" / f"{i:02d}_{r.label}_{r.dataset}").path
            except S3Error as e:  # a run whose trajectories cannot be read still has its row in the table
                print(f"warning: no trajectory browser for {r.path}: {e}")
                continue
            links[name] = page.relative_to(out).as_posix()
    return links


def write_leaderboard(board: Leaderboard, out: Path) -> list[Path]:
    """Write leaderboard.md, .csv, .html and .png into `out`; returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    md, cs, ht, png = (out / f"leaderboard.{ext}" for ext in ("md", "csv", "html", "png"))
    md.write_text(board.markdown(), encoding="utf-8")
    with cs.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(board.csv_rows())
    ht.write_text(board.html(_trajectory_reports(board, out)), encoding="utf-8")
    plot_leaderboard(board, png)
    return [md, cs, ht, png]
