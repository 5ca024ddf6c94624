"""Asynchronous RL vs the synchronous loop: step throughput, the cost check, the timeline (issue 47).

    nice -n 5 .venv/bin/python benchmarks/async_rl.py [--steps 5] [--launches 3] [--staleness 1] \
        [--latency auto] [--parts fake,local,ray] [--out benchmarks/results/async_rl]

Each condition is a separate `s3 train` launch (a fresh process) of the smallest training config the integration
tests use (configs/smoke.toml + TINY: bm25, one search turn, 1 question x group 2 a step unless --set says
otherwise; the policy a small random Llama with SmolLM2's tokenizer, `tiny_policy`, so that a step is seconds),
launched 3 times, conditions interleaved (sync, async, sync, async, ...) so that they share the machine's
noise. Throughput = timed steps / their wall time, read from the launch's own log lines as they arrive ("step k/N"):
the first step (the pipeline filling, the first calls of every library) is the warm-up and is not timed. The table:
median and range per condition, the ratio of the medians.

- (a) `fake`: the frozen generator of the GBR reward is the priced loopback OpenAI-compatible server
  (generator_adapters/testing.py, in this process; varied answers, tiktoken usage, gpt-4o's list prices), with a
  per-call latency comparable to the update's time (`--latency auto`: the median update seconds of a synchronous
  calibration launch). Cost check: the sum over steps of reward/cost_usd equals the server's own token counts x the
  prices, for every launch, sync and async.
- (b) `local`: the offline local generator of the smoke config (local/smollm2-135m-instruct, llama.cpp in the
  trainer's own process): generation and update are both CPU work on the same cores.
- (c) `ray`: training.backend = "ray" with 2 rollout workers (a local 2-CPU Ray cluster on 127.0.0.1), the fake API.

The timeline (RUN_DIR/timeline.jsonl, written by the trainer) of one sync and one async launch of (a) is drawn as
one PNG: what runs when, per step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from s3runtime.offline import offline_env

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.toml"
IN_PRICE, OUT_PRICE = 2.5, 10.0  # dollars per million tokens (gpt-4o's list price), as tests/integration/test_cost_budget
STEP_LINE = re.compile(r"^step (\d+)/(\d+) ")
ENV = {**offline_env(ray_loopback=True), "PYTHONUNBUFFERED": "1", "VLLM_HOST_IP": "127.0.0.1"}

# the smallest real training step: 1 question x group 2, one search turn, short generations and documents
TINY = [
    "training.data.max_questions=8", "training.rollout.batch_size=1", "training.rollout.group_size=2",
    "searcher.max_new_tokens=24", "searcher.doc_token_budget=24", "training.checkpoint.every=1000",
]


# ------------------------------------------------------------------------------------------------ configurations


@dataclass(frozen=True)
class Condition:
    """One arm of the comparison: which generator the reward calls (`fake` API or the `local` llama.cpp model),
    which backend, and how stale a sample may be (0 = the synchronous loop)."""

    part: str  # "fake" | "local" | "ray"
    staleness: int

    @property
    def name(self) -> str:
        return f"{self.part}/{'sync' if self.staleness == 0 else f'async{self.staleness}'}"


def priced_generator(api_base: str) -> list[str]:
    """--set overrides that make the loopback fake the priced frozen generator (no cache: every call is paid)."""
    return ["generator.model=openai/fake", f"generator.api_base={api_base}", "generator.cache_path=none",
            f"generator.input_cost_per_mtok={IN_PRICE}", f"generator.output_cost_per_mtok={OUT_PRICE}",
            "generator.max_tokens=12"]


def train_sets(cond: Condition, run_dir: Path, data_dir: Path, steps: int, api_base: str | None,
               rollout_workers: int = 2) -> list[str]:
    """Every --set of one launch of `cond` (over configs/smoke.toml).

    >>> s = train_sets(Condition("ray", 1), Path("/r"), Path("/d"), 5, "http://127.0.0.1:9/v1")
    >>> [x for x in s if x.startswith(("training.rollout.max", "training.backend", "ray.rollout", "training.total"))]
    ['training.total_steps=5', 'training.rollout.max_staleness=1', 'training.backend=ray', 'ray.rollout_workers=2']
    """
    sets = [*TINY, f"training.output_dir={run_dir}", f"training.data.dir={data_dir}", f"training.total_steps={steps}",
            f"training.rollout.max_staleness={cond.staleness}"]
    if cond.part in ("fake", "ray"):
        if api_base is None:
            raise ValueError(f"{cond.name}: the fake API's address is needed")
        sets += priced_generator(api_base)
    elif cond.part == "local":
        sets += ["generator.cache_path=none"]  # every launch generates its answers (the same seed: the same prompts)
    else:
        raise ValueError(f"unknown part {cond.part!r}: fake, local or ray")
    if cond.part == "ray":
        sets += ["training.backend=ray", f"ray.rollout_workers={rollout_workers}", "ray.reward_workers=1"]
    return sets


def interleave(conditions: Sequence[Condition], launches: int) -> list[tuple[int, Condition]]:
    """(launch number, condition) in the order they run: each round runs every condition once.

    >>> [(i, c.name) for i, c in interleave([Condition("fake", 0), Condition("fake", 1)], 2)]
    [(0, 'fake/sync'), (0, 'fake/async1'), (1, 'fake/sync'), (1, 'fake/async1')]
    """
    return [(i, c) for i in range(launches) for c in conditions]


# ------------------------------------------------------------------------------------------------ one launch


@dataclass
class Launch:
    """What one `s3 train` launch did: the wall-clock second (since the process started) at which each step's log
    line arrived, its exit code, its run directory and the tail of its log."""

    condition: str
    index: int
    run_dir: str
    rc: int
    step_at: dict[int, float] = field(default_factory=dict)
    wall_s: float = 0.0
    tail: str = ""
    server: dict[str, float] = field(default_factory=dict)  # the fake API's counts during this launch

    def part_of(self, part: str) -> bool:
        return self.condition.split("/")[0] == part

    def throughput(self, warmup: int = 1, drain: int = 1) -> float | None:
        return throughput(self.step_at, warmup, drain)


def throughput(step_at: dict[int, float], warmup: int = 1, drain: int = 1) -> float | None:
    """Steps per second in the steady state: the steps after the first `warmup` (the pipeline filling, every
    library's first call) and before the last `drain` (an asynchronous run's last steps have their batches already
    rolled out: nothing is left to overlap), i.e. (b - a) / (t[b] - t[a]) with a = warmup, b = last - drain. None
    without one such step.

    >>> throughput({1: 10.0, 2: 12.0, 3: 14.0, 4: 16.0, 5: 16.5})
    0.5
    >>> throughput({1: 10.0, 2: 12.0, 3: 14.0, 4: 16.0}, drain=0)
    0.5
    >>> throughput({1: 10.0, 2: 11.0}) is None
    True
    """
    if warmup not in step_at:
        return None
    last = max(step_at) - drain
    if last <= warmup or last not in step_at or step_at[last] <= step_at[warmup]:
        return None
    return (last - warmup) / (step_at[last] - step_at[warmup])


def parse_step(line: str) -> int | None:
    """The step number of a trainer's RL step log line ('step 3/5 reward ...'), else None (warm-up lines too).

    >>> parse_step("step 3/5 reward 0.000 invalid 0.00 turns 1.00 4.2s"), parse_step("train: checkpoint x")
    (3, None)
    """
    m = STEP_LINE.match(line)
    if m is None or "warm-up" in line:
        return None
    return int(m.group(1))


def launch(condition: str, index: int, sets: Sequence[str], run_dir: Path, *, config: Path = SMOKE,
           timeout_s: float = 900.0, python: str = sys.executable, log: Callable[[str], None] = print) -> Launch:
    """`s3 train --config config --set ...` in a fresh process; the arrival time of each step's log line."""
    cmd = [python, "-m", "s3.cli", "train", "--config", str(config)]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, **ENV}
    t0 = time.monotonic()
    out = Launch(condition, index, str(run_dir), rc=-1)
    lines: list[str] = []
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            text=True, bufsize=1, cwd=ROOT)
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic() - t0
            lines.append(line.rstrip("\n"))
            step = parse_step(line)
            if step is not None:
                out.step_at[step] = now
                log(f"  {condition}#{index}: {line.strip()} (t={now:.1f}s)")
        out.rc = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    out.wall_s = time.monotonic() - t0
    out.tail = "\n".join(lines[-30:])
    return out


