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
    config.json                 the run's whole configuration (`write_config`)
    searcher.json               searcher/trained.py's record of what the searcher is trained with (written there)

Reading and appending go through s3core.io (`read_log_jsonl`, `repair_tail`, `append_jsonl`), like eval/rundir.py.
A checkpoint's pickles (trainer_state.pt, inflight.pt) are read with the module names of classes that have moved since
they were written mapped onto where they live now (`MOVED_MODULES`), so an old run still resumes. No model code here.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from s3core.errors import S3Error
from s3core.io import append_jsonl, read_log_jsonl, repair_tail, write_text_atomic

__all__ = ["CONFIG_FILE", "HELDOUT_FILE", "HELDOUT_QUESTIONS_FILE", "METRICS_FILE", "STATE_FILE", "MetricsWriter", "append_heldout",
           "append_timeline", "best_checkpoint", "checkpoint_name", "checkpoint_path", "checkpoint_step", "choose_heldout",
           "heldout_rows", "latest_checkpoint", "metrics_rows", "pointer", "read_inflight", "read_metrics", "read_state",
           "read_timeline", "set_pointer", "step_times", "write_config", "write_inflight", "write_state", "writing_checkpoint"]

METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
STATE_FILE = "trainer_state.pt"  # optimizer, scheduler, RNG, data order, value head
HELDOUT_FILE = "heldout.jsonl"
HELDOUT_QUESTIONS_FILE = "heldout_questions.jsonl"
INFLIGHT_FILE = "inflight.pt"  # the batches in flight at a checkpoint (asynchronous RL)
TIMELINE_FILE = "timeline.jsonl"
CHECKPOINTS = "checkpoints"

# where the classes a checkpoint pickles (the batches in flight: training/run/step.py's RolloutBatch / ScoredBatch)
# were defined when older checkpoints were written -> where they live now
MOVED_MODULES = {
    "training.trainer": "training.run.step",  # re-exported by the trainer before issue 59 (defined in step.py)
    "training.step": "training.run.step",
}


def write_config(run_dir: Path, config_json: str) -> None:
    """The run's whole configuration as config.json (the trainer writes it at every start)."""
    (run_dir / CONFIG_FILE).write_text(config_json)


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
def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint written after `step` steps (step_000010), as heldout.jsonl names it too."""
    return f"step_{step:06d}"


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS / checkpoint_name(step)


def checkpoint_step(ckpt: Path) -> int:
    """The step a checkpoint folder was written at (its name: step_000010)."""
    return int(ckpt.name.removeprefix("step_"))


def pointer(run_dir: Path, which: Literal["latest", "best"]) -> str | None:
    """The checkpoint name checkpoints/latest (the newest complete one) or checkpoints/best (the held-out choice)
    holds, or None where there is no such file."""
    f = run_dir / CHECKPOINTS / which
    return f.read_text().strip() if f.is_file() else None


def set_pointer(run_dir: Path, which: Literal["latest", "best"], name: str) -> None:
    """Point checkpoints/latest or checkpoints/best at checkpoint `name` (atomically)."""
    write_text_atomic(run_dir / CHECKPOINTS / which, name)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run directory (checkpoints/latest), or None for a fresh run."""
    name = pointer(run_dir, "latest")
    return run_dir / CHECKPOINTS / name if name is not None else None


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
    set_pointer(run_dir, "latest", final.name)
    best = best_checkpoint(run_dir, step)
    if best is not None and (ckpts / best).is_dir():
        set_pointer(run_dir, "best", best)
    old = sorted(p for p in ckpts.glob("step_*") if p.is_dir())
    for p in old[:-keep]:
        if p.name != best:  # the held-out choice stays
            shutil.rmtree(p, ignore_errors=True)


def write_state(folder: Path, state: dict[str, Any]) -> None:
    import torch

    torch.save(state, folder / STATE_FILE)


def write_inflight(folder: Path, batches: list[dict[str, Any]]) -> None:
    """The batches in flight at a checkpoint (training/rollouts/pipeline.py `RolloutPipeline.state`)."""
    import torch

    torch.save(batches, folder / INFLIGHT_FILE)


def _load(path: Path) -> Any:
    """A checkpoint's pickle, a class of a module that has moved found where it lives now (`MOVED_MODULES`)."""
    import pickle
    import types

    import torch

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            return super().find_class(MOVED_MODULES.get(module, module), name)

    remapped = types.ModuleType("pickle_moved")  # torch.load's pickle_module: pickle, with the remapping Unpickler
    remapped.__dict__.update(vars(pickle))
    remapped.Unpickler = Unpickler  # type: ignore[attr-defined]
    return torch.load(path, map_location="cpu", weights_only=False, pickle_module=remapped)


def read_inflight(ckpt: Path) -> list[dict[str, Any]]:
    """A checkpoint's batches in flight ([] when it has none: a synchronous run's)."""
    path = ckpt / INFLIGHT_FILE
    return list(_load(path)) if path.is_file() else []


def read_state(ckpt: Path) -> dict[str, Any]:
    """A checkpoint's trainer_state.pt: step, optimizer, scheduler, value_head, rng, data_order."""
    return dict(_load(ckpt / STATE_FILE))
