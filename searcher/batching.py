"""A generic asyncio micro-batcher: concurrent callers submit single items, one batch function answers many.

    batcher = MicroBatcher(lambda items: [f(x) for x in items], window_ms=5, max_batch=256)
    result = await batcher.submit(item)            # one item
    results = await batcher.submit_many(items)     # several items, kept together where they fit

Items arriving within `window_ms` of the first waiting item (up to `max_batch`; with `full_at`, no waiting once the
queued items already number `full_at`: a request that brings its own batch runs at once) are answered by one call of
`batch_fn(items) -> results` (same length, same order), run in a worker thread so the event loop stays free. At most
`workers` batches run at once (1 = the backend is never called concurrently): while they run, new items queue for the
next batch, and with `workers > 1` one slow batch (a hung upstream) does not hold the batches behind it.
An exception from `batch_fn` is raised to every caller of that batch.

A caller that gives up (its `asyncio.wait_for` deadline passed) is skipped if its batch has not started; with
`cancel_aware=True` the batch function is called as `batch_fn(items, gone)`, where `gone[i]()` turns True once item i's
caller has gone, so a running batch can drop it and go on with the others. Used by the /retrieve server and the
/search service.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    def __init__(
        self,
        batch_fn: Callable[..., Sequence[R]],
        window_ms: float = 5.0,
        max_batch: int = 256,
        name: str = "batcher",
        *,
        workers: int = 1,
        cancel_aware: bool = False,
        full_at: int | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if window_ms < 0:
            raise ValueError("window_ms must be >= 0")
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.batch_fn = batch_fn
        self.window_s = window_ms / 1000.0
        self.max_batch = max_batch
        self.name = name
        self.workers = workers
        self.cancel_aware = cancel_aware
        self.full_at = full_at
        self._queue: asyncio.Queue[tuple[T, asyncio.Future[R]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: set[asyncio.Task[None]] = set()
        self.batches = 0  # statistics: batches run and items answered
        self.items = 0

    def _start(self) -> asyncio.Queue[tuple[T, asyncio.Future[R]]]:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:
            self._loop = loop
            self._queue = asyncio.Queue()
            self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=self.name)
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

    async def _collect(self, queue: asyncio.Queue[tuple[T, asyncio.Future[R]]]) -> list[tuple[T, asyncio.Future[R]]]:
        batch = [await queue.get()]
        deadline = time.monotonic() + self.window_s
        while len(batch) < self.max_batch:
            # take whatever is already queued without waiting
            while len(batch) < self.max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            remaining = deadline - time.monotonic()
            if len(batch) >= self.max_batch or remaining <= 0:
                break
            if self.full_at is not None and len(batch) >= self.full_at:
                break  # big enough to be worth a call now: waiting would only add latency
            try:
                batch.append(await asyncio.wait_for(queue.get(), remaining))
            except TimeoutError:
                break
        return batch

    async def _run(self) -> None:
        assert self._queue is not None
        queue = self._queue
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(self.workers)
        while True:
            await slots.acquire()
            try:
                batch = await self._collect(queue)
            except BaseException:
                slots.release()
                raise
            live = [(it, f) for it, f in batch if not f.done()]  # callers that gave up are skipped
            if not live:
                slots.release()
                continue
            task = loop.create_task(self._dispatch(live, slots))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _dispatch(self, live: list[tuple[T, asyncio.Future[R]]], slots: asyncio.Semaphore) -> None:
        loop = asyncio.get_running_loop()
        items = [it for it, _ in live]
        call: Callable[[], Sequence[R]]
        if self.cancel_aware:
            gone = [threading.Event() for _ in live]
            for (_, f), ev in zip(live, gone, strict=True):
                f.add_done_callback(lambda _f, ev=ev: ev.set())  # type: ignore[misc]
            call = functools.partial(self.batch_fn, items, [ev.is_set for ev in gone])
        else:
            call = functools.partial(self.batch_fn, items)
        try:
            results = await loop.run_in_executor(self._executor, call)
            if len(results) != len(items):
                raise RuntimeError(f"{self.name}: batch function returned {len(results)} results for {len(items)} items")
        except asyncio.CancelledError:  # aclose(): this batch's callers will not get an answer
            for _, f in live:
                if not f.done():
                    f.set_exception(RuntimeError(f"{self.name} closed"))
            raise
        except Exception as e:
            for _, f in live:
                if not f.done():
                    f.set_exception(e)
            return
        finally:
            slots.release()
        self.batches += 1
        self.items += len(items)
        for (_, f), r in zip(live, results, strict=True):
            if not f.done():
                f.set_result(r)

    async def aclose(self) -> None:
        """Stop the worker; pending callers get a RuntimeError (a batch already running finishes in its thread)."""
        tasks: list[asyncio.Task[Any]] = [t for t in (self._worker, *self._running) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self._queue is not None:
            while not self._queue.empty():
                _, f = self._queue.get_nowait()
                if not f.done():
                    f.set_exception(RuntimeError(f"{self.name} closed"))
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        self._queue = self._worker = self._executor = self._loop = None
        self._running = set()