def prepare(sets: Sequence[str], config: Path = SMOKE) -> int:
    """`s3 prepare-training` of a launch's training directory, in this process: the training set, the index and the
    naive-RAG baseline (its generator calls) before any launch, so a launch's calls are its steps' only."""
    from s3.cli import main as s3_main

    args = ["prepare-training", "--config", str(config)]
    for s in sets:
        args += ["--set", s]
    return int(s3_main(args))


def metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The launch's metrics.jsonl rows (training/rundir.py)."""
    from training.rundir import read_metrics

    return read_metrics(Path(run_dir))


def tiny_policy(out: Path, layers: int = 2, hidden: int = 128, seed: int = 0) -> Path:
    """A small random Llama with SmolLM2-135M's tokenizer (49,152 tokens), saved as a plain Hugging Face model dir (like
    tests/conftest.py's tiny_policy_dir, larger): the policy of the benchmark, so that a step is seconds on a CPU.
    Reused when `out` already holds one."""
    if (out / "config.json").is_file():
        return out
    import torch
    import transformers

    from searcher.policy.transformers_policy import resolve_checkpoint

    tok = transformers.AutoTokenizer.from_pretrained(str(resolve_checkpoint("smollm2-135m-instruct")))
    torch.manual_seed(seed)
    heads = max(2, hidden // 64)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=4 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                                   max_position_embeddings=2048, tie_word_embeddings=True,
                                   bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    tmp = out.with_name(out.name + ".tmp")
    transformers.LlamaForCausalLM(cfg).save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    tmp.rename(out)
    return out


# ------------------------------------------------------------------------------------------------ what a launch cost


def cost_check(rows: Sequence[dict[str, Any]], server: dict[str, float], rel: float = 1e-9) -> dict[str, Any]:
    """The run's own accounting against the fake API's: the sum over steps of reward/cost_usd and of the paid calls
    (cost/paid_calls: a step's identical prompts are asked once, the rest are cache hits) vs the server's answered
    calls and token counts x the prices during the launch; `exact` when both agree (cost to `rel`, calls exactly)
    and the last row's cost/usd_total is the sum.

    >>> rows = [{"reward/cost_usd": 1e-4, "cost/paid_calls": 2.0, "cost/usd_total": 1e-4},
    ...         {"reward/cost_usd": 2e-4, "cost/paid_calls": 1.0, "cost/usd_total": 3e-4}]
    >>> cost_check(rows, {"answered": 3, "prompt_tokens": 100, "completion_tokens": 5})["exact"]
    True
    >>> cost_check(rows, {"answered": 4, "prompt_tokens": 100, "completion_tokens": 5})["exact"]
    False
    """
    run_usd = sum(float(r.get("reward/cost_usd", 0.0)) for r in rows)
    run_calls = sum(float(r.get("cost/paid_calls", r.get("reward/generator_calls", 0.0))) for r in rows)
    api_usd = (server.get("prompt_tokens", 0) * IN_PRICE + server.get("completion_tokens", 0) * OUT_PRICE) / 1e6
    total = float(rows[-1].get("cost/usd_total", run_usd)) if rows else 0.0
    ok_usd = math.isclose(run_usd, api_usd, rel_tol=rel, abs_tol=1e-15)
    ok_total = math.isclose(total, run_usd, rel_tol=1e-6, abs_tol=1e-15)
    return {"run_usd": run_usd, "api_usd": api_usd, "run_calls": run_calls, "api_calls": float(server.get("answered", 0)),
            "usd_total": total, "exact": ok_usd and ok_total and run_calls == server.get("answered", 0)}


def server_snapshot(srv: Any) -> dict[str, float]:
    """The fake API's counts now (answered calls, prompt and completion tokens)."""
    return {"answered": float(srv.stats().get("answered", 0)), **{k: float(v) for k, v in srv.usage_totals.items()}}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before, key by key.

    >>> delta({"a": 1.0}, {"a": 3.0, "b": 2.0})
    {'a': 2.0, 'b': 2.0}
    """
    return {k: after[k] - before.get(k, 0.0) for k in after}


# ------------------------------------------------------------------------------------------------ the table


def spread(values: Iterable[float | None]) -> dict[str, Any]:
    """Median, min, max and n of the values that exist.

    >>> spread([3.0, None, 1.0, 2.0])
    {'median': 2.0, 'min': 1.0, 'max': 3.0, 'n': 3}
    >>> spread([None])
    {'median': None, 'min': None, 'max': None, 'n': 0}
    """
    v = [float(x) for x in values if x is not None]
    if not v:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def summarize(launches: Sequence[Launch], warmup: int = 1, drain: int = 1) -> dict[str, dict[str, Any]]:
    """Per condition: the spread of the launches' steady-state steps/s, and of the per-step phase seconds (the
    metrics rows of those same steps: update, wait before the update, rollout, reward)."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(x.condition for x in launches):
        mine = [x for x in launches if x.condition == name]
        row: dict[str, Any] = {"steps_per_s": spread(x.throughput(warmup, drain) for x in mine),
                               "launches": len(mine), "failed": sum(1 for x in mine if x.rc != 0)}
        for key in ("update_seconds", "wait_seconds", "rollout_seconds", "reward_seconds", "step_seconds"):
            per_launch = []
            for x in mine:
                rows = _rows_or_empty(x.run_dir)
                last = max(x.step_at) - drain if x.step_at else 0
                vals = [float(r[f"charts/{key}"]) for r in rows
                        if warmup < int(r["step"]) <= last and f"charts/{key}" in r]
                per_launch.append(statistics.median(vals) if vals else None)
            row[key] = spread(per_launch)["median"]
        out[name] = row
    return out


