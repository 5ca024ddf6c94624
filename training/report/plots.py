"""`s3 plot RUN_DIR`: training curves (reward, losses, search behaviour) as one PNG, a search collapse marked at the
step it began (training/run/collapse.py), each rollback (training/run/recovery.py) an arrow from the step it was
triggered at back to its checkpoint in every panel, and whether the RL reward rose beyond its step-to-step noise (`reward_trend`);
`plot_timeline`: what ran when in each RL step (RUN_DIR/timeline.jsonl: rollout, scoring, update; asynchronous RL
overlaps them, docs/async-rl.md)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from s3core.errors import S3Error

__all__ = ["TIMELINE_COLOURS", "format_trend", "plot_run", "plot_timeline", "reward_trend"]

PANELS = [
    ("reward", ["reward/mean", "reward/acc_s3", "reward/acc_rag", "reward/gold_added", "reward/other_added"]),
    ("losses", ["losses/policy", "losses/value", "losses/kl", "losses/sft_nll"]),
    ("search", ["search/turns", "search/invalid_action_rate", "search/docs", "search/queries_per_question",
                "search/redundant_turn_rate", "search/premature_stop_rate", "search/support_recall"]),
    ("time (s/step)", ["charts/step_seconds", "charts/rollout_seconds", "charts/update_seconds"]),
]


def _moving_average(ys: list[float], w: int) -> list[float]:
    out = []
    for i in range(len(ys)):
        win = [y for y in ys[max(0, i - w + 1) : i + 1] if not math.isnan(y)]
        out.append(sum(win) / len(win) if win else float("nan"))
    return out


def plot_run(run_dir: str | Path, out: str | Path | None = None, smooth: int = 5) -> Path:
    """Write RUN_DIR/curves.png (or `out`) from metrics.jsonl; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from training.rundir import read_metrics, rollback_events

    rows = read_metrics(run_dir)
    rollbacks = rollback_events(run_dir)
    if not rows:
        raise S3Error(f"{run_dir}/metrics.jsonl has no rows yet")
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.6))
    steps = [int(r["step"]) for r in rows]
    warm = [int(r["step"]) for r in rows if r.get("charts/sft")]  # oracle warm-up steps (training.sft.steps)
    for ax, (title, keys) in zip(axes, PANELS, strict=True):
        if warm:
            ax.axvspan(min(warm) - 0.5, max(warm) + 0.5, color="grey", alpha=0.12, label="oracle warm-up")
        ax.set_xlim(min(steps) - 0.5, max(steps) + 0.5)
        for k in keys:
            ys: list[Any] = [r.get(k) for r in rows]
            if all(y is None for y in ys):
                continue
            vals = [float("nan") if y is None else float(y) for y in ys]
            (line,) = ax.plot(steps, vals, alpha=0.35, lw=1)
            if len(vals) >= smooth:
                ax.plot(steps, _moving_average(vals, smooth), color=line.get_color(), lw=2, label=f"{k} (avg {smooth})")
            else:
                line.set_label(k)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no 0.5, 1.5 ticks
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    from training.run.collapse import detect_collapse

    collapses = detect_collapse(rows)
    search_ax = axes[[t for t, _ in PANELS].index("search")]
    for c in collapses:  # a search collapse: marked where it began, named in the title
        search_ax.axvline(c.step, color="red", ls="--", lw=1.5)
        search_ax.annotate(f"{c.kind.replace('_', ' ')}\nfrom step {c.step}", (c.step, 0.95),
                           xycoords=("data", "axes fraction"), color="red", fontsize=8, va="top")
    for ax in axes:
        for rb in rollbacks:  # where it was triggered, and back to the checkpoint it went on from
            ax.axvline(rb["step"], color="purple", ls=":", lw=1.5)
            ax.annotate("", xy=(rb["recovery/to_step"], 0.9), xytext=(rb["step"], 0.9), xycoords=("data", "axes fraction"),
                        arrowprops={"arrowstyle": "->", "color": "purple"})
            ax.annotate(f"rollback {rb['recovery/rollback'] + 1}\n{rb['recovery/trigger']}", (rb["step"], 0.88),
                        xycoords=("data", "axes fraction"), color="purple", fontsize=7, va="top")
    title = str(Path(run_dir).name)
    if rollbacks:
        title += f"  —  {len(rollbacks)} rollback(s): " + "; ".join(
            f"{rb['recovery/trigger']} at step {rb['step']} -> {rb['recovery/to_step']}" for rb in rollbacks)
    if collapses:
        title += "  —  SEARCH COLLAPSE: " + "; ".join(f"{c.kind.replace('_', ' ')} from step {c.step}" for c in collapses)
    fig.suptitle(title, color="red" if collapses else "black")
    fig.tight_layout()
    path = Path(out) if out else Path(run_dir) / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


TIMELINE_COLOURS = {"rollout": "tab:blue", "reward": "tab:orange", "update": "tab:green"}


