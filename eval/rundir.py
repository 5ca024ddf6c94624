"""The run directory of `s3 eval` (RUN_DIR): its files, the results store, resume, the lock and the run's identity.

    run.json           the run's identity (dataset, method, retriever, k, corpus / prompt hashes, generator, judge);
                       a resume with a different identity is refused and the differing keys are named. Its paths
                       (dataset.dir, retriever.index, contexts.file) are relative to RUN_DIR, so a run that moves
                       with its data still finds it (older absolute ones: eval/analysis.py `resolve_recorded`)
    results.jsonl      one row per question, appended as batches finish (one write + fsync per batch); a resume
                       skips finished rows and retries failed ones, and the final view keeps the LATEST row per id.
                       A line torn by a kill is skipped, and cut before the next append
    summary.json       means over scored rows with bootstrap intervals, totals (eval/summary.py)
    contexts.jsonl     a live searcher's trajectories (turns, queries, selections, stops), one row per question in the
                       contexts.jsonl shape `s3 search --out` writes; `s3 eval --contexts` replays it
    invocations.jsonl  one line per invocation (rows run / skipped, generator cache hits and misses)
    .lock              held while a run appends: two evals on one RUN_DIR would interleave their rows

Reading and appending go through s3core.io (`latest_by_id`, `repair_tail`, `append_jsonl`), the one answer to "what
happens to a line torn by a kill" for every file the project appends to.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from s3core.errors import S3Error
from s3core.io import latest_by_id, write_json_atomic

RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"
INVOCATIONS_FILE = "invocations.jsonl"
TRAJECTORIES_FILE = "contexts.jsonl"

# Identity keys compared when resuming a RUN_DIR (dotted paths into run.json["config"]).
IDENTITY_KEYS = (
    "dataset.questions_sha256",
    "method",
    "retriever.backend",
    "retriever.k",
    "retriever.corpus_sha256",
    "contexts.sha256",
    "generator.model",
    "generator.api_base",
    "generator.prompt_sha256",
    "generator.temperature",
    "generator.max_tokens",
    "generator.gguf_sha256",
    "judge.model",
    "judge.mode",
)


class RunDirError(S3Error):
    """RUN_DIR cannot be used: locked by another run, or it holds a run with a different configuration."""


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """The final view of results.jsonl: the latest row per question id.

    A last line cut short by a kill (no final newline, or not parseable JSON at the end) is ignored; a broken line
    elsewhere is an error naming it.
    """
    return latest_by_id(path, what="result row")


def row_failed(row: dict[str, Any]) -> bool:
    """A row to retry and to leave out of the means: an error, or no GenAcc (a failed judge call)."""
    return row.get("error") is not None or row.get("metrics", {}).get("genacc") is None


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """An exclusive lock on RUN_DIR: two evals appending to one results.jsonl would interleave rows."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fh = (run_dir / ".lock").open("w")
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirError(f"{run_dir} is in use by another `s3 eval` (lock held on {run_dir / '.lock'})") from None
        yield
    finally:
        fh.close()


def _get(d: dict[str, Any], dotted: str) -> Any:
    node: Any = d
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def identity_diff(a: dict[str, Any], b: dict[str, Any], keys: Sequence[str] = IDENTITY_KEYS) -> list[str]:
    """Human-readable differences between two run configs on the given dotted keys."""
    return [f"{k}: {_get(a, k)!r} != {_get(b, k)!r}" for k in keys if _get(a, k) != _get(b, k)]


def check_run_identity(run_dir: Path, config: dict[str, Any]) -> None:
    """Write run.json for a new run, or refuse to resume a run whose identity differs."""
    path = run_dir / RUN_FILE
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            raise RunDirError(f"{path}: not valid JSON; remove the run dir or fix the file") from None
        diff = identity_diff(old.get("config", {}), config)
        if diff:
            raise RunDirError(
                f"{run_dir} holds a different run; refusing to mix results ({'; '.join(diff)}). Use a new --out."
            )
        return
    write_json_atomic(path, {"config": config, "created": time.time()})
