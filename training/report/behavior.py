"""A training run for `s3 analyze`: its search/ metrics early vs late and any search collapse
(training/run/collapse.py detects it), as a markdown section and the run's curves (training/report/plots.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.report.plots import plot_run
from training.run.collapse import Collapse, detect_collapse, series
from training.rundir import read_metrics

__all__ = ["TrainingBehavior"]


@dataclass
class TrainingBehavior:
    """A training run for `s3 analyze`: its search/ metrics early vs late and any collapse."""

    run_dir: Path
    rows: list[dict[str, Any]]
    collapses: list[Collapse]

    @classmethod
    def load(cls, run_dir: Path) -> TrainingBehavior:
        rows = read_metrics(run_dir)
        return cls(run_dir=Path(run_dir), rows=rows, collapses=detect_collapse(rows))

    def keys(self) -> list[str]:
        return sorted({k for r in self.rows for k in r if k.startswith("search/")})

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"steps": len(self.rows), "collapses": [c.__dict__ for c in self.collapses]}
        n = max(1, len(self.rows) // 3)
        for k in self.keys():
            first = [v for _, v in series(self.rows[:n], k)]
            last = [v for _, v in series(self.rows[-n:], k)]
            out[k] = {"first": sum(first) / len(first) if first else None, "last": sum(last) / len(last) if last else None}
        return out

    def markdown(self) -> list[str]:
        s = self.summary()
        lines = [f"## Training run {self.run_dir}", "", f"{s['steps']} steps; search/ metrics, mean of the first and "
                 "the last third of the steps:", "", "| metric | first third | last third |", "| --- | ---: | ---: |"]
        for k in self.keys():
            f, la = s[k]["first"], s[k]["last"]
            lines.append(f"| {k} | {'-' if f is None else f'{f:.3f}'} | {'-' if la is None else f'{la:.3f}'} |")
        lines.append("")
        lines += [f"- {c.message()}" for c in self.collapses] or ["- no search collapse detected"]
        lines.append("")
        return lines

    def plot(self, out: Path) -> Path | None:
        name = f"training_{self.run_dir.name}.png"
        return plot_run(self.run_dir, out / name)
