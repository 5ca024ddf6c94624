"""eval.backend = "ray" (`s3 eval --ray`): the question batches of an evaluation run as tasks on Ray actors.

    runner = RayBatchRunner(cfg, opts, config)        # ray.eval_workers actors, each builds the run's pieces
    summary = run_eval(opts, dataset, comp, config, runner=runner)

Each worker builds the run from the same configuration and options through the typed build layer
(eval/build.py `build_run`: dataset, context source, generator, judge) and must arrive at the same run identity as the
driver (run.json): a node with another index, dataset or model is refused before any question is asked. The driver
keeps what makes a run resumable: it alone appends rows to results.jsonl, a batch as soon as it comes back, under the
run's lock; finished rows are skipped on a re-run, failed ones retried, exactly as a local run. A lost worker's batch
is redone once Ray restarted it (s3runtime/raycluster.py). Rows equal a local run's row for row (same contexts, answers and
metrics; time stamps and latencies aside): tests/integration/test_ray_backend.py, benchmarks/ray_eval_equivalence.py.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from eval.config import EvalSettings
from eval.harness import EvalOptions, _run_batch
from generator_adapters.client import run_sync
from s3core.errors import S3Error
from s3core.types import QAExample
from s3runtime.raycluster import RayWorker, WorkerPool, connect

__all__ = ["EvalWorker", "RayBatchRunner"]


class EvalWorker(RayWorker):
    """A Ray actor holding one evaluation run's pieces (built once, used for every batch it is given)."""

    def __init__(self, cfg: EvalSettings, opts: EvalOptions) -> None:
        from eval.build import build_run

        self.dataset, self.comp, self.config = build_run(cfg, opts)

    def identity(self) -> str:
        return json.dumps(self.config, sort_keys=True, default=str)

    def run_batch(self, batch: list[QAExample], attempts: dict[str, int]) -> list[dict[str, Any]]:
        rows, _ = run_sync(_run_batch(self.comp, batch, attempts))  # no budget on Ray (harness refuses it)
        return rows

    def cache_stats(self) -> dict[str, int]:
        return dict(self.comp.cache_stats()) if self.comp.cache_stats else {}

    def close(self) -> None:
        if self.comp.close is not None:
            self.comp.close()


class RayBatchRunner:
    """Runs the harness's batches on a WorkerPool of EvalWorkers (the harness's `runner`)."""

    def __init__(self, cfg: EvalSettings, opts: EvalOptions, config: dict[str, Any]) -> None:
        rc = cfg.ray
        connect(rc)
        worker_opts = dataclasses.replace(opts, progress=False)
        self.pool = WorkerPool.start("eval", EvalWorker, [(cfg, worker_opts)] * rc.eval_workers, rc=rc,
                                     cpus=rc.eval_worker_cpus, resources=rc.eval_worker_resources)
        mine = json.dumps(config, sort_keys=True, default=str)
        for i, theirs in enumerate(self.pool.call_all("identity")):
            if theirs != mine:
                self.close()
                raise S3Error(f"eval worker {i} built another run than this driver (its dataset, index or models "
                              f"differ on its node): {theirs[:300]} vs {mine[:300]}")

    def run(self, batches: list[list[QAExample]], attempts: dict[str, int]) -> Iterator[list[dict[str, Any]]]:
        """The rows of each batch, as batches finish (any order)."""
        for _, rows in self.pool.imap("run_batch", [(b, attempts) for b in batches]):
            yield rows

    def cache_stats(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for stats in self.pool.call_all("cache_stats"):
            for k, v in stats.items():
                total[k] = total.get(k, 0) + int(v)
        return total

    def close(self) -> None:
        import contextlib

        with contextlib.suppress(Exception):
            self.pool.call_all("close")
        self.pool.close()