def _rows_or_empty(run_dir: str | Path) -> list[dict[str, Any]]:
    from training.rundir import metrics_rows

    return metrics_rows(run_dir)


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Each async condition's median steps/s over its part's sync median.

    >>> ratios({"fake/sync": {"steps_per_s": {"median": 0.5}}, "fake/async1": {"steps_per_s": {"median": 0.8}}})
    {'fake/async1': 1.6}
    """
    out: dict[str, float | None] = {}
    for name, row in summary.items():
        part, mode = name.split("/")
        base = summary.get(f"{part}/sync", {}).get("steps_per_s", {}).get("median")
        if mode != "sync":
            med = row["steps_per_s"]["median"]
            out[name] = round(med / base, 4) if med and base else None
    return out


def _f(x: float | None, nd: int = 3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def table(summary: dict[str, dict[str, Any]]) -> str:
    """The markdown table: per condition the median and range of steps/s, the ratio to its part's sync median, and
    the median phase seconds of a steady-state step.

    >>> print(table({"fake/sync": {"steps_per_s": {"median": 0.5, "min": 0.4, "max": 0.6, "n": 3}, "launches": 3,
    ...             "failed": 0, "update_seconds": 1.0, "wait_seconds": 1.0}}).splitlines()[2])
    | fake/sync | 3 | 0.500 | 0.400-0.600 | 1.00x | 1.00 | 1.00 | - | - |
    """
    r = ratios(summary)
    lines = ["| condition | launches | steps/s (median) | range | vs sync | update s | wait s | rollout s | reward s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, row in summary.items():
        s = row["steps_per_s"]
        ratio = "1.00x" if name.endswith("/sync") else (f"{r[name]:.2f}x" if r.get(name) else "-")
        n = f"{s['n']}" + (f" ({row['failed']} failed)" if row.get("failed") else "")
        lines.append(f"| {name} | {n} | {_f(s['median'])} | {_f(s['min'])}-{_f(s['max'])} | {ratio} | "
                     f"{_f(row.get('update_seconds'), 2)} | {_f(row.get('wait_seconds'), 2)} | "
                     f"{_f(row.get('rollout_seconds'), 2)} | {_f(row.get('reward_seconds'), 2)} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ the timeline


PHASES = (("rollout", "tab:blue"), ("reward", "tab:orange"), ("update", "tab:green"), ("sync", "tab:red"),
          ("wait", "lightgray"))


def timeline_bars(rows: Sequence[dict[str, Any]]) -> list[tuple[int, str, float, float]]:
    """(step, phase, start, seconds) of timeline.jsonl rows (training/rundir.py), times from the first row's earliest
    start.

    >>> timeline_bars([{"step": 1, "rollout": [10.0, 11.0], "reward": [11.0, 13.0], "update": [13.0, 14.5]}])
    [(1, 'rollout', 0.0, 1.0), (1, 'reward', 1.0, 2.0), (1, 'update', 3.0, 1.5)]
    """
    starts = [float(r[p][0]) for r in rows for p, _ in PHASES if isinstance(r.get(p), list)]
    if not starts:
        return []
    t0 = min(starts)
    return [(int(r["step"]), p, float(r[p][0]) - t0, float(r[p][1]) - float(r[p][0]))
            for r in rows for p, _ in PHASES if isinstance(r.get(p), list)]


def plot_timelines(runs: dict[str, str | Path], out: Path) -> Path:
    """One panel per run (a label -> its run dir): for each RL step a row of bars, what ran when (rollout of its batch,
    the reward calls, the trainer's wait for the batch, the update, the weight sync), on one shared time axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from training.rundir import read_timeline

    bars = {label: timeline_bars(read_timeline(d)) for label, d in runs.items()}
    t_max = max((s + w for b in bars.values() for _, _, s, w in b), default=1.0)
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 1.6 + 0.5 * max(len({b[0] for b in v}) for v in bars.values())
                                                    * len(runs)), sharex=True, squeeze=False)
    colours = dict(PHASES)
    lanes = {"rollout": -0.3, "reward": -0.1, "wait": 0.1, "update": 0.1, "sync": 0.3}
    for ax, (label, b) in zip(axes[:, 0], bars.items(), strict=True):
        for step, phase, start, width in b:
            ax.barh(step + lanes[phase], width, left=start, height=0.2, color=colours[phase],
                    edgecolor="black" if phase != "wait" else "none", linewidth=0.3)
        ax.set_ylabel("step")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole
        ax.invert_yaxis()
        ax.set_title(label, fontsize=9, loc="left")
        ax.set_xlim(0, t_max * 1.02)
    axes[-1, 0].set_xlabel("seconds since the first step's batch started")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for _, c in PHASES]
    fig.legend(handles, [p for p, _ in PHASES], loc="upper right", ncol=len(PHASES), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# ------------------------------------------------------------------------------------------------ the benchmark


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5, help="RL steps per launch: 1 warm-up, the last one the drain")
    ap.add_argument("--launches", type=int, default=3, help="launches per condition")
    ap.add_argument("--staleness", type=int, action="append", default=None,
                    help="async conditions (training.rollout.max_staleness; repeatable; default 1)")
    ap.add_argument("--latency", default="auto",
                    help="the fake API's seconds per call, or 'auto' = the median update seconds of a calibration "
                         "launch (synchronous, no latency)")
    ap.add_argument("--parts", default="fake,local,ray", help="comma-separated: fake, local, ray")
    ap.add_argument("--layers", type=int, default=2, help="the random policy's layers")
    ap.add_argument("--hidden", type=int, default=256, help="the random policy's hidden size")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra --set for every launch")
    ap.add_argument("--work", default="/tmp/s3-async-rl", help="run directories, the policy and the training data")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "async_rl"))
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per launch")
    ap.add_argument("--rebuild", nargs="+", default=None, metavar="RESULTS_JSON",
                    help="launch nothing: the summary, cost checks, table and plot again from the launches recorded "
                         "in these results.json files (their run dirs still on disk), into OUT")
    return ap.parse_args(argv)


