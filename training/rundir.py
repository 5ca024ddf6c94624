"""The run directory of `s3 train` (training.output_dir): the one reader and writer of its files.

    metrics.jsonl               one row per step (reward/..., losses/..., search/..., charts/...); the last row per step
                                wins (a resumed run may repeat one); a line torn by a kill is passed over
    tb/                         the same scalars for TensorBoard (when tensorboard is installed)
    heldout.jsonl               one row per held-out evaluation (training.heldout.every): step, checkpoint, heldout/...
    heldout_questions.jsonl     one row per question and held-out evaluation (what the searcher did, how it scored);
                                written before its heldout.jsonl row: a row there means all of them were written
    checkpoints/step_000010/    policy/ (+ adapter/), trainer_state.pt; written to a temporary dir and renamed
    checkpoints/step_N/inflight.pt  the batches rolled out ahead of step N (training.rollout.max_staleness > 0):
                                rollouts, rewards, the weights version of each; absent when none
    timeline.jsonl              one row per RL step: when its batch's rollout, scoring, the wait, the update and the
                                sync began and ended (time.time()), its weights version and staleness (`s3 plot`)
    checkpoints/latest          the name of the newest complete checkpoint (what a resume starts from)
    checkpoints/best            the name of the checkpoint with the best held-out score so far
    config.json, searcher.json  written by the trainer (the run's configuration; searcher/trained.py's record)

Reading and appending go through s3core.io (`read_log_jsonl`, `repair_tail`, `append_jsonl`), like eval/rundir.py.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from s3core.errors import S3Error
from s3core.io import append_jsonl, read_log_jsonl, repair_tail, write_text_atomic

__all__ = ["HELDOUT_FILE", "HELDOUT_QUESTIONS_FILE", "METRICS_FILE", "STATE_FILE", "MetricsWriter", "append_heldout",
           "append_timeline", "best_checkpoint", "checkpoint_path", "checkpoint_step", "choose_heldout", "export_policy",
           "heldout_rows", "latest_checkpoint", "metrics_rows", "read_inflight", "read_metrics", "read_state",
           "read_timeline", "step_times", "write_inflight", "writing_checkpoint"]

METRICS_FILE = "metrics.jsonl"
STATE_FILE = "trainer_state.pt"  # optimizer, scheduler, RNG, data order, value head
HELDOUT_FILE = "heldout.jsonl"
HELDOUT_QUESTIONS_FILE = "heldout_questions.jsonl"
INFLIGHT_FILE = "inflight.pt"  # the batches in flight at a checkpoint (asynchronous RL)
TIMELINE_FILE = "timeline.jsonl"
CHECKPOINTS = "checkpoints"


# ---------------------------------------------------------------------------------------------------- metrics
def metrics_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl, the last row per step, by step ([] when there is none yet)."""
    by_step = {int(row["step"]): row for row in read_log_jsonl(Path(run_dir) / METRICS_FILE) if "step" in row}
    return [by_step[k] for k in sorted(by_step)]


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl (the last row per step wins: a resumed run may repeat a step); an error when the
    directory has none."""
    if not (Path(run_dir) / METRICS_FILE).is_file():
        raise S3Error(f"no metrics.jsonl in {run_dir}: is it a training run directory?")
    return metrics_rows(run_dir)


def step_times(run_dir: Path) -> dict[str, float]:
    """The wall time of the run's last warm-up step ('sft'), last RL step ('rl') and last held-out evaluation
    ('heldout') in metrics.jsonl (what a time budget judges the next step by, also right after a resume)."""
    out: dict[str, float] = {}
    for row in metrics_rows(run_dir):
        if isinstance(row.get("charts/step_seconds"), int | float):
            out["sft" if row.get("charts/sft") else "rl"] = float(row["charts/step_seconds"])
        if isinstance(row.get("charts/heldout_seconds"), int | float):
            out["heldout"] = float(row["charts/heldout_seconds"])
    return out


class MetricsWriter:
    """Appends a step's row to metrics.jsonl (one write + fsync) and its numbers to TensorBoard (when installed)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / METRICS_FILE
        self.tb: Any = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tb"))
        except ImportError:  # tensorboard is optional
            self.tb = None

    def write(self, step: int, row: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, **row}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if self.tb is not None:
            for k, v in row.items():
                if isinstance(v, int | float):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None


def append_timeline(run_dir: Path, row: dict[str, Any]) -> None:
    """One RL step's timeline row (a line torn by a kill is cut first)."""
    repair_tail(run_dir / TIMELINE_FILE)
    append_jsonl(run_dir / TIMELINE_FILE, [row])


def read_timeline(run_dir: str | Path) -> list[dict[str, Any]]:
    """timeline.jsonl's rows, the last per step (a resumed run may repeat one), by step."""
    rows = {int(r["step"]): r for r in read_log_jsonl(Path(run_dir) / TIMELINE_FILE) if "step" in r}
    return [rows[k] for k in sorted(rows)]


