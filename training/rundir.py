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
    checkpoints/best            the name of the checkpoint with the best held-out score so far (ties: the newer)
    recovery.jsonl              one row per rollback decision (training/run/recovery.py), written before it is acted
                                on: its trigger, onset, target checkpoint and changes (`append_recovery`, `roll_back`)
    config.json                 the run's whole configuration (`write_config`)
    searcher.json               searcher/trained.py's record of what the searcher is trained with (written there)

Reading and appending go through s3core.io (`read_log_jsonl`, `repair_tail`, `append_jsonl`), like eval/rundir.py.
A checkpoint's pickles (trainer_state.pt, inflight.pt) are read with the module names of classes that have moved since
they were written mapped onto where they live now (`MOVED_MODULES`), so an old run still resumes. No model code here.

Rollbacks (training/run/recovery.py): every metrics.jsonl and heldout(_questions).jsonl row carries `generation`, the
number of rollbacks decided when it was written (absent = 0). Rollback k (0-based) to step T abandons the rows of
generation <= k after step T: they are passed over by every reader here (`metrics_rows`, `heldout_rows`, ...), so the
run reads as the branch that led to its weights. A rollback's own metrics row is an event row ({"event": "rollback"}:
`rollback_events`), never a step's row.
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
from s3core.io import append_jsonl, read_log_jsonl, repair_tail, stored, write_text_atomic
from s3core.runs import CHECKPOINTS, pointer, policy_checkpoint

__all__ = ["CONFIG_FILE", "HELDOUT_FILE", "HELDOUT_QUESTIONS_FILE", "METRICS_FILE", "STATE_FILE", "MetricsWriter", "append_heldout",
           "append_recovery", "append_timeline", "best_checkpoint", "checkpoint_name", "checkpoint_path", "checkpoint_step", "choose_heldout",
           "heldout_question_rows", "heldout_rows", "latest_checkpoint", "metrics_rows", "pointer", "policy_checkpoint",
           "read_inflight", "read_metrics", "read_state", "read_timeline", "recovery_rows", "roll_back",
           "rollback_events", "set_pointer", "step_times", "write_config", "write_inflight", "write_state", "writing_checkpoint"]

METRICS_FILE = "metrics.jsonl"
CONFIG_FILE = "config.json"
STATE_FILE = "trainer_state.pt"  # optimizer, scheduler, RNG, data order, value head
HELDOUT_FILE = "heldout.jsonl"
HELDOUT_QUESTIONS_FILE = "heldout_questions.jsonl"
INFLIGHT_FILE = "inflight.pt"  # the batches in flight at a checkpoint (asynchronous RL)
TIMELINE_FILE = "timeline.jsonl"
RECOVERY_FILE = "recovery.jsonl"

# where the classes a checkpoint pickles (the batches in flight: training/run/step.py's RolloutBatch / ScoredBatch)
# were defined when older checkpoints were written -> where they live now
MOVED_MODULES = {
    "training.trainer": "training.run.step",  # re-exported by the trainer before issue 59 (defined in step.py)
    "training.step": "training.run.step",
}


def write_config(run_dir: Path, config_json: str) -> None:
    """The run's whole configuration as config.json (the trainer writes it at every start)."""
    write_text_atomic(run_dir / CONFIG_FILE, config_json)


