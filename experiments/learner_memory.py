"""Peak memory of one learner update of a real model, all its layers, through the project's own learner (issue 80).

    .venv/bin/python benchmarks/learner_memory.py --model smollm2-135m-instruct --tokens 1024,2048,4096 --out DIR
        [--mode full,lora] [--micro-batch 1,4] [--grad-ckpt on,off,auto] [--attn eager,sdpa,auto]
        [--budget 4096,none] [--repo CHECKOUT --label before] [--cap-gb 16] [--timeout 1800] [--append]

Every flag takes a comma-separated list; the rows are every combination. A flag not given is not set: the row runs
with the configuration's default (config.toml, as `s3 train` would), and records the value it ran with as the child
read it back. `--repo` runs the code of another checkout (e.g. `git archive HEAD | tar -x -C /tmp/s3-before`: the
code and defaults before a change), its flags then only those that checkout knows.

One row = one fresh process (`CHILD`), under `--lock` (flock: one measurement at a time on a shared machine), 1 torch
thread: the real `Learner` (training/learn/learner.py: the policy, the reference when training.update.kl_coef > 0,
AdamW) built from `training.base_model = --model`; `--micro-batch` N rollouts of `--tokens` T tokens each (one GRPO
group: the same prompt, a different response, rewards 1, 0, 1, ... so every row has an advantage) made into the
update's rows by the trainer's own `update_rows` (training/run/step.py) and padded by `pad_rollouts` as the trainer
pads them; training.learner.micro_batch_size = N unless --micro-batch is unset. A first update on 64-token rows puts
AdamW's state in place (a step after the first holds it during the backward pass); then the kernel's peak counter is
reset (/proc/self/clear_refs) and `learner.update(rows)` runs once: `peak_gb` = VmHWM after it (the process's whole
resident memory at the update's peak: weights, reference, optimizer, activations), `rss_before_gb` = VmRSS before
it. The parent samples the child's VmRSS every 0.1 s and kills it above --cap-gb (recorded, not an error of the
code); a row whose estimate (training/learn/memory.py) is above the cap is skipped and said so.

A trajectory of T tokens: a prompt of min(640, T/4) tokens (the s3 instruction and question), then 4 policy replies
of min(160, response/8) tokens each, evenly spaced, the rest environment tokens (retrieved documents, masked out).
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.rss_sampler import tree_rss

__all__ = ["CHILD", "RowSpec", "add_estimates", "child_sets", "estimate_for", "expand", "fit_report", "planned",
           "plot", "readme", "run_row"]

GIB = 2**30
GB = 1e9

CHILD = r'''
import json, os, sys, tempfile, time
from pathlib import Path
spec = json.loads(sys.argv[1])
import torch
torch.set_num_threads(spec["threads"])
torch.manual_seed(0)
from s3.config import load_config
from s3core.types import SearchResult, Trajectory
from training.learn.api import pad_rollouts
from training.learn.learner import Learner
from training.run.step import update_rows

def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024

cfg = load_config(None, spec["sets"])
tc = cfg.training
lc = tc.learner
learner = Learner(tc, "cpu", Path(tempfile.mkdtemp()))
if spec.get("attn") and not hasattr(lc, "attn_implementation"):  # a checkout without the setting: on the model
    base = learner.model.get_base_model() if hasattr(learner.model, "get_base_model") else learner.model
    base.set_attn_implementation(spec["attn"])
vocab = learner.model.config.vocab_size
gen = torch.Generator().manual_seed(0)

def rollouts(n, T):
    prompt_len = min(640, T // 4)
    prompt = torch.randint(3, vocab, (prompt_len,), generator=gen).tolist()
    resp = T - prompt_len
    span = min(160, resp // 8)
    out = []
    for i in range(max(n, 2)):
        tr = Trajectory(prompt_ids=prompt)
        gap = (resp - 4 * span) // 4
        for _ in range(4):
            tr.append(torch.randint(3, vocab, (gap,), generator=gen).tolist(), False)
            tr.append(torch.randint(3, vocab, (span,), generator=gen).tolist(), i < n, [-1.0] * span if i < n else None)
        left = T - len(prompt) - len(tr.response_ids)
        tr.append(torch.randint(3, vocab, (left,), generator=gen).tolist(), False)
        out.append(SearchResult(question="q", trajectory=tr))
    return out  # n rows with policy tokens (a lone row gets a partner without any: it leaves the update)

share = lc.share_prefix and lc.gradient_checkpointing is not True  # S3Trainer._pad
pad = lambda res, b: pad_rollouts(res, b, learner.tokenizer.pad_token_id, share_prefix=share)
n, T = spec["rows"], spec["tokens"]
tc_group = tc.model_copy(update={"rollout": tc.rollout.model_copy(update={"group_size": max(n, 2)})})
rewards = [float(i % 2 == 0) for i in range(max(n, 2))]
warm, _ = update_rows(tc_group, rollouts(n, 64), rewards, pad)
learner.update(warm)  # AdamW's state in place, as in every step after the first
rows, _ = update_rows(tc_group, rollouts(n, T), rewards, pad)
assert rows is not None and len(rows.rows) == n, rows
Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
before = status("VmRSS:")
t0 = time.perf_counter()
report = learner.update(rows)
seconds = time.perf_counter() - t0
peak = status("VmHWM:")
ckpt = any(getattr(m, "gradient_checkpointing", False) is True for m in learner.model.modules())
out = {"peak_bytes": peak, "rss_before_bytes": before, "seconds": seconds,
       "micro_batches": [list(b.ids.shape) for b in report.batches], "policy_tokens": report.tokens,
       "loss": report.stats.get("losses/total"), "ran_with": {
           "mode": "lora" if lc.lora else "full", "micro_batch_size": lc.micro_batch_size,
           "grad_ckpt": lc.gradient_checkpointing, "last_micro_batch_checkpointed": ckpt,
           "attn": getattr(lc, "attn_implementation", None) or spec.get("attn") or "model default",
           "attn_used": (learner.model.get_base_model() if hasattr(learner.model, "get_base_model")
                         else learner.model).config._attn_implementation,
           "max_tokens_per_micro_batch": getattr(lc, "max_tokens_per_micro_batch", None),
           "share_prefix": lc.share_prefix, "kl_coef": tc.update.kl_coef, "dtype": lc.dtype,
           "autocast": lc.autocast, "logprob_chunk": lc.logprob_chunk}}
print("RESULT " + json.dumps(out), flush=True)
'''


@dataclass(frozen=True)
class RowSpec:
    """One measurement: the settings given (None = the configuration's default) and the code to run."""

    tokens: int
    mode: str | None = None  # full | lora
    micro_batch: int | None = None
    grad_ckpt: str | None = None  # on | off | auto
    attn: str | None = None  # eager | sdpa | auto
    budget: str | None = None  # an int or "none"
    label: str = "after"
    env: str | None = None  # KEY=VALUE for the child's environment (e.g. MALLOC_MMAP_THRESHOLD_=131072)
    extra: str | None = None  # one more --set line (e.g. training.learner.logprob_chunk=256)

    def given(self) -> dict[str, Any]:
        """The flags the row gives (results.json's "given"; the rest is the configuration's default)."""
        return {k: v for k, v in (("mode", self.mode), ("micro_batch", self.micro_batch), ("grad_ckpt", self.grad_ckpt),
                                  ("attn", self.attn), ("budget", self.budget), ("env", self.env), ("set", self.extra))
                if v is not None}

    def done(self, rows: list[dict[str, Any]]) -> bool:
        """Whether `rows` (results.json's) hold this row, measured or skipped by its estimate."""
        return any(r["label"] == self.label and r["tokens"] == self.tokens and r.get("given") == self.given()
                   and ("peak_gb" in r or "skipped" in r) for r in rows)


def _list(v: str | None, cast: Any = str) -> list[Any]:
    return [None] if v is None else [cast(x.strip()) for x in v.split(",") if x.strip()]


def expand(tokens: str, mode: str | None = None, micro_batch: str | None = None, grad_ckpt: str | None = None,
           attn: str | None = None, budget: str | None = None, label: str = "after",
           env: str | None = None, extra: str | None = None) -> list[RowSpec]:
    """Every combination of the comma-separated lists (None: not given, the configuration's default).

    >>> [(r.tokens, r.mode, r.grad_ckpt) for r in expand("1024,2048", mode="full", grad_ckpt="on,off")]
    [(1024, 'full', 'on'), (1024, 'full', 'off'), (2048, 'full', 'on'), (2048, 'full', 'off')]
    >>> expand("4096")[0]
    RowSpec(tokens=4096, mode=None, micro_batch=None, grad_ckpt=None, attn=None, budget=None, label='after', env=None, extra=None)
    """
    return [RowSpec(t, m, b, g, a, u, label, env, extra) for t, m, b, g, a, u in itertools.product(
        _list(tokens, int), _list(mode), _list(micro_batch, int), _list(grad_ckpt), _list(attn), _list(budget))]


def child_sets(spec: RowSpec, model: str, knows: set[str]) -> list[str]:
    """The --set lines of a row: the model, the CPU, and only the settings the row gives (`knows`: the learner
    settings the code being run has; a setting it lacks is left out, and recorded by the child as it ran).

    >>> child_sets(RowSpec(1024), "m", {"micro_batch_size"})
    ['training.base_model=m', 'training.learner.device=cpu']
    >>> child_sets(RowSpec(1024, "lora", 4, "on", "sdpa", "none"), "m", {"micro_batch_size", "gradient_checkpointing",
    ...            "attn_implementation", "max_tokens_per_micro_batch"})[2:]
    ['training.learner.lora=true', 'training.learner.micro_batch_size=4', 'training.learner.gradient_checkpointing=true', 'training.learner.attn_implementation="sdpa"', 'training.learner.max_tokens_per_micro_batch=none']
    """
    sets = [f"training.base_model={model}", "training.learner.device=cpu"]
    if spec.mode is not None:
        sets.append(f"training.learner.lora={'true' if spec.mode == 'lora' else 'false'}")
    if spec.micro_batch is not None:
        sets.append(f"training.learner.micro_batch_size={spec.micro_batch}")
    if spec.grad_ckpt is not None:
        value = {"on": "true", "off": "false", "auto": '"auto"'}[spec.grad_ckpt]
        sets.append(f"training.learner.gradient_checkpointing={value}")
    if spec.attn is not None and "attn_implementation" in knows:
        sets.append(f'training.learner.attn_implementation="{spec.attn}"')
    if spec.budget is not None and "max_tokens_per_micro_batch" in knows:
        sets.append(f"training.learner.max_tokens_per_micro_batch={spec.budget}")
    if spec.extra is not None:
        sets.append(spec.extra)
    return sets


KNOWN = ("micro_batch_size", "gradient_checkpointing", "attn_implementation", "max_tokens_per_micro_batch")


def _knows(repo: Path) -> set[str]:
    """The [training.learner] settings of KNOWN the checkout at `repo` has (its config.toml names them)."""
    text = (repo / "config.toml").read_text()
    return {k for k in KNOWN if f"\n{k} =" in text or f"\n# {k} =" in text}


def planned(spec: RowSpec, repo: Path) -> dict[str, Any]:
    """The settings a row will run with, as the child records them (`ran_with`): the checkout's config.toml
    defaults, then what the row gives."""
    import tomllib

    data = tomllib.loads((repo / "config.toml").read_text())["training"]
    lc, kl = data["learner"], data["update"]["kl_coef"]
    ck = {"on": True, "off": False, "auto": "auto"}.get(spec.grad_ckpt or "", lc.get("gradient_checkpointing", False))
    budget = lc.get("max_tokens_per_micro_batch") if spec.budget is None else (
        None if spec.budget == "none" else int(spec.budget))
    return {"mode": spec.mode or ("lora" if lc["lora"] else "full"),
            "micro_batch_size": spec.micro_batch or lc["micro_batch_size"], "grad_ckpt": ck,
            "attn": spec.attn or lc.get("attn_implementation", "auto"),
            "max_tokens_per_micro_batch": budget if "max_tokens_per_micro_batch" in _knows(repo) else None,
            "share_prefix": lc["share_prefix"], "kl_coef": kl, "dtype": lc["dtype"], "autocast": lc["autocast"],
            "logprob_chunk": lc["logprob_chunk"], "lora_r": lc["lora_r"], **_extra(spec.extra)}


def _extra(line: str | None) -> dict[str, Any]:
    """A row's extra --set line as the settings it changes (training.learner.<key> of `planned`'s keys)."""
    if not line or not line.startswith("training.learner."):
        return {}
    key, _, value = line.removeprefix("training.learner.").partition("=")
    try:
        return {key: json.loads(value)}
    except ValueError:
        return {key: value}


def policy_per_row(tokens: int) -> int:
    """The policy tokens of one of CHILD's trajectories of `tokens` tokens (4 replies)."""
    return 4 * min(160, (tokens - min(640, tokens // 4)) // 8)


def estimate_for(ran_with: dict[str, Any], tokens: int, rows: int, shape: Any) -> float:
    """training/learn/memory.py's estimate (bytes) of a row: its largest micro-batch under the settings it ran with."""
    from training.config import TrainingConfig
    from training.learn.api import token_chunks
    from training.learn.memory import estimate_step

    attn = ran_with.get("attn_used") or ran_with.get("attn")
    attn = attn if attn in ("sdpa", "eager") else "auto"
    tc = TrainingConfig(update={"kl_coef": ran_with["kl_coef"]}, learner={
        "lora": ran_with["mode"] == "lora", "lora_r": ran_with.get("lora_r", 16),
        "micro_batch_size": ran_with["micro_batch_size"], "gradient_checkpointing": ran_with["grad_ckpt"],
        "attn_implementation": attn, "max_tokens_per_micro_batch": ran_with["max_tokens_per_micro_batch"],
        "share_prefix": ran_with["share_prefix"], "dtype": ran_with["dtype"], "autocast": ran_with["autocast"],
        "logprob_chunk": ran_with["logprob_chunk"]})
    chunks = token_chunks(list(range(rows)), [tokens] * rows, tc.learner.micro_batch_size,
                          tc.learner.max_tokens_per_micro_batch)
    c = max(len(ch) for ch in chunks)
    return estimate_step(shape, tc, tokens=c * tokens, longest=tokens, policy_tokens=c * policy_per_row(tokens),
                         accumulating=len(chunks) > 1, any_micro_batch=False).total


def run_row(spec: RowSpec, *, model: str, repo: Path, threads: int, cap_bytes: float, timeout_s: float,
            lock: Path | None, shape: Any = None) -> dict[str, Any]:
    """Measure one row in a fresh process (see the module docstring); the row's record."""
    import tempfile

    row: dict[str, Any] = {"label": spec.label, "tokens": spec.tokens, "given": spec.given()}
    plan = planned(spec, repo)
    rows_n = spec.micro_batch or int(plan["micro_batch_size"])
    row["rows"] = rows_n
    if shape is not None:
        estimate = estimate_for(plan, spec.tokens, rows_n, shape)
        if estimate > cap_bytes:
            row.update(plan)
            row["skipped"] = f"estimated {estimate / GB:.1f} GB > the cap {cap_bytes / GB:.0f} GB"
            row["estimate_gb"] = round(estimate / GB, 3)
            return row
    knows = _knows(repo)
    child = {"sets": child_sets(spec, model, knows), "rows": rows_n, "tokens": spec.tokens, "threads": threads,
             "attn": spec.attn if "attn_implementation" not in knows else None}
    env = dict(os.environ, PYTHONPATH=str(repo), LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    if spec.env:
        key, _, value = spec.env.partition("=")
        env[key] = value
    fd = None
    if lock is not None:
        fd = os.open(str(lock), os.O_CREAT | os.O_RDWR, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)  # one measurement at a time on a shared machine
    try:
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            p = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(child)], cwd=str(repo), env=env,
                                 stdout=out, stderr=err, text=True)
            t0, seen, killed, status, usage = time.monotonic(), 0, None, 0, None
            while True:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                seen = max(seen, tree_rss(p.pid)[1])  # the row's process (it starts none)
                if killed is None and seen > cap_bytes:
                    killed = f"killed: RSS {seen / GB:.1f} GB above the cap {cap_bytes / GB:.0f} GB"
                elif killed is None and time.monotonic() - t0 > timeout_s:
                    killed = f"killed: still running after {timeout_s:.0f} s"
                if killed:
                    os.kill(p.pid, signal.SIGKILL)
                time.sleep(0.1)
            p.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
    finally:
        if fd is not None:
            os.close(fd)
    row["sampled_peak_gb"] = round(seen / GB, 3)
    row["wall_s"] = round(time.monotonic() - t0, 1)
    if killed:
        row.update({k: v for k, v in plan.items() if k not in row})
        row["error"] = killed
        return row
    result = next((json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT ")), None)
    if p.returncode != 0 or result is None:
        row["error"] = (stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][:300]
        return row
    if usage is not None:
        row["lifetime_peak_gb"] = round(usage.ru_maxrss * 1024 / GB, 3)
    rw = {**result["ran_with"], "lora_r": plan["lora_r"]}
    row.update({"mode": rw["mode"], "micro_batch_size": rw["micro_batch_size"], "grad_ckpt": rw["grad_ckpt"],
                "attn": rw["attn"], "attn_used": rw["attn_used"],
                "max_tokens_per_micro_batch": rw["max_tokens_per_micro_batch"],
                "peak_gb": round(result["peak_bytes"] / GB, 3), "rss_before_gb": round(result["rss_before_bytes"] / GB, 3),
                "update_s": round(result["seconds"], 1), "micro_batches": result["micro_batches"],
                "policy_tokens": result["policy_tokens"], "loss": result["loss"], "ran_with": rw})
    return row


def add_estimates(rows: list[dict[str, Any]], shape: Any) -> None:
    """Each measured row's estimate_gb from the settings it ran with (recomputed: the formula may have moved)."""
    for r in rows:
        if "ran_with" in r:
            r["estimate_gb"] = round(estimate_for(r["ran_with"], r["tokens"], r["rows"], shape) / GB, 3)


def fit_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The estimate's error against the measured rows: (estimate - measured) / measured, its mean and largest |.|."""
    errs = [(r["estimate_gb"] - r["peak_gb"]) / r["peak_gb"] for r in rows if "peak_gb" in r and "estimate_gb" in r]
    if not errs:
        return {}
    return {"rows": len(errs), "mean_rel_error": sum(errs) / len(errs), "max_abs_rel_error": max(abs(e) for e in errs),
            "under": sum(e < 0 for e in errs)}


def _setting(r: dict[str, Any]) -> str:
    raw = r.get("grad_ckpt")
    ck = raw if isinstance(raw, str) else {True: "on", False: "off"}.get(bool(raw)) if raw is not None else None
    budget = r.get("max_tokens_per_micro_batch", "-")
    return (f"{r.get('mode', r['given'].get('mode', '?'))} | {r.get('rows', '?')} | {ck or r['given'].get('grad_ckpt', '?')} | "
            f"{r.get('attn_used') or r['given'].get('attn', '?')} | {budget if budget is not None else 'none'} | "
            f"{_other(r)}")


def _other(r: dict[str, Any]) -> str:
    """A row's settings beyond the table's columns: its extra --set line and environment ('-' when none).

    >>> _other({"given": {"set": "training.learner.logprob_chunk=256", "env": "A=1"}}), _other({"given": {}})
    ('logprob_chunk=256, A=1', '-')
    """
    g = r.get("given", {})
    parts = [str(g["set"]).removeprefix("training.learner.")] if g.get("set") else []
    parts += [str(g["env"])] if g.get("env") else []
    return ", ".join(parts) or "-"


def readme(result: dict[str, Any], notes: str | None = None) -> str:
    """The README table of results.json's rows (label, then settings, then tokens), under `notes` (the results
    folder's hand-written notes.md) when given."""
    rows = result["rows"]
    lines = [f"# Learner peak memory: one update of {result['model']}, all layers, through the project's Learner",
             "", *([notes.strip(), ""] if notes else []), "## The measurements", "",
             "Measured with:", "", *[f"    {c}" for c in result["commands"]], "",
             "Peak RSS of the whole process during ONE `Learner.update` (VmHWM reset before it; weights, reference, "
             "AdamW state and activations), a fresh process per row, 1 torch thread, "
             f"{result['machine']}. `rows` = sequences of `tokens` tokens in the update (one GRPO group); "
             "`budget` = training.learner.max_tokens_per_micro_batch; `ckpt` = training.learner.gradient_checkpointing "
             "(auto: per micro-batch, training/learn/memory.py); `attn` = the attention transformers ran. "
             "`estimate` = training/learn/memory.py's formula for the row's largest micro-batch.", "",
             "| code | mode | rows | ckpt | attn | budget | other | tokens | micro-batches | peak GB | estimate GB | update s |",
             "| --- | --- | ---: | --- | --- | ---: | --- | ---: | --- | ---: | ---: | ---: |"]
    for r in sorted(rows, key=lambda r: (r["label"] != "before", _setting(r), r["tokens"])):
        mbs = r.get("micro_batches")
        mb = f"{len(mbs)} x {mbs[0][0]}x{max(m[1] for m in mbs)}" if mbs else "-"
        peak = f"{r['peak_gb']:.2f}" if "peak_gb" in r else (r.get("skipped") or r.get("error") or "-")
        lines.append(f"| {r['label']} | {_setting(r)} | {r['tokens']} | {mb} | {peak} | "
                     f"{r.get('estimate_gb', '-')} | {r.get('update_s', '-')} |")
    fit = result.get("estimate_fit") or {}
    if fit:
        lines += ["", f"Estimate against the {fit['rows']} measured rows: mean relative error "
                  f"{fit['mean_rel_error']:+.1%}, largest |error| {fit['max_abs_rel_error']:.1%} "
                  f"({fit['under']} rows under-estimated)."]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], out: Path) -> None:
    """peak_gb against tokens, one line per setting (mode, rows, ckpt, attn, budget) and code."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float]]] = {}
    for r in result["rows"]:
        if "peak_gb" in r:
            series.setdefault(f"{r['label']}: {_setting(r)}", []).append((r["tokens"], r["peak_gb"]))
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for name, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-" if name.startswith("after") else "s--", label=name,
                lw=1.2, ms=4)
    ax.axhline(4.0, color="grey", ls=":", lw=1)
    ax.set_xlabel("tokens a sequence")
    ax.set_ylabel("peak RSS of one update (GB)")
    ax.set_title(f"{result['model']}: one learner update (mode | rows | ckpt | attn | budget | other)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="upper left", ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
