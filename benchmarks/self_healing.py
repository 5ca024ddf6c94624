"""A planted collapse, for real: the smoke training config (SmolLM2-135M searcher, the offline SmolLM2 generator, bm25)
with a reward that pays for stopping (S3_PLANTED_FAILURE=stop_pays@A-B: 1 for a rollout that made no search query, 0
for one that did, on the batches of steps A..B), run twice through `s3 train`: with training.recovery off (the run
stops searching and ends collapsed) and on (the collapse / the held-out fall is detected, the run rolls back past the
planted stretch and goes on). Both runs' curves in one PNG, the numbers in a small JSON:

    .venv/bin/python benchmarks/self_healing.py [--out benchmarks/results/self_healing] [--work DIR] [--steps 24]
    .venv/bin/python benchmarks/self_healing.py --plot-only --work DIR      # the PNG and JSON from finished runs

For each run: queries per question (search/queries_per_question) and the held-out reward at the end, the
pre-collapse best held-out reward (the best evaluation before the planted stretch) and the final one's paired
difference from it (per question, with its standard error: "within noise" = within 2 s.e.), and the rollbacks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from training import rundir  # noqa: E402

SMOKE = ROOT / "configs" / "smoke.toml"
RUNS = {"recovery off": "off", "recovery on": "on"}


def settings(args: argparse.Namespace, run: Path, recovery: bool) -> list[str]:
    """The smoke config's overrides: more steps, held-out questions evaluated every few steps, a checkpoint at each."""
    sets = [f"training.output_dir={run}", f"training.total_steps={args.steps}", "training.data.max_questions=40",
            "training.heldout.questions=12", f"training.heldout.every={args.every}",
            f"training.checkpoint.every={args.every}", "training.checkpoint.keep=3",
            "training.rollout.batch_size=2", "training.rollout.group_size=4",
            f"training.update.learning_rate={args.lr}", "training.recovery.collapse_window=3",
            f"training.recovery.enabled={'true' if recovery else 'false'}"]
    return [x for s in sets for x in ("--set", s)]


def train(args: argparse.Namespace, run: Path, recovery: bool) -> int:
    env = {**os.environ, "S3_PLANTED_FAILURE": f"stop_pays@{args.plant}", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "s3", "train", "--config", str(SMOKE), *settings(args, run, recovery)]
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, cwd=ROOT).returncode


def paired(run: Path, a: int, b: int) -> dict[str, float]:
    """The held-out evaluation after step b minus the one after step a, per question: mean, s.e., n."""
    ra = {q["id"]: q["reward"] for q in rundir.heldout_question_rows(run, a) if q.get("reward") is not None}
    d = [q["reward"] - ra[q["id"]] for q in rundir.heldout_question_rows(run, b)
         if q.get("reward") is not None and q["id"] in ra]
    se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else 0.0
    return {"mean": sum(d) / len(d) if d else math.nan, "se": se, "n": len(d)}


def summary(run: Path, plant_start: int, exit_code: int | None) -> dict[str, Any]:
    rows = rundir.metrics_rows(run)
    held = rundir.heldout_rows(run)
    qpq = [r["search/queries_per_question"] for r in rows if "search/queries_per_question" in r]
    before = [h for h in held if int(h["step"]) < plant_start]
    best = max(before, key=lambda h: (h["heldout/reward"], h["step"])) if before else None
    last = held[-1] if held else None
    out: dict[str, Any] = {
        "exit_code": exit_code, "steps": rows[-1]["step"] if rows else 0,
        "queries_per_question_first3": sum(qpq[:3]) / max(1, len(qpq[:3])),
        "queries_per_question_last3": sum(qpq[-3:]) / max(1, len(qpq[-3:])),
        "heldout_reward_by_step": {int(h["step"]): round(float(h["heldout/reward"]), 4) for h in held},
        "heldout_reward_end": None if last is None else float(last["heldout/reward"]),
        "pre_collapse_best": None if best is None else {"step": int(best["step"]),
                                                         "heldout_reward": float(best["heldout/reward"])},
        "rollbacks": [{"trigger": e["recovery/trigger"], "at_step": e["step"], "to_step": e["recovery/to_step"],
                       "onset": e["recovery/onset"]} for e in rundir.rollback_events(run)],
        "changes": [r["summary"] for r in rundir.recovery_rows(run)],
    }
    if best is not None and last is not None:
        d = paired(run, int(best["step"]), int(last["step"]))
        out["end_minus_best"] = d
        out["within_noise_of_best"] = bool(d["mean"] >= -2 * d["se"] - 1e-9)
    return out


def plot(work: Path, out: Path, plant: tuple[int, int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for (label, name), colour in zip(RUNS.items(), ("tab:red", "tab:green"), strict=True):
        run = work / name
        rows = rundir.metrics_rows(run)
        held = rundir.heldout_rows(run)
        axes[0].plot([r["step"] for r in rows], [r.get("search/queries_per_question", math.nan) for r in rows],
                     color=colour, label=label)
        axes[1].plot([h["step"] for h in held], [h["heldout/reward"] for h in held], "o-", color=colour, label=label)
        for e in rundir.rollback_events(run):
            for ax in axes:
                ax.annotate("", xy=(e["recovery/to_step"], 0.92), xytext=(e["step"], 0.92),
                            xycoords=("data", "axes fraction"), arrowprops={"arrowstyle": "->", "color": colour})
                ax.axvline(e["step"], color=colour, ls=":", lw=1)
    for ax, title in zip(axes, ("search/queries_per_question", "held-out reward"), strict=True):
        ax.axvspan(plant[0] - 0.5, plant[1] + 0.5, color="grey", alpha=0.15, label="reward pays for stopping")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("planted collapse (smoke config): arrows = rollbacks")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "self_healing"))
    ap.add_argument("--work", default=str(ROOT.parent / "runs" / "self_healing"))
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--plant", default="7-14", help="the steps whose batches pay for stopping (A-B)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args()
    work, out = Path(args.work), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lo, _, hi = args.plant.partition("-")
    plant = (int(lo), int(hi or lo))
    codes: dict[str, int | None] = {name: None for name in RUNS.values()}
    if not args.plot_only:
        for name in RUNS.values():
            codes[name] = train(args, work / name, recovery=name == "on")
    result = {"config": "configs/smoke.toml", "settings": settings(args, Path("RUN"), True)[1::2],
              "planted": f"S3_PLANTED_FAILURE=stop_pays@{args.plant}",
              "runs": {label: summary(work / name, plant[0], codes[name]) for label, name in RUNS.items()}}
    (out / "self_healing.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(work, out / "self_healing.png", plant)
    print(json.dumps(result["runs"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
