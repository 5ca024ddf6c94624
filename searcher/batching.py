"""A generic asyncio micro-batcher: concurrent callers submit single items, one batch function answers many.

    batcher = MicroBatcher(lambda items: [f(x) for x in items], window_ms=5, max_batch=256)
    result = await batcher.submit(item)            # one item
    results = await batcher.submit_many(items)     # several items, kept together where they fit

Items arriving within `window_ms` of the first waiting item (up to `max_batch`) are answered by one call of
`batch_fn(items) -> results` (same length, same order), run in a single worker thread so the event loop stays
free and the backend is never called concurrently. While one batch runs, new items queue for the next.
An exception from `batch_fn` is raised to every caller of that batch. Used by the /retrieve server and the
/search service.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    def __init__(
        self,
        batch_fn: Callable[[list[T]], Sequence[R]],
        window_ms: float = 5.0,
        max_batch: int = 256,
        name: str = "batcher",
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if window_ms < 0:
            raise ValueError("window_ms must be >= 0")
        self.batch_fn = batch_fn
        self.window_s = window_ms / 1000.0
        self.max_batch = max_batch
        self.name = name
        self._queue: asyncio.Queue[tuple[T, asyncio.Future[R]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.batches = 0  # statistics: batches run and items answered
        self.items = 0

    def _start(self) -> asyncio.Queue[tuple[T, asyncio.Future[R]]]:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:
            self._loop = loop
            self._queue = asyncio.Queue()
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
            self._worker = loop.create_task(self._run(), name=f"{self.name}-worker")
        return self._queue

    async def submit(self, item: T) -> R:
        queue = self._start()
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        queue.put_nowait((item, fut))
        return await fut

    async def submit_many(self, items: Sequence[T]) -> list[R]:
        queue = self._start()
        loop = asyncio.get_running_loop()
        futs: list[asyncio.Future[R]] = []
        for it in items:
            fut: asyncio.Future[R] = loop.create_future()
            queue.put_nowait((it, fut))
            futs.append(fut)
        return list(await asyncio.gather(*futs))

    async def _run(self) -> None:
        assert self._queue is not None
        queue = self._queue
        loop = asyncio.get_running_loop()
        while True:
            first = await queue.get()
            batch = [first]
            deadline = time.monotonic() + self.window_s
            while len(batch) < self.max_batch:
                # take whatever is already queued without waiting
                while len(batch) < self.max_batch and not queue.empty():
                    batch.append(queue.get_nowait())
                remaining = deadline - time.monotonic()
                if len(batch) >= self.max_batch or remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(queue.get(), remaining))
                except TimeoutError:
                    break
            live = [(it, f) for it, f in batch if not f.done()]  # callers that gave up are skipped
            if not live:
                continue
            items = [it for it, _ in live]
            try:
                results = await loop.run_in_executor(self._executor, self.batch_fn, items)
                if len(results) != len(items):
                    raise RuntimeError(f"{self.name}: batch function returned {len(results)} results for {len(items)} items")
            except Exception as e:
                for _, f in live:
                    if not f.done():
                        f.set_exception(e)
                continue
            self.batches += 1
            self.items += len(items)
            for (_, f), r in zip(live, results, strict=True):
                if not f.done():
                    f.set_result(r)

    async def aclose(self) -> None:
        """Stop the worker; pending callers get a RuntimeError."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        if self._queue is not None:
            while not self._queue.empty():
                _, f = self._queue.get_nowait()
                if not f.done():
                    f.set_exception(RuntimeError(f"{self.name} closed"))
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        self._queue = self._worker = self._executor = self._loop = None
