"""Search collapse in a training run: the searcher stops searching, or its invalid-action rate climbs. Pure functions
over metrics.jsonl rows, used by the trainer's log (`CollapseWatch`), `s3 plot` (a marked step) and `s3 analyze`
(training/report/behavior.py).

    findings = detect_collapse(rows)        # [Collapse(kind="stopped_searching", step=37, ...)]

A signal is smoothed with a trailing moving average over `window` RL steps (oracle warm-up rows left out) and compared
with its early level, the mean of the first `window` RL steps:

    stopped_searching   queries per question (search/queries_per_question, else search/turns) falls to at most
                        `stop_share` of its early level, or below `stop_floor` — and stays there to the last step
    invalid_climb       search/invalid_action_rate rises by at least `invalid_rise` over its early level (and to at
                        least `invalid_floor`) — and stays there

The onset ("it began at step N") is the first wrong-side raw step of the window in which the smoothed signal
crossed for good.

>>> rows = [{"step": s, "search/turns": 2.0 if s < 10 else 0.0, "search/invalid_action_rate": 0.1} for s in range(1, 21)]
>>> [(c.kind, c.step) for c in detect_collapse(rows, window=3)]
[('stopped_searching', 10)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Collapse", "CollapseWatch", "detect_collapse", "series"]


@dataclass(frozen=True)
class Collapse:
    kind: str  # "stopped_searching" | "invalid_climb"
    step: int  # the step it began at
    key: str
    early: float  # early level
    late: float  # smoothed value at the last step

    def message(self) -> str:
        if self.kind == "stopped_searching":
            return (f"warning: search collapse: the searcher stopped searching, from step {self.step} "
                    f"({self.key} {self.early:.2f} early -> {self.late:.2f} now)")
        return (f"warning: search collapse: the invalid-action rate climbed, from step {self.step} "
                f"({self.key} {self.early:.2f} early -> {self.late:.2f} now)")


def series(rows: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    out = []
    for r in rows:
        v = r.get(key)
        if v is None or r.get("charts/sft") or "step" not in r:
            continue
        v = float(v)
        if not math.isnan(v):
            out.append((int(r["step"]), v))
    return out


def _smooth(vals: list[float], w: int) -> list[float]:
    return [sum(vals[max(0, i - w + 1) : i + 1]) / len(vals[max(0, i - w + 1) : i + 1]) for i in range(len(vals))]


def _onset(steps: list[int], smooth: list[float], bad: Any) -> int | None:
    """The first step from which `bad(value)` holds to the end (None when the last value is not bad)."""
    if not smooth or not bad(smooth[-1]):
        return None
    i = len(smooth) - 1
    while i > 0 and bad(smooth[i - 1]):
        i -= 1
    return steps[i]


def detect_collapse(
    rows: list[dict[str, Any]],
    *,
    window: int = 5,
    stop_share: float = 0.5,
    stop_floor: float = 0.05,
    invalid_rise: float = 0.25,
    invalid_floor: float = 0.4,
) -> list[Collapse]:
    """Collapses found in metrics rows (see the module docstring); [] when the run is too short (< 2 windows)."""
    found = []
    key = "search/queries_per_question" if any(r.get("search/queries_per_question") is not None for r in rows) \
        else "search/turns"
    for kind, k in (("stopped_searching", key), ("invalid_climb", "search/invalid_action_rate")):
        pts = series(rows, k)
        if len(pts) < 2 * window:
            continue
        steps = [s for s, _ in pts]
        sm = _smooth([v for _, v in pts], window)
        early = sum(v for _, v in pts[:window]) / window
        if kind == "stopped_searching":
            if early <= stop_floor:
                continue  # it never searched: nothing collapsed

            def bad(v: float, early: float = early) -> bool:
                return v <= stop_share * early or v < stop_floor
        else:
            def bad(v: float, early: float = early) -> bool:
                return v >= early + invalid_rise and v >= invalid_floor
        onset = _onset(steps[window - 1 :], sm[window - 1 :], bad)
        if onset is not None:  # the smoothed signal lags: back to the first bad raw step of the window it turned in
            raw = [v for _, v in pts]
            i = max(0, steps.index(onset) - (window - 1))
            while i < steps.index(onset) and not bad(raw[i]):
                i += 1
            onset = steps[i]
            found.append(Collapse(kind=kind, step=onset, key=k, early=early, late=sm[-1]))
    return found


class CollapseWatch:
    """The trainer's running check: feed each step's metrics row; `update` returns the warnings not yet given
    (each kind once, again only after it recovered)."""

    def __init__(self, rows: list[dict[str, Any]] | None = None, **kw: Any) -> None:
        self.rows = list(rows or [])
        self.kw = kw
        self.active: set[str] = {c.kind for c in detect_collapse(self.rows, **kw)}

    def update(self, row: dict[str, Any]) -> list[str]:
        self.rows.append(row)
        now = {c.kind: c for c in detect_collapse(self.rows, **self.kw)}
        new = [now[k].message() for k in now if k not in self.active]
        self.active = set(now)
        return new
