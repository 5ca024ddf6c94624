"""The checkpoint pointers of a training run directory (RUN_DIR/checkpoints/latest and /best), read by everything
that loads a run's policy. training/rundir.py writes them and owns the rest of the run directory; it sits above the
searcher, whose checkpoint resolver (searcher/policy/transformers_policy.py `resolve_checkpoint`: `s3 search --policy
RUN_DIR`, `s3 serve`, `s3 train-eval`, the exporter) cannot import it, so the one reading of the pointers lives here.

    policy_checkpoint(run_dir)    the checkpoint a run's policy is: `best` (the held-out choice), else `latest`
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = ["CHECKPOINTS", "pointer", "policy_checkpoint"]

CHECKPOINTS = "checkpoints"


def pointer(run_dir: Path, which: Literal["latest", "best"]) -> str | None:
    """The checkpoint name checkpoints/latest (the newest complete one) or checkpoints/best (the held-out choice)
    holds, or None where there is no such file."""
    f = Path(run_dir) / CHECKPOINTS / which
    return f.read_text().strip() if f.is_file() else None


def policy_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint folder that stands for a run directory's policy when no checkpoint is named: the one
    checkpoints/best points at (the highest held-out score, ties to the newer), else checkpoints/latest (a run without
    held-out evaluation); None when the directory has neither (not a run directory, or no checkpoint yet)."""
    for which in ("best", "latest"):
        name = pointer(run_dir, which)  # type: ignore[arg-type]
        if name is not None and (Path(run_dir) / CHECKPOINTS / name).is_dir():
            return Path(run_dir) / CHECKPOINTS / name
    return None