def rebuild(files: Sequence[str | Path], out: Path) -> dict[str, Any]:
    """OUT/results.json, table.md and the timeline plot from earlier results.json files (e.g. one invocation per
    part): their launches merged in order, summarized and checked again; the first file's settings kept."""
    first: dict[str, Any] = {}
    launches: list[Launch] = []
    for f in files:
        d = json.loads(Path(f).read_text(encoding="utf-8"))
        first = first or d
        launches += [Launch(**x) for x in d["launches"]]
    for x in launches:
        x.step_at = {int(k): float(v) for k, v in x.step_at.items()}
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(launches)
    latency = float(first.get("latency_s", 0.0))
    fake = [x for x in launches if x.part_of("fake") and x.rc == 0]
    pair = {x.condition: x.run_dir for x in sorted(fake, key=lambda x: x.index, reverse=True)}
    plots = [str(plot_timelines({f"{k} (API latency {latency:.2f}s a call)": v for k, v in pair.items()},
                                out / "timeline_fake.png"))] if len(pair) >= 2 else []
    result = {**first, "sources": [str(f) for f in files], "summary": summary, "ratios": ratios(summary),
              "costs": cost_rows(launches), "plots": plots, "launches": [asdict(x) for x in launches]}
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "table.md").write_text(table(summary) + "\n", encoding="utf-8")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    from generator_adapters.testing import FakeLLMServer

    args = _args(argv)
    if args.rebuild:
        r = rebuild(args.rebuild, Path(args.out))
        print(table(r["summary"]))
        return 0
    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    stale = args.staleness or [1]
    t_start, load0 = time.time(), os.getloadavg()
    policy = tiny_policy(work / f"policy_l{args.layers}_h{args.hidden}", args.layers, args.hidden)
    common = [f"training.base_model={policy}", "generator.concurrency=16", *args.sets]
    launches: list[Launch] = []
    notes: dict[str, Any] = {}
    tag = time.strftime("%H%M%S")

    def run(cond: Condition, i: int, steps: int, srv: Any) -> Launch:
        run_dir = work / "runs" / f"{tag}_{cond.part}_s{cond.staleness}_{i}"
        data = work / ("data_local" if cond.part == "local" else "data_fake")
        sets = [*train_sets(cond, run_dir, data, steps, srv.api_base), *common]
        before = server_snapshot(srv)
        x = launch(cond.name, i, sets, run_dir, timeout_s=args.timeout)
        x.server = delta(before, server_snapshot(srv))
        tp = x.throughput()
        print(f"{cond.name} #{i}: rc {x.rc}, {len(x.step_at)} steps, {x.wall_s:.0f}s, "
              f"steady steps/s {_f(tp)}" + (f"\n{x.tail}" if x.rc else ""), flush=True)
        return x

    with FakeLLMServer(reply="varied", usage="tiktoken") as srv:
        for part in dict.fromkeys("local" if p == "local" else "fake" for p in parts):  # the data, once per generator
            cond = Condition(part, 0)
            data = work / f"data_{part}"
            if prepare(train_sets(cond, work / "prep", data, 1, srv.api_base) + common) != 0:
                print(f"preparing {data} failed", file=sys.stderr)
                return 1
        if args.latency == "auto":  # the update's time on this machine now, measured the way the runs measure it
            cal = run(Condition("fake", 0), -1, 4, srv)
            upd = [float(r["charts/update_seconds"]) for r in _rows_or_empty(cal.run_dir) if int(r["step"]) >= 2]
            if cal.rc != 0 or not upd:
                print("calibration launch failed", file=sys.stderr)
                return 1
            latency = round(statistics.median(upd), 2)
            notes["calibration"] = {"update_seconds": upd, "run_dir": cal.run_dir}
        else:
            latency = float(args.latency)
        srv.latency_s = latency
        print(f"fake API latency {latency:.2f}s per call", flush=True)
        for part in parts:
            conds = [Condition(part, 0), *(Condition(part, s) for s in stale)]
            for i, cond in interleave(conds, args.launches):
                launches.append(run(cond, i, args.steps, srv))
            write_results(out, launches, args, argv, t_start, load0, policy, common, latency, notes)  # part by part

    summary = write_results(out, launches, args, argv, t_start, load0, policy, common, latency, notes)
    print(table(summary))
    for c in cost_rows(launches):
        print(f"cost {c['condition']} #{c['launch']}: run ${c['run_usd']:.6f} ({c['run_calls']:.0f} calls) vs API "
              f"${c['api_usd']:.6f} ({c['api_calls']:.0f} calls): {'exact' if c['exact'] else 'MISMATCH'}")
    return 0 if all(x.rc == 0 for x in launches) else 1