# ---------------------------------------------------------------------------------------------------- held-out rows
def append_heldout(run_dir: Path, row: dict[str, Any], questions: list[dict[str, Any]]) -> None:
    """One held-out evaluation: its per-question rows, then its summary row (a summary row means they were all
    written); a line torn by a kill is cut before appending."""
    for name, rows in ((HELDOUT_QUESTIONS_FILE, questions), (HELDOUT_FILE, [row])):
        repair_tail(run_dir / name)
        append_jsonl(run_dir / name, rows)


def heldout_rows(run_dir: Path, up_to: int | None = None) -> list[dict[str, Any]]:
    """heldout.jsonl's rows, the last per step (a resumed run may repeat one), by step; with `up_to`, the steps at
    or before it (rows left by a run cut before its checkpoint are passed over)."""
    rows = {int(r["step"]): r for r in read_log_jsonl(run_dir / HELDOUT_FILE)}
    return [rows[s] for s in sorted(rows) if up_to is None or s <= up_to]


def choose_heldout(rows: list[dict[str, Any]]) -> str | None:
    """The checkpoint of the best held-out row: the highest heldout/acc_s3 (the generator's accuracy with the
    searcher's documents), or heldout/reward when no row has an Acc (search_r1 mode, r1_searcher_stage1); ties go
    to the earlier step; rows without a finite score are passed over. None when no row has one."""

    def score(r: dict[str, Any], key: str) -> float | None:
        v = r.get(key)
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

    key = "heldout/acc_s3" if any(score(r, "heldout/acc_s3") is not None for r in rows) else "heldout/reward"
    scored = [(v, -int(r["step"]), str(r["checkpoint"])) for r in rows if (v := score(r, key)) is not None]
    return max(scored)[2] if scored else None


def best_checkpoint(run_dir: Path, step: int) -> str | None:
    """The checkpoint with the highest held-out Acc(searcher docs) up to `step` (ties: the earlier); None before any
    held-out evaluation."""
    return choose_heldout(heldout_rows(run_dir, up_to=step))


# ---------------------------------------------------------------------------------------------------- checkpoints
def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS / f"step_{step:06d}"


def checkpoint_step(ckpt: Path) -> int:
    """The step a checkpoint folder was written at (its name: step_000010)."""
    return int(ckpt.name.removeprefix("step_"))


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run directory (checkpoints/latest), or None for a fresh run."""
    latest = run_dir / CHECKPOINTS / "latest"
    return run_dir / CHECKPOINTS / latest.read_text().strip() if latest.is_file() else None


@contextlib.contextmanager
def writing_checkpoint(run_dir: Path, step: int, keep: int) -> Iterator[Path]:
    """The temporary folder checkpoint `step` is written into; once the block is done it is renamed into place,
    checkpoints/latest (and checkpoints/best) point at the newest (best) one, and all but the last `keep` go (the
    best stays). A kill never leaves half a checkpoint."""
    final = checkpoint_path(run_dir, step)
    ckpts = final.parent
    tmp = ckpts / f".{final.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    yield tmp
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_text_atomic(ckpts / "latest", final.name)
    best = best_checkpoint(run_dir, step)
    if best is not None and (ckpts / best).is_dir():
        write_text_atomic(ckpts / "best", best)
    old = sorted(p for p in ckpts.glob("step_*") if p.is_dir())
    for p in old[:-keep]:
        if p.name != best:  # the held-out choice stays
            shutil.rmtree(p, ignore_errors=True)


def write_state(folder: Path, state: dict[str, Any]) -> None:
    import torch

    torch.save(state, folder / STATE_FILE)


def write_inflight(folder: Path, batches: list[dict[str, Any]]) -> None:
    """The batches in flight at a checkpoint (training/pipeline.py `RolloutPipeline.state`)."""
    import torch

    torch.save(batches, folder / INFLIGHT_FILE)


def read_inflight(ckpt: Path) -> list[dict[str, Any]]:
    """A checkpoint's batches in flight ([] when it has none: a synchronous run's)."""
    import torch

    path = ckpt / INFLIGHT_FILE
    return list(torch.load(path, map_location="cpu", weights_only=False)) if path.is_file() else []


def read_state(ckpt: Path) -> dict[str, Any]:
    """A checkpoint's trainer_state.pt: step, optimizer, scheduler, value_head, rng, data_order."""
    import torch

    return dict(torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=False))


