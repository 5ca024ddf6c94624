"""The generator leaderboard: one table from many `s3 eval` runs, in the s3 paper's style.

Rows = generator x method, columns = datasets, cells = GenAcc with EM in brackets ("62.4 (11.1)"), then the mean
over datasets, total $ cost and mean latency per question. For every generator with both a `searcher` and a
`naive_rag` run, a GBR row gives searcher - naive RAG (GenAcc points) per dataset and on the mean.

Runs of the same method must share retriever backend, k and the generator prompt, and (on the same dataset) the
corpus; otherwise the board is refused with a message naming each difference. Two runs for one cell are refused too.

    board = build_leaderboard([Path("runs/eval/qwen05-hotpot-rag"), ...])
    write_leaderboard(board, Path("runs/leaderboard"))   # leaderboard.md / .csv / .html / .png
                                                         # + reports/*/index.html: each searcher run's trajectory
                                                         # browser (eval/browser.py), linked from the .html
"""

from __future__ import annotations

import csv
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.methods import METHODS
from s3core.errors import DataFormatError, S3Error

METHOD_LABELS = {
    "no_retrieval": "No retrieval",
    "naive_rag": "Naive RAG",
    "searcher": "s3 searcher",
    "search_r1": "Search-R1",
    "search_r1_ret": "Search-R1 (Ret)",
}
GBR = "gbr"


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


def _metric(summary: dict[str, Any], key: str) -> tuple[float | None, list[float] | None]:
    m = summary.get("metrics", {}).get(key) or {}
    return m.get("mean"), m.get("ci95")


def load_run(path: Path) -> RunInfo:
    """Read RUN_DIR/summary.json (or a summary.json path) into a RunInfo."""
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
    )


def check_comparable(runs: list[RunInfo]) -> None:
    """Refuse runs of the same method that differ in retriever backend, k, corpus (same dataset) or prompt."""
    problems: list[str] = []
    by_method: dict[str, list[RunInfo]] = {}
    for r in runs:
        by_method.setdefault(r.method, []).append(r)
    for method, group in by_method.items():
        ref = group[0]
        for r in group[1:]:
            for key in ("backend", "k"):
                a, b = ref.retriever.get(key), r.retriever.get(key)
                if a != b:
                    problems.append(f"{method}: retriever {key} {a!r} ({ref.path}) != {b!r} ({r.path})")
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
    cells: dict[tuple[str, str, str], RunInfo] = {}
    for r in runs:
        cell_key = (r.generator, r.method, r.dataset)
        if cell_key in cells:
            problems.append(f"two runs for {r.generator} / {r.method} / {r.dataset}: {cells[cell_key].path} and {r.path}")
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

    @property
    def label(self) -> str:
        return "GBR (searcher - naive RAG)" if self.method == GBR else METHOD_LABELS.get(self.method, self.method)


def _mean(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


@dataclass
class Leaderboard:
    datasets: list[str]
    rows: list[Row]
    runs: list[RunInfo]

    # ---- formatting
    @staticmethod
    def fmt_cell(cell: tuple[float | None, float | None], signed: bool = False) -> str:
        g, e = cell
        if g is None:
            return "-"
        if signed:
            return f"{100 * g:+.1f} ({100 * e:+.1f})" if e is not None else f"{100 * g:+.1f}"
        return f"{100 * g:.1f} ({100 * e:.1f})" if e is not None else f"{100 * g:.1f}"

    def header(self) -> list[str]:
        return ["Generator", "Method", *self.datasets, "Mean", "Cost ($)", "$ / correct", "Cache saved ($)",
                "Latency (s/q)"]

    def table(self) -> list[list[str]]:
        out = []
        for r in self.rows:
            signed = r.method == GBR
            cells = [self.fmt_cell(r.cells.get(d, (None, None)), signed) for d in self.datasets]
            cost = ("unknown" if r.method != GBR else "-") if r.cost_usd is None else f"{r.cost_usd:.4f}"
            per = "-" if r.cost_per_correct_usd is None else f"{r.cost_per_correct_usd:.5f}"
            saved = "-" if r.saved_usd is None else f"{r.saved_usd:.4f}"
            lat = "-" if r.mean_latency_s is None else f"{r.mean_latency_s:.2f}"
            out.append([r.generator, r.label, *cells, self.fmt_cell(r.mean, signed), cost, per, saved, lat])
        return out

    def markdown(self) -> str:
        head = self.header()
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.table()]
        lines.append("")
        lines.append("Cells: GenAcc (EM in brackets), % over scored questions; GBR rows: searcher - naive RAG, points.")
        lines.append("Cost: dollars spent on generator and judge calls over every dataset (unknown = a model without a "
                     "price); $ / correct: cost over the correct answers (GenAcc summed); cache saved: what answers "
                     "served from the response cache would have cost.")
        failed = [f"{r.generator}/{r.method}/{r.dataset}: {r.n_failed}" for r in self.runs if r.n_failed]
        if failed:
            lines.append("Failed (unscored, excluded from means) questions: " + "; ".join(failed) + ".")
        ns = sorted({r.n_scored for r in self.runs})
        lines.append(f"Scored questions per run: {', '.join(str(n) for n in ns)}.")
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
        return (
            "<!doctype html><html><head><meta charset='utf-8'><title>s3 leaderboard</title>"
            "<style>table{border-collapse:collapse;font-family:sans-serif}td,th{border:1px solid #bbb;"
            "padding:4px 8px;text-align:right}td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}</style>"
            f"</head><body><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            "<p>Cells: GenAcc (EM in brackets), % over scored questions; GBR rows: searcher - naive RAG, points.</p>"
            f"{links}</body></html>\n"
        )

    def csv_rows(self) -> list[list[Any]]:
        head: list[Any] = ["generator", "method"]
        for d in self.datasets:
            head += [f"{d}_genacc", f"{d}_em"]
        head += ["mean_genacc", "mean_em", "cost_usd", "cost_per_correct_usd", "cache_saved_usd", "mean_latency_s",
                 "n_failed"]
        rows: list[list[Any]] = [head]
        for r in self.rows:
            vals: list[Any] = [r.generator, r.method]
            for d in self.datasets:
                g, e = r.cells.get(d, (None, None))
                vals += ["" if g is None else round(100 * g, 2), "" if e is None else round(100 * e, 2)]
            g, e = r.mean
            vals += ["" if g is None else round(100 * g, 2), "" if e is None else round(100 * e, 2),
                     "" if r.cost_usd is None else r.cost_usd,
                     "" if r.cost_per_correct_usd is None else r.cost_per_correct_usd,
                     "" if r.saved_usd is None else r.saved_usd,
                     "" if r.mean_latency_s is None else round(r.mean_latency_s, 4), r.n_failed]
            rows.append(vals)
        return rows


