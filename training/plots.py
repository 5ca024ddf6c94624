"""`s3 plot RUN_DIR`: training curves (reward, losses, search behaviour) as one PNG."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from searcher.errors import S3Error

__all__ = ["plot_run"]

PANELS = [
    ("reward", ["reward/mean", "reward/acc_s3", "reward/acc_rag"]),
    ("losses", ["losses/policy", "losses/value", "losses/kl", "losses/sft_nll"]),
    ("search", ["search/turns", "search/invalid_action_rate", "search/docs"]),
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

    from training.trainer import read_metrics

    rows = read_metrics(run_dir)
    if not rows:
        raise S3Error(f"{run_dir}/metrics.jsonl has no rows yet")
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.6))
    steps = [int(r["step"]) for r in rows]
    warm = [int(r["step"]) for r in rows if r.get("charts/sft")]  # oracle warm-up steps (training.sft_warmup_steps)
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
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(str(Path(run_dir).name))
    fig.tight_layout()
    path = Path(out) if out else Path(run_dir) / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
