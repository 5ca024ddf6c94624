"""The resident memory of a process and its children, sampled through a run (benchmarks/self_healing.py, issue 80):

    with RssSampler(pid, out=run_dir / "memory.jsonl", every_s=1.0, step_of=lambda: rows_in(metrics)) as s:
        proc.wait()
    s.peak_gb, s.peak_by_step     # the tree's largest total RSS, and per training step

Each line of `out` is {"t": seconds since the start, "rss_gb": the tree's total, "main_gb": the process's own,
"step": step_of() at that moment}. The tree is the process and every descendant alive at the sample (vLLM's engine
core runs in a child). Appends: a resumed run keeps the samples of its earlier launches (their "t" restarts at 0).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

__all__ = ["GB", "RssSampler", "tree_rss"]

GB = 1e9


def tree_rss(pid: int) -> tuple[int, int]:
    """(bytes resident in the process `pid` and all its descendants, bytes of `pid` alone); (0, 0) once it is gone."""
    import psutil

    try:
        root = psutil.Process(pid)
        own = root.memory_info().rss
        total = own
        for child in root.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                total += child.memory_info().rss
        return total, own
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0, 0


class RssSampler:
    """A daemon thread sampling `tree_rss(pid)` every `every_s` seconds into `out` (jsonl), until the context exits."""

    def __init__(self, pid: int, out: Path | None = None, every_s: float = 1.0,
                 step_of: Callable[[], int] | None = None) -> None:
        self.pid, self.out, self.every_s, self.step_of = pid, out, every_s, step_of
        self.peak_gb = 0.0
        self.peak_by_step: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"rss-{pid}")
        self._t0 = time.monotonic()

    def __enter__(self) -> RssSampler:
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample(self) -> dict[str, float | int] | None:
        """One sample (None once the process is gone), recorded in the peaks and `out`."""
        total, own = tree_rss(self.pid)
        if not total:
            return None
        step = self.step_of() if self.step_of is not None else 0
        row = {"t": round(time.monotonic() - self._t0, 1), "rss_gb": round(total / GB, 3), "main_gb": round(own / GB, 3),
               "step": step}
        self.peak_gb = max(self.peak_gb, total / GB)
        self.peak_by_step[step] = max(self.peak_by_step.get(step, 0.0), total / GB)
        if self.out is not None:
            with self.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
        return row

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every_s)
