"""How many threads the llama.cpp policy runs, chosen call by call from the speed it gets (issue 61).

    gov = ThreadGovernor(most=2)
    n = gov.begin(new_prompt_tokens)     # threads for this call's first tokens
    n = gov.prompt(tokens, seconds)      # after each prompt chunk (gov.chunk() tokens): the threads for the next one
    n = gov.written(seconds)             # after each written token: the same

Why: llama.cpp's threads meet at a barrier after every layer. On a quiet 2-core machine two threads evaluate the
shipped policy 1.7x faster than one (f16: 222 vs 131 prompt tokens/s, 38.5 vs 22.8 written tokens/s, measured
2026-12-03); next to any other process on the cores the barrier waits for a descheduled thread, and two threads ran
tens of times slower than one (a search that took ~10 s on one thread did not finish in 7 minutes on two). The load
average cannot tell these apart in advance: it lags, and the other job may start after the model loaded. So the
governor measures:

- **a try** (the first call, and again `retry` calls after a fall-back, `retry` doubling while tries fail, up to
  `max_retry`): one small prompt chunk on one thread, the next on the most threads, at almost the same position
  (a token's cost grows with its position: attention over a long prompt costs as much as the weights). The most
  threads stay when they were at least `gain` faster;
- **a stall**, at the most threads: a prompt chunk `stall` times slower per token than the chunk before it, or the
  median of the last `window` written tokens `stall` times slower than the fastest such median since the try. Then
  one thread for the rest, until the next try.

A stalled try costs two small chunks (`probe_chunk` tokens each), seconds at worst, not minutes.
"""

from __future__ import annotations

import statistics
from collections import deque


class ThreadGovernor:
    """The thread count of one llama.cpp context, call by call (module docstring)."""

    def __init__(self, most: int, stall: float = 2.5, gain: float = 1.15, retry: int = 4, max_retry: int = 64,
                 window: int = 4, chunk: int = 256, probe_chunk: int = 32) -> None:
        if most < 1:
            raise ValueError(f"most must be >= 1 thread, got {most}")
        self.most, self.stall, self.gain, self.window = most, stall, gain, window
        self.retry, self.max_retry, self.chunk_size, self.probe_chunk = retry, max_retry, chunk, probe_chunk
        self.wait = retry  # calls on one thread before the next try
        self.calls_since_drop = 0
        self.try_due = most > 1  # a try starts with the next call whose prompt has room for its two chunks
        # a try: "one" = its one-thread chunk is next, "most" = its most-threads chunk is next, None = no try running
        self.trying: str | None = None
        self.threads = 1
        self.reference = 0.0  # the try's one-thread seconds per prompt token
        self.last_chunk: float | None = None  # seconds per token of the previous prompt chunk at the most threads
        self.best_written: float | None = None  # fastest written-token median at the most threads since the try
        self.recent: deque[float] = deque(maxlen=window)  # this call's last written tokens' seconds
        self.drops = 0  # fall-backs to one thread (a failed try included), for the benchmark

    def chunk(self) -> int:
        """Prompt tokens to evaluate before the next look at the speed."""
        return self.probe_chunk if self.trying else self.chunk_size

    def begin(self, new_tokens: int) -> int:
        """The threads for a new call that evaluates `new_tokens` prompt tokens (those past the cached prefix)."""
        self.recent.clear()
        if not self.try_due and self.trying is None and self.threads == 1 and self.most > 1:
            self.calls_since_drop += 1
            self.try_due = self.calls_since_drop > self.wait
        if self.try_due and new_tokens >= 2 * self.probe_chunk:  # both chunks of the try inside this call's prompt
            self.try_due, self.trying = False, "one"
        return self.threads

    def _drop(self, failed_try: bool) -> int:
        self.wait = min(self.max_retry, self.wait * 2) if failed_try else self.retry
        self.threads, self.trying, self.calls_since_drop = 1, None, 0
        self.last_chunk = self.best_written = None
        self.recent.clear()
        self.drops += 1
        return self.threads

    def prompt(self, tokens: int, seconds: float) -> int:
        """A prompt chunk of `tokens` took `seconds`: the threads for what follows."""
        if tokens <= 0:
            return self.threads
        per = seconds / tokens
        if self.trying == "one":  # the reference, then the same amount on the most threads
            self.reference, self.trying, self.threads = per, "most", self.most
            return self.threads
        if self.trying == "most":
            if per * self.gain > self.reference:
                return self._drop(failed_try=True)
            self.trying, self.wait, self.last_chunk, self.best_written = None, self.retry, per, None
            return self.threads
        if self.threads > 1:
            if self.last_chunk is not None and per > self.stall * self.last_chunk:
                return self._drop(failed_try=False)
            self.last_chunk = per
        return self.threads

    def written(self, seconds: float) -> int:
        """A written token took `seconds`: the threads for what follows (judged on the median of the last `window`,
        so one slow token, a page fault or a collection, does not drop a thread)."""
        if self.threads == 1 or self.trying:
            return self.threads
        self.recent.append(seconds)
        if len(self.recent) < self.window:
            return self.threads
        med = statistics.median(self.recent)
        if self.best_written is not None and med > self.stall * self.best_written:
            return self._drop(failed_try=False)
        self.best_written = med if self.best_written is None else min(self.best_written, med)
        return self.threads