def export_policy(checkpoint: str | Path, out: str | Path, base_model: str | None = None) -> Path:
    """Export a checkpoint (or a run directory's newest) as a plain Hugging Face dir. A LoRA checkpoint (adapter/) is
    merged into its base."""
    ckpt = latest_checkpoint(Path(checkpoint)) or Path(checkpoint)
    out = Path(out)
    if (ckpt / "adapter").is_dir() and base_model:
        from peft import PeftModel

        from searcher.policy.transformers_policy import TransformersPolicy
        from training.learner import export_model

        pol = TransformersPolicy.load(base_model)
        merged = PeftModel.from_pretrained(pol.model, str(ckpt / "adapter"))
        export_model(merged, pol.tokenizer, out, lora=True)
        return out
    if not (ckpt / "policy").is_dir():
        raise S3Error(f"{ckpt} is not a training checkpoint (no policy/ directory)")
    if out.exists():
        raise S3Error(f"{out} exists; choose a new directory")
    shutil.copytree(ckpt / "policy", out)
    return out


def export_adapter(model: str | Path, base_model: str, out: str | Path, rank: int, tol: float = 1e-3,
                   dtype: str = "float16") -> dict[str, Any]:
    """A merged policy as one small LoRA adapter on `base_model`: what ships when a run started from an earlier merged
    run (phase 1d: the warm-up's adapter merged, then a fresh one trained), whose plain model dir is 0.5 GB. Every
    tensor of `model` must equal the base's except 2-D linear weights; each changed one becomes the rank-`rank`
    truncated SVD of its difference (B = U·sqrt(S), A = sqrt(S)·Vh; lora_alpha = rank, so the scale is 1). Two merged
    rank-8 adapters are exactly rank 16. The factors are stored as `dtype` (float16 by default: half float32's bytes,
    and its 10-bit mantissa keeps the rounding near 2e-4 of the difference, where bfloat16's 7 bits would cost ~2e-3).
    Raises S3Error when anything else changed or when a layer's remainder (the norm of what the stored factors miss,
    truncation and rounding together, over the difference's) exceeds `tol`. `model` may itself be an adapter on
    `base_model` (re-exported at another rank or dtype). Returns the layer count, the largest remainder and the
    adapter's size."""
    import torch
    from peft import LoraConfig
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from searcher.policy.transformers_policy import resolve_checkpoint

    out = Path(out)
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if dtype not in dtypes:
        raise S3Error(f"dtype {dtype!r}: choose one of {', '.join(dtypes)}")
    if out.exists():
        raise S3Error(f"{out} exists; choose a new directory")
    where = resolve_checkpoint(str(model))
    base_dir = resolve_checkpoint(base_model)
    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    if isinstance(where, Path) and (where / "adapter_config.json").is_file():
        # an adapter already (re-exported at another rank or dtype): merged on a copy of the base (merging changes
        # the model it wraps)
        import copy

        from peft import PeftModel

        tuned = PeftModel.from_pretrained(copy.deepcopy(base), str(where)).merge_and_unload()
    else:
        tuned = AutoModelForCausalLM.from_pretrained(str(where), dtype=torch.float32)
    linear = {name for name, mod in base.named_modules() if isinstance(mod, torch.nn.Linear)}
    base_sd = base.state_dict()
    tensors: dict[str, Any] = {}
    targets: set[str] = set()
    worst = 0.0
    for name, w in tuned.state_dict().items():
        if name not in base_sd or base_sd[name].shape != w.shape:
            raise S3Error(f"{where} and {base_model} are different architectures ({name})")
        diff = (w - base_sd[name]).double()
        if not diff.abs().max().item():
            continue
        module = name.removesuffix(".weight")
        if module not in linear or not name.endswith(".weight") or module.endswith("lm_head"):
            raise S3Error(f"{name} differs from {base_model} and is not a LoRA target (a linear layer's weight): "
                          "not an adapter's merge")
        u, s, vh = torch.linalg.svd(diff, full_matrices=False)
        root = s[:rank].sqrt()
        lora_b = (u[:, :rank] * root).to(dtypes[dtype]).contiguous()
        lora_a = (root[:, None] * vh[:rank]).to(dtypes[dtype]).contiguous()
        rest = float((diff - lora_b.double() @ lora_a.double()).norm() / diff.norm())
        worst = max(worst, rest)
        if rest > tol:
            raise S3Error(f"{name}: a rank-{rank} {dtype} adapter leaves {rest:.2e} of the difference (> {tol:g}); "
                          f"raise the rank (the difference has {int((s > s[0] * 1e-6).sum())} singular values)"
                          + ("" if dtype == "float32" else " or store float32"))
        tensors[f"base_model.model.{module}.lora_B.weight"] = lora_b
        tensors[f"base_model.model.{module}.lora_A.weight"] = lora_a
        targets.add(module.rsplit(".", 1)[-1])
    if not targets:
        raise S3Error(f"{where} equals {base_model}: nothing to export")
    out.mkdir(parents=True)
    LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0, target_modules=sorted(targets), bias="none",
               task_type="CAUSAL_LM", base_model_name_or_path=base_model).save_pretrained(str(out))
    save_file(tensors, str(out / "adapter_model.safetensors"))
    return {"layers": len(tensors) // 2, "targets": sorted(targets), "max_remainder": worst,
            "bytes": (out / "adapter_model.safetensors").stat().st_size}
