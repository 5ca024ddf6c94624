"""How many threads the llama.cpp policy runs, chosen call by call from the speed it gets (issue 61).

    gov = ThreadGovernor(most=2)
    n = gov.begin()                      # threads for this call's first tokens
    n = gov.prompt(tokens, seconds)      # after each prompt chunk: the threads for the next one
    n = gov.written(seconds)             # after each written token: the same

Why: llama.cpp's threads meet at a barrier after every layer. On a quiet 2-core machine two threads evaluate the
shipped policy 1.7x faster than one (f16: 222 vs 131 prompt tokens/s, 38.5 vs 22.8 written tokens/s, measured
2026-12-03); next to any other process on the cores the barrier waits for a descheduled thread, and two threads ran
tens of times slower than one (a search that took ~10 s on one thread did not finish in 7 minutes on two). The load
average cannot tell these apart in advance: it lags, and the other job may start after the model loaded. So the
governor runs the most threads while they keep their speed, drops to one as soon as they do not (a prompt chunk, or
the median of the last few written tokens, slower than `stall` times the fastest seen at that thread count: one
thread is never stalled, and `stall` = 2 is about where two threads stop being worth it), and tries the most again
after `retry` calls, `retry` doubling each time the try fails (up to `max_retry`): the other job may have ended.
While it probes, the prompt goes in small chunks (`probe_chunk` tokens), so a stalled try costs seconds, not minutes.
"""

from __future__ import annotations

import statistics
from collections import deque


class ThreadGovernor:
    """The thread count of one llama.cpp context, call by call (module docstring). The first prompt chunk runs on one
    thread (`probe_chunk` tokens): the speed any later count must beat."""

    def __init__(self, most: int, stall: float = 2.0, retry: int = 4, max_retry: int = 64, window: int = 4,
                 chunk: int = 256, probe_chunk: int = 32) -> None:
        if most < 1:
            raise ValueError(f"most must be >= 1 thread, got {most}")
        self.most, self.stall, self.window = most, stall, window
        self.retry, self.max_retry, self.chunk_size, self.probe_chunk = retry, max_retry, chunk, probe_chunk
        self.threads = 1  # calibration: the first chunk on one thread
        self.calibrated = most == 1
        self.wait = retry  # calls on one thread before the next try of `most`
        self.calls_since_drop = 0
        self.probing = False  # a try of `most`: small chunks until a chunk at full speed proves it
        self.fastest: dict[tuple[str, int], float] = {}  # (kind, threads) -> fastest seconds per token seen
        self.recent: deque[float] = deque(maxlen=window)  # this call's last written tokens' seconds
        self.drops = 0  # how often it fell back to one thread (the benchmark reports it)

    def chunk(self) -> int:
        """Prompt tokens to evaluate before the next look at the speed."""
        return self.probe_chunk if self.probing or not self.calibrated else self.chunk_size

    def begin(self) -> int:
        """The threads for a new call."""
        self.recent.clear()
        if self.calibrated and self.threads == 1 and self.most > 1:
            self.calls_since_drop += 1
            if self.calls_since_drop > self.wait:
                self.threads, self.probing = self.most, True
        return self.threads

    def _slow(self, kind: str, per_token: float) -> bool:
        """At `most` threads: slower than `stall` x its own fastest, or no faster than one thread was."""
        best, one = self.fastest.get((kind, self.threads)), self.fastest.get((kind, 1))
        return (best is not None and per_token > self.stall * best) or (one is not None and per_token >= one)

    def _judge(self, kind: str, per_token: float) -> int:
        if self.threads > 1 and self._slow(kind, per_token):
            self.wait = min(self.max_retry, self.wait * 2) if self.probing else self.retry
            self.threads, self.probing, self.calls_since_drop = 1, False, 0
            self.drops += 1
            self.recent.clear()
            return self.threads
        key = (kind, self.threads)
        self.fastest[key] = min(per_token, self.fastest.get(key, per_token))
        return self.threads

    def prompt(self, tokens: int, seconds: float) -> int:
        """A prompt chunk of `tokens` took `seconds`: the threads for what follows."""
        if tokens <= 0:
            return self.threads
        if not self.calibrated:  # the one-thread reference; then the most threads, tried in small chunks
            self.fastest[("prompt", 1)] = seconds / tokens
            self.calibrated, self.threads, self.probing = True, self.most, True
            return self.threads
        was = self.threads
        n = self._judge("prompt", seconds / tokens)
        if was > 1 and n == was and tokens >= self.probe_chunk:
            self.probing, self.wait = False, self.retry  # a chunk at full speed: the try succeeded
        return n

    def written(self, seconds: float) -> int:
        """A written token took `seconds`: the threads for what follows (judged on the median of the last `window`,
        so one slow token, a page fault or a collection, does not drop a thread)."""
        self.recent.append(seconds)
        if len(self.recent) < self.window:
            return self.threads
        return self._judge("written", statistics.median(self.recent))
