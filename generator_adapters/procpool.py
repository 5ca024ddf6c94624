"""Client worker processes for `LLMClient` when `processes > 1`.

One Python process spends a few milliseconds of CPU in litellm (and the OpenAI SDK beneath it) per call; at high
concurrency against a fast server that CPU, serialised on one event loop, becomes the limit (about 100-120 calls/s
here). With `processes = P` the client splits each batch of calls round-robin into P shards and runs each in a worker
process that keeps its own `LLMClient` (same model, cache file, timeout and retries; concurrency / P calls in flight)
and its own event loop between batches, so connections stay warm. The workers report their answers, the counts of
what they did and their cache hits and misses; the parent adds those to its own accounting, so `stats()` reads the
same whether or not processes were used.

Each worker runs `generator_adapters.client.run_shard` (the client it keeps is an `LLMClient`; this module knows
only the pool and the workers' settings). Workers are started with "spawn" (never fork: the parent may run threads,
litellm's included) on the first pooled batch and stop with `LLMClient.close()`. A worker that dies turns its shard's
calls into *missing* answers.
"""

from __future__ import annotations

import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from generator_adapters.config import LLMCallConfig

__all__ = ["make_pool", "worker_config"]


def worker_config(cfg: LLMCallConfig) -> str:
    """The JSON of the LLMCallConfig a worker runs: the parent's call settings, one process, its share of concurrency."""
    data = cfg.model_dump(include=set(LLMCallConfig.model_fields))
    data["concurrency"] = max(1, math.ceil(cfg.concurrency / cfg.processes))
    data["processes"] = 1
    return LLMCallConfig.model_validate(data).model_dump_json()


def make_pool(processes: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn"))