# ---------------------------------------------------------------------------------------------------- metrics
def _live(run_dir: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` without those a rollback abandoned (the module docstring), in file order."""
    targets = [int(r["to_step"]) for r in recovery_rows(run_dir)]
    return [r for r in rows if "step" in r
            and not any(int(r["step"]) > t for t in targets[int(r.get("generation", 0)) :])]


def metrics_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl, the last row per step, by step ([] when there is none yet); rows a rollback abandoned
    and rollback event rows left out."""
    rows = _live(Path(run_dir), read_log_jsonl(Path(run_dir) / METRICS_FILE))
    by_step = {int(row["step"]): row for row in rows if "event" not in row}
    return [by_step[k] for k in sorted(by_step)]


def rollback_events(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rollbacks' metrics rows ({"event": "rollback", "step": where it was triggered, "recovery/...": ...}), one
    per rollback, in order."""
    rows = {int(r["recovery/rollback"]): r for r in read_log_jsonl(Path(run_dir) / METRICS_FILE)
            if r.get("event") == "rollback"}
    return [rows[k] for k in sorted(rows)]


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of metrics.jsonl (the last row per step wins: a resumed run may repeat a step); an error when the
    directory has none."""
    if not stored(Path(run_dir) / METRICS_FILE).is_file():  # or metrics.jsonl.gz: a run archived in benchmarks/results
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
        self.repaired = False  # the first write cuts a line torn by a kill and unpacks a metrics.jsonl.gz
        self.tb: Any = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tb"))
        except ImportError:  # tensorboard is optional
            self.tb = None

    def write(self, step: int, row: dict[str, Any]) -> None:
        generation = len(recovery_rows(self.path.parent))  # the rollbacks so far: whose branch the row is on
        if not self.repaired:
            repair_tail(self.path)
            self.repaired = True
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, **row, "generation": generation}) + "\n")
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
    """One RL step's timeline row, marked with the run's generation (a line torn by a kill is cut first)."""
    repair_tail(run_dir / TIMELINE_FILE)
    append_jsonl(run_dir / TIMELINE_FILE, [{**row, "generation": len(recovery_rows(run_dir))}])


def read_timeline(run_dir: str | Path) -> list[dict[str, Any]]:
    """timeline.jsonl's rows, the last per step (a resumed run may repeat one), by step; rows a rollback abandoned
    left out."""
    rows = {int(r["step"]): r for r in _live(Path(run_dir), read_log_jsonl(Path(run_dir) / TIMELINE_FILE))}
    return [rows[k] for k in sorted(rows)]


# ---------------------------------------------------------------------------------------------------- held-out rows
def append_heldout(run_dir: Path, row: dict[str, Any], questions: list[dict[str, Any]]) -> None:
    """One held-out evaluation: its per-question rows, then its summary row (a summary row means they were all
    written); a line torn by a kill is cut before appending. Each row is marked with the run's generation."""
    generation = len(recovery_rows(run_dir))
    for name, rows in ((HELDOUT_QUESTIONS_FILE, questions), (HELDOUT_FILE, [row])):
        repair_tail(run_dir / name)
        append_jsonl(run_dir / name, [{**r, "generation": generation} for r in rows])


def heldout_rows(run_dir: Path, up_to: int | None = None) -> list[dict[str, Any]]:
    """heldout.jsonl's rows, the last per step (a resumed run may repeat one), by step; with `up_to`, the steps at
    or before it (rows left by a run cut before its checkpoint are passed over)."""
    rows = {int(r["step"]): r for r in _live(run_dir, read_log_jsonl(run_dir / HELDOUT_FILE))}
    return [rows[s] for s in sorted(rows) if up_to is None or s <= up_to]


def heldout_question_rows(run_dir: Path, step: int) -> list[dict[str, Any]]:
    """The per-question rows of the held-out evaluation after `step` (its last, when a resumed run repeated it; rows
    a rollback abandoned passed over): {"id", "reward", "acc_s3", ...}; [] when there is none."""
    rows = [r for r in _live(run_dir, read_log_jsonl(run_dir / HELDOUT_QUESTIONS_FILE)) if int(r["step"]) == step]
    last = {str(r["id"]): r for r in rows}  # a repeated evaluation's rows come after the first's
    return list(last.values())


def choose_heldout(rows: list[dict[str, Any]]) -> str | None:
    """The checkpoint of the best held-out row: the highest heldout/acc_s3 (the generator's accuracy with the
    searcher's documents), or heldout/reward when no row has an Acc (search_r1 mode, r1_searcher_stage1); ties go
    to the newer step (as good, and trained longer: what a run that heals itself goes on from); rows without a finite
    score are passed over. None when no row has one."""

    def score(r: dict[str, Any], key: str) -> float | None:
        v = r.get(key)
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

    key = "heldout/acc_s3" if any(score(r, "heldout/acc_s3") is not None for r in rows) else "heldout/reward"
    scored = [(v, int(r["step"]), str(r["checkpoint"])) for r in rows if (v := score(r, key)) is not None]
    return max(scored)[2] if scored else None


def best_checkpoint(run_dir: Path, step: int) -> str | None:
    """The checkpoint with the highest held-out Acc(searcher docs) up to `step` (ties: the newer); None before any
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


# ---------------------------------------------------------------------------------------------------- rollbacks
def recovery_rows(run_dir: Path) -> list[dict[str, Any]]:
    """recovery.jsonl's rollback decisions, in order ([] for a run that never rolled back)."""
    return read_log_jsonl(Path(run_dir) / RECOVERY_FILE)


def append_recovery(run_dir: Path, decision: dict[str, Any]) -> None:
    """Commit to a rollback ({"rollback": k, "step", "trigger", "onset", "to_step", "changes", ...}) before it is
    acted on: from here on the run is on the rollback's branch, whatever kills it (`roll_back` does the rest)."""
    repair_tail(run_dir / RECOVERY_FILE)
    append_jsonl(run_dir / RECOVERY_FILE, [decision])


def roll_back(run_dir: Path, decision: dict[str, Any]) -> None:
    """Act on the rollback decision last appended (idempotent: a run killed half-way does it again on resume, to the
    same end): checkpoints/latest -> its target; the checkpoints after the target (the abandoned branch) and the
    target's batches in flight (rolled out for the steps the rollback skips) go; checkpoints/best is chosen again from
    the rows still on the run's branch; its event row is appended to metrics.jsonl (once)."""
    ckpts = run_dir / CHECKPOINTS
    target = checkpoint_path(run_dir, int(decision["to_step"]))
    (target / INFLIGHT_FILE).unlink(missing_ok=True)
    set_pointer(run_dir, "latest", target.name)  # the pointers first: a kill below never leaves one dangling
    best = best_checkpoint(run_dir, int(decision["to_step"]))
    if best is not None and (ckpts / best).is_dir():
        set_pointer(run_dir, "best", best)
    elif (old := pointer(run_dir, "best")) is not None and (
            not (ckpts / old).is_dir() or checkpoint_step(ckpts / old) > int(decision["to_step"])):  # it goes below
        (ckpts / "best").unlink()
    for p in ckpts.glob("step_*"):
        if p.is_dir() and p != target and checkpoint_step(p) > int(decision["to_step"]):
            shutil.rmtree(p, ignore_errors=True)
    if all(int(r["recovery/rollback"]) != int(decision["rollback"]) for r in rollback_events(run_dir)):
        row = {"step": int(decision["step"]), "event": "rollback", "recovery/rollback": int(decision["rollback"]),
               "recovery/to_step": int(decision["to_step"]), "recovery/onset": int(decision["onset"]),
               "recovery/trigger": str(decision["trigger"]), "generation": int(decision["rollback"])}
        repair_tail(run_dir / METRICS_FILE)
        append_jsonl(run_dir / METRICS_FILE, [row])


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
