"""searcher/policy/threads.py ThreadGovernor: the llama.cpp policy's threads, chosen from the speed it gets. Times are
synthetic, shaped as measured on this machine (one thread 1/131 s a prompt token, two 1/222 s, a token's cost growing
with its position; a stalled pair tens of times slower)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from searcher.policy.threads import ThreadGovernor

Speed = Callable[[int, int], float]  # (threads, position) -> seconds per prompt token


def quiet(threads: int, pos: int) -> float:
    return (1 / 131 if threads == 1 else 1 / 222) * (1 + pos / 2500)  # attention: a late token costs up to 2x


def busy(threads: int, pos: int) -> float:  # another process on one of the 2 cores: the pair stalls
    return quiet(1, pos) if threads == 1 else 40 * quiet(2, pos)


def _call(g: ThreadGovernor, prompt: tuple[int, int], speed: Speed, written: int = 0,
          written_s: Callable[[int], float] | None = None) -> list[int]:
    """One policy call as LlamaCppPolicy makes it: the new prompt tokens (from position prompt[0], prompt[1] of them)
    in the governor's chunks, then the written tokens; the thread count each piece ran on."""
    start, n = prompt
    used = [g.begin(n)]
    pos = start
    while pos < start + n:
        part = min(start + n - pos, g.chunk())
        used.append(g.prompt(part, part * speed(used[-1], pos)))
        pos += part
    for _ in range(written):
        used.append(g.written((written_s or (lambda t: 1 / 38.5 if t > 1 else 1 / 22.8))(used[-1])))
    return used


def _search(g: ThreadGovernor, speed: Speed) -> list[list[int]]:
    """A search's calls: the question and D0 after the cached instructions, then two turns of one window each."""
    return [_call(g, (900, 600), speed, 40), _call(g, (1540, 800), speed, 40), _call(g, (2380, 800), speed, 30)]


def test_a_quiet_machine_runs_two_threads_after_a_one_thread_reference_chunk_even_late_in_a_long_prompt() -> None:
    g = ThreadGovernor(most=2)
    first = _call(g, (0, 1500), quiet, written=40)
    assert first[:3] == [1, 2, 2] and set(first[2:]) == {2}  # the try: one chunk on one thread, then two
    assert g.chunk() == 256  # the try succeeded: big chunks
    for _ in range(5):  # tokens late in a 3,000-token prompt cost ~2x the early ones: not a stall
        assert all(set(c) == {2} for c in _search(g, quiet))
    assert g.drops == 0


def test_a_stall_drops_to_one_thread_after_one_chunk_and_the_next_try_waits_longer_while_it_lasts() -> None:
    g = ThreadGovernor(most=2, retry=2)
    _search(g, quiet)
    used = _call(g, (900, 800), busy)
    assert used[:2] == [2, 1] and set(used[2:]) == {1}, "one stalled chunk, then one thread"
    assert g.drops == 1
    tries = []
    for call in range(20):
        used = _call(g, (900, 400), busy)
        if 2 in used:
            tries.append(call)
            assert used[:4] == [1, 2, 1, 1], used  # a try: 32 tokens on one thread, 32 stalled on two, then one
    assert tries == [2, 7, 16], tries  # the waits double while the stall lasts: 2, 4, 8 calls on one thread
    later = [_call(g, (900, 400), quiet) for _ in range(40)]  # the other job ended
    assert later[-1] == [2, 2, 2], "two threads again once a try runs at full speed"


def test_a_run_that_starts_next_to_another_job_falls_back_at_its_first_try() -> None:
    g = ThreadGovernor(most=2)
    used = _call(g, (0, 1500), busy)
    assert used[:3] == [1, 2, 1] and g.drops == 1
    assert set(_call(g, (1500, 800), busy)) == {1}


def test_a_try_waits_for_a_prompt_with_room_for_both_chunks() -> None:
    """A call whose prompt is all cached but a few tokens cannot hold a try: it runs on one thread, and the try goes
    with the next call that has 64 new tokens or more (a try whose second chunk fell in the written tokens would
    write them on a pair that may stall)."""
    g = ThreadGovernor(most=2)
    assert _call(g, (0, 20), quiet, written=10) == [1] * 12
    assert _call(g, (20, 300), quiet)[:3] == [1, 2, 2]


def test_one_slow_written_token_does_not_drop_a_thread_but_a_run_of_them_does() -> None:
    g = ThreadGovernor(most=2, window=4)
    _call(g, (0, 400), quiet, written=8)
    g.begin(0)
    assert g.written(30 / 38.5) == 2  # a page fault, a collection
    assert [g.written(1 / 38.5) for _ in range(6)] == [2] * 6
    assert [g.written(30 / 38.5) for _ in range(4)][-1] == 1  # the median of the last 4 is stalled


def test_one_core_never_changes_threads() -> None:
    g = ThreadGovernor(most=1)
    assert set(_call(g, (0, 800), busy, written=10)) == {1}
    assert g.drops == 0 and g.chunk() == 256
    with pytest.raises(ValueError, match="most"):
        ThreadGovernor(most=0)
