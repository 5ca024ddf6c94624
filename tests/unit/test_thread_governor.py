"""searcher/policy/threads.py ThreadGovernor: the llama.cpp policy's threads, chosen from the speed it gets. Times are
synthetic (seconds per token as measured on this machine: one thread 1/131 s a prompt token, two 1/222 s; a stalled
pair tens of times slower)."""

from __future__ import annotations

import pytest

from searcher.policy.threads import ThreadGovernor

ONE, TWO, STALLED = 1 / 131, 1 / 222, 40 / 222  # seconds per prompt token
W_TWO, W_STALLED = 1 / 38.5, 30 / 38.5  # seconds per written token


def _call(g: ThreadGovernor, prompt_tokens: int, per_token: dict[int, float], written: int = 0,
          per_written: dict[int, float] | None = None) -> list[int]:
    """One policy call as LlamaCppPolicy makes it: the prompt in the governor's chunks, then the written tokens; the
    thread count each piece ran on."""
    used = [g.begin()]
    left = prompt_tokens
    while left > 0:
        part = min(left, g.chunk())
        n = used[-1]
        used.append(g.prompt(part, part * per_token[n]))
        left -= part
    for _ in range(written):
        used.append(g.written((per_written or {})[used[-1]]))
    return used


def test_a_quiet_machine_runs_two_threads_after_a_one_thread_reference_chunk() -> None:
    g = ThreadGovernor(most=2)
    assert g.begin() == 1 and g.chunk() == 32  # the reference: the first chunk on one thread
    used = _call(g, 800, {1: ONE, 2: TWO}, written=40, per_written={1: 1 / 22.8, 2: W_TWO})
    assert used[0] == 1 and set(used[1:]) == {2}
    assert g.chunk() == 256  # the try proved itself: big chunks again
    for _ in range(10):
        assert set(_call(g, 300, {1: ONE, 2: TWO}, written=40, per_written={1: 1 / 22.8, 2: W_TWO})) == {2}
    assert g.drops == 0


def test_a_stall_drops_to_one_thread_after_one_chunk_and_the_next_try_waits_longer_while_it_lasts() -> None:
    g = ThreadGovernor(most=2, retry=2)
    _call(g, 800, {1: ONE, 2: TWO})
    busy = {1: ONE, 2: STALLED}  # another process took a core: the pair stalls, one thread does not
    used = _call(g, 800, busy)
    assert used[:2] == [2, 1] and set(used[2:]) == {1}, "one stalled chunk, then one thread"
    assert g.drops == 1
    tries = []
    for call in range(20):
        used = _call(g, 400, busy)
        if used[0] == 2:
            tries.append(call)
            assert used[1] == 1 and g.chunk() == 256  # a try costs one small chunk (32 tokens), then one thread
    # the waits between tries double while the stall lasts: 2 -> 4 -> 8 calls on one thread
    assert tries == [2, 7, 16], tries
    calm = [_call(g, 400, {1: ONE, 2: TWO}) for _ in range(20)]  # the other job ended
    assert calm[-1] == [2, 2, 2], "two threads again once a try runs at full speed"


def test_two_threads_no_faster_than_one_drop_even_without_a_fast_reference() -> None:
    """A run that starts next to another job never saw the pair at full speed: slower than the one-thread reference
    is enough."""
    g = ThreadGovernor(most=2)
    used = _call(g, 400, {1: ONE, 2: ONE * 1.5})
    assert used[:3] == [1, 2, 1] and g.drops == 1


def test_one_slow_written_token_does_not_drop_a_thread_but_a_run_of_them_does() -> None:
    g = ThreadGovernor(most=2, window=4)
    _call(g, 400, {1: ONE, 2: TWO}, written=8, per_written={2: W_TWO})
    g.begin()
    assert g.written(W_STALLED) == 2  # a page fault, a collection
    assert [g.written(W_TWO) for _ in range(6)] == [2] * 6
    assert [g.written(W_STALLED) for _ in range(4)][-1] == 1  # the median of the last 4 is stalled


def test_one_core_never_changes_threads() -> None:
    g = ThreadGovernor(most=1)
    assert set(_call(g, 800, {1: ONE}, written=10, per_written={1: W_STALLED})) == {1}
    assert g.drops == 0 and g.chunk() == 256
    with pytest.raises(ValueError, match="most"):
        ThreadGovernor(most=0)
