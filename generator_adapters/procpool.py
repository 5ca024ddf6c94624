"""Client worker processes for `LLMClient` when `processes > 1`.

One Python process spends a few milliseconds of CPU in litellm (and the OpenAI SDK beneath it) per call; at high
concurrency against a fast server that CPU, serialised on one event loop, becomes the limit (about 100-120 calls/s
here). With `processes = P` the client splits each batch of calls round-robin into P shards and runs each in a worker
process that keeps its own `LLMClient` (same model, cache file, timeout and retries; concurrency / P calls in flight)
and its own event loop between batches, so connections stay warm. The workers report their answers, the counts of
what they did and their cache hits and misses; the parent adds those to its own accounting, so `stats()` reads the
same whether or not processes were used.

Workers are started with "spawn" (never fork: the parent may run threads, litellm's included) on the first pooled
batch and stop with `LLMClient.close()`. A worker that dies turns its shard's calls into *missing* answers.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

from generator_adapters.config import LLMCallConfig

if TYPE_CHECKING:
    from generator_adapters.client import LLMClient

__all__ = ["make_pool", "run_shard", "worker_config"]

_CLIENTS: dict[str, LLMClient] = {}
_LOOP: asyncio.AbstractEventLoop | None = None


def worker_config(cfg: LLMCallConfig) -> str:
    """The JSON of the LLMCallConfig a worker runs: the parent's call settings, one process, its share of concurrency."""
    data = cfg.model_dump(include=set(LLMCallConfig.model_fields))
    data["concurrency"] = max(1, math.ceil(cfg.concurrency / cfg.processes))
    data["processes"] = 1
    return LLMCallConfig.model_validate(data).model_dump_json()


def make_pool(processes: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn"))


def run_shard(cfg_json: str, batch: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """In a worker: answer one shard of calls; return the answers and the counts they added (picklable)."""
    global _LOOP
    from generator_adapters.client import LLMClient
    from generator_adapters.config import LLMCallConfig

    client = _CLIENTS.get(cfg_json)
    if client is None:
        client = _CLIENTS[cfg_json] = LLMClient(LLMCallConfig.model_validate_json(cfg_json))
    if _LOOP is None or _LOOP.is_closed():
        _LOOP = asyncio.new_event_loop()
    answers = _LOOP.run_until_complete(client.complete_many(batch))
    return {
        "answers": [a.model_dump() for a in answers],
        "counts": client.take_counts(),
        "cache": client.cache.take_counts() if client.cache is not None else {},
    }
