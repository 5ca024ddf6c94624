"""/retrieve's batching: a request that brings its own batch runs at once; small requests still gather."""

from __future__ import annotations

import asyncio

from searcher.batching import MicroBatcher


def test_a_full_batch_does_not_wait_out_the_window() -> None:
    calls: list[int] = []

    def fn(items: list[int]) -> list[int]:
        calls.append(len(items))
        return [i + 1 for i in items]

    async def main() -> list[int]:
        # a one-hour window: without full_at this would hang until the test runner's timeout
        b: MicroBatcher[int, int] = MicroBatcher(fn, window_ms=3_600_000, max_batch=256, full_at=16)
        try:
            return await asyncio.wait_for(b.submit_many(list(range(32))), timeout=60)
        finally:
            await b.aclose()

    assert asyncio.run(main()) == list(range(1, 33))
    assert calls == [32]


def test_small_requests_still_gather_within_the_window() -> None:
    calls: list[int] = []

    def fn(items: list[int]) -> list[int]:
        calls.append(len(items))
        return items

    async def main() -> list[int]:
        b: MicroBatcher[int, int] = MicroBatcher(fn, window_ms=200, max_batch=256, full_at=16)
        try:
            return list(await asyncio.gather(*(b.submit(i) for i in range(5))))
        finally:
            await b.aclose()

    assert asyncio.run(main()) == list(range(5))
    assert calls == [5]