def cost_rows(launches: Sequence[Launch]) -> list[dict[str, Any]]:
    """The cost check of every finished launch that called the fake API (parts fake and ray) and recorded the
    server's counts."""
    return [{"condition": x.condition, "launch": x.index, **cost_check(_rows_or_empty(x.run_dir), x.server)}
            for x in launches if not x.part_of("local") and x.rc == 0 and x.server]


def write_results(out: Path, launches: Sequence[Launch], args: argparse.Namespace, argv: Sequence[str] | None,
                  t_start: float, load0: tuple[float, float, float], policy: Path, common: Sequence[str],
                  latency: float, notes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """OUT/results.json (and OUT/timeline_fake.png once a sync and an async launch of the fake API are done) from
    the launches so far; returns the summary."""
    summary = summarize(launches)
    plots: list[str] = []
    fake = [x for x in launches if x.part_of("fake") and x.rc == 0]
    pair = {x.condition: x.run_dir for x in sorted(fake, key=lambda x: x.index, reverse=True)}  # the first of each
    if len(pair) >= 2:
        plots.append(str(plot_timelines({f"{k} (API latency {latency:.2f}s a call)": v for k, v in pair.items()},
                                        out / "timeline_fake.png")))
    result = {
        "command": "nice -n 5 .venv/bin/python benchmarks/async_rl.py " + " ".join(sys.argv[1:] if argv is None
                                                                                   else list(argv)),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t_start)),
        "minutes": round((time.time() - t_start) / 60, 1),
        "machine": {"platform": platform.platform(), "cores": os.cpu_count(), "loadavg_start": load0,
                    "loadavg_now": os.getloadavg(), "nice": os.nice(0)},
        "policy": {"layers": args.layers, "hidden": args.hidden, "dir": str(policy)},
        "sets": [*TINY, *common], "steps": args.steps, "latency_s": latency,
        "summary": summary, "ratios": ratios(summary), "costs": cost_rows(launches), "plots": plots, "notes": notes,
        "launches": [asdict(x) for x in launches],
    }
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "table.md").write_text(table(summary) + "\n", encoding="utf-8")
    return summary