def build_leaderboard(paths: list[Path]) -> Leaderboard:
    """Load the runs, check they are comparable, and assemble the rows (plus GBR rows)."""
    if not paths:
        raise LeaderboardError("no runs given")
    runs = [load_run(p) for p in paths]
    check_comparable(runs)
    datasets = sorted({r.dataset for r in runs})
    generators = sorted({r.generator for r in runs})
    cell = {(r.generator, r.method, r.dataset): r for r in runs}
    rows: list[Row] = []
    for g in generators:
        by_method: dict[str, Row] = {}
        for m in sorted({r.method for r in runs if r.generator == g}, key=lambda x: (*METHODS, x).index(x)):
            mine = [cell[(g, m, d)] for d in datasets if (g, m, d) in cell]
            cells = {r.dataset: (r.genacc, r.em) for r in mine}
            lat_w = [(r.mean_latency_s, r.n_scored) for r in mine if r.mean_latency_s is not None and r.n_scored]
            lat = sum(x * n for x, n in lat_w) / sum(n for _, n in lat_w) if lat_w else None
            costs = [r.cost_usd for r in mine]
            cost = None if any(c is None for c in costs) else float(sum(c for c in costs if c is not None))
            corrects = [r.correct for r in mine]
            correct = None if any(c is None for c in corrects) else sum(c for c in corrects if c is not None)
            row = Row(
                generator=g, method=m, cells=cells,
                mean=(_mean([c[0] for c in cells.values()]), _mean([c[1] for c in cells.values()])),
                cost_usd=cost, mean_latency_s=lat, n_failed=sum(r.n_failed for r in mine),
                cost_per_correct_usd=cost / correct if cost is not None and correct else None,
                saved_usd=sum(r.saved_usd for r in mine),
            )
            by_method[m] = row
            rows.append(row)
        if "searcher" in by_method and "naive_rag" in by_method:
            s, b = by_method["searcher"], by_method["naive_rag"]
            both = [d for d in datasets if d in s.cells and d in b.cells]
            gbr: dict[str, tuple[float | None, float | None]] = {}
            for d in both:
                (sg, se), (bg, be) = s.cells[d], b.cells[d]
                gbr[d] = (None if sg is None or bg is None else sg - bg, None if se is None or be is None else se - be)
            rows.append(Row(
                generator=g, method=GBR, cells=gbr,
                mean=(_mean([c[0] for c in gbr.values()]), _mean([c[1] for c in gbr.values()])),
                cost_usd=None, mean_latency_s=None,
            ))
    return Leaderboard(datasets=datasets, rows=rows, runs=runs)


def plot_leaderboard(board: Leaderboard, path: Path) -> None:
    """Grouped bars: one group per dataset (+ mean), one bar per generator x method, GenAcc with 95% CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [r for r in board.rows if r.method != GBR]
    groups = [*board.datasets, "mean"]
    ci = {(r.generator, r.method, r.dataset): r.genacc_ci for r in board.runs}
    width = 0.8 / max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.8 * len(groups) + 0.5 * len(rows)), 4.8))
    x = np.arange(len(groups))
    for i, r in enumerate(rows):
        vals, lo, hi = [], [], []
        for d in groups:
            g = r.mean[0] if d == "mean" else r.cells.get(d, (None, None))[0]
            v = 100 * g if g is not None else np.nan
            vals.append(v)
            c = ci.get((r.generator, r.method, d)) if d != "mean" else None
            lo.append(v - 100 * c[0] if c and g is not None else 0.0)
            hi.append(100 * c[1] - v if c and g is not None else 0.0)
        ax.bar(x + (i - (len(rows) - 1) / 2) * width, vals, width, yerr=[lo, hi], capsize=2,
               label=f"{r.generator} · {r.label}")
    ax.set_xticks(x)
    ax.set_xticklabels(groups)
    ax.set_ylabel("GenAcc (%)")
    ax.set_title("GenAcc by dataset (bars: 95% bootstrap CI)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def _trajectory_reports(board: Leaderboard, out: Path) -> dict[str, str]:
    """A trajectory browser (eval/browser.py) for every run that kept its trajectories (contexts.jsonl), written
    under out/reports/; label -> link relative to the leaderboard page."""
    from eval.browser import build_report

    links: dict[str, str] = {}
    for i, r in enumerate(board.runs):
        if r.path.is_dir() and (r.path / "contexts.jsonl").is_file():
            name = f"{r.generator} · {METHOD_LABELS.get(r.method, r.method)} · {r.dataset}"
            try:
                page = build_report(r.path, out / "reports" / f"{i:02d}_{r.method}_{r.dataset}").path
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