def plot_timeline(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write RUN_DIR/timeline.png (or `out`) from timeline.jsonl: one bar row per RL step, its batch's rollout, reward
    scoring and update as coloured spans on one time axis (seconds from the first), labelled with the batch's
    staleness; returns the path. With training.rollout.max_staleness > 0 a step's rollout and scoring sit under the
    update of an earlier step: the overlap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    from training.rundir import read_timeline

    rows = read_timeline(run_dir)
    if not rows:
        raise S3Error(f"{run_dir}/timeline.jsonl has no rows yet (an RL step writes one)")
    t0 = min(min(r[k][0] for k in TIMELINE_COLOURS) for r in rows)
    fig, ax = plt.subplots(figsize=(10, 0.6 + 0.35 * len(rows)))
    for r in rows:
        y = int(r["step"])
        for k, colour in TIMELINE_COLOURS.items():
            a, b = r[k]
            ax.broken_barh([(a - t0, max(b - a, 1e-3))], (y - 0.4, 0.8), color=colour)
        ax.annotate(f"s={int(r['staleness'])}", (r["update"][1] - t0, y), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=7)
    ax.set_xlabel("seconds")
    ax.set_ylabel("step")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    ax.legend(handles=[Patch(color=c, label=k) for k, c in TIMELINE_COLOURS.items()], fontsize=8, loc="lower right")
    ax.set_title(f"{Path(run_dir).name}: what ran when (s = staleness of the step's batch)")
    fig.tight_layout()
    path = Path(out) if out else Path(run_dir) / "timeline.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def reward_trend(rows: list[dict[str, Any]], key: str = "reward/mean", window: int | None = None) -> dict[str, Any]:
    """Did `key` rise over the RL steps (oracle warm-up rows left out) beyond its step-to-step noise?

    Compares the mean of the first `window` RL steps with the last `window` (default: a third of the steps, at least
    2): their difference, its standard error (sqrt(se_first^2 + se_last^2), each se = step s.d. / sqrt(window)) and
    z = difference / se; and fits a least-squares line over every RL step (slope per step and its s.e.). The verdict
    is "rises" when z >= 2, "falls" when z <= -2, else "within noise". `step_sd` is the s.d. of the per-step values.

    >>> t = reward_trend([{"step": i, "reward/mean": v} for i, v in enumerate([0, .1, 0, .1, .5, .6, .5, .6], 1)])
    >>> t["verdict"], t["window"], round(t["diff"], 2)
    ('rises', 2, 0.5)
    """
    pts = [(int(r["step"]), float(r[key])) for r in rows if r.get(key) is not None and not r.get("charts/sft")]
    pts = [(s, v) for s, v in pts if not math.isnan(v)]
    n = len(pts)
    if n < 4:
        return {"key": key, "steps": n, "verdict": f"too few RL steps ({n}) to tell"}
    w = window if window is not None else max(2, n // 3)
    w = min(w, n // 2)
    ys = [v for _, v in pts]
    first, last = ys[:w], ys[-w:]

    def mean(x: list[float]) -> float:
        return sum(x) / len(x)

    def sd(x: list[float]) -> float:
        m = mean(x)
        return math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - 1)) if len(x) > 1 else 0.0

    se_first, se_last = sd(first) / math.sqrt(w), sd(last) / math.sqrt(w)
    diff = mean(last) - mean(first)
    diff_se = math.sqrt(se_first**2 + se_last**2)
    z = diff / diff_se if diff_se > 0 else (math.inf if diff > 0 else -math.inf if diff < 0 else 0.0)
    xs = [float(s) for s, _ in pts]
    mx, my = mean(xs), mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, ys, strict=True)]
    slope_se = math.sqrt(sum(r * r for r in resid) / (n - 2) / sxx) if sxx and n > 2 else float("nan")
    verdict = "rises" if z >= 2 else "falls" if z <= -2 else "within noise"
    return {
        "key": key, "steps": n, "window": w, "first_steps": [pts[0][0], pts[w - 1][0]], "last_steps": [pts[-w][0], pts[-1][0]],
        "first_mean": mean(first), "first_se": se_first, "last_mean": mean(last), "last_se": se_last,
        "diff": diff, "diff_se": diff_se, "z": z, "step_sd": sd(ys), "slope_per_step": slope, "slope_se": slope_se,
        "verdict": verdict,
    }


def format_trend(t: dict[str, Any]) -> str:
    """One readable line for `reward_trend`'s result."""
    if "diff" not in t:
        return f"{t['key']}: {t['verdict']}"
    return (
        f"{t['key']} over {t['steps']} RL steps: first {t['window']} steps {t['first_mean']:.3f} +- {t['first_se']:.3f} "
        f"(s.e.) -> last {t['window']} {t['last_mean']:.3f} +- {t['last_se']:.3f}; difference {t['diff']:+.3f} +- "
        f"{t['diff_se']:.3f} (z = {t['z']:.1f}); step-to-step s.d. {t['step_sd']:.3f}; slope {t['slope_per_step']:+.4f} "
        f"+- {t['slope_se']:.4f} per step: {t['verdict']}"
    )
