"""Keep the cyclic garbage collector off what a long-lived process loaded once.

A process that holds torch, transformers, litellm, a model and an index tracks ~0.5 M container objects; every full
(generation-2) collection re-scans all of them: ~0.5 s on this machine (476k objects), paid in the middle of whatever request or
rollout triggered it (and ~30 ms in the bare rollout benchmark, whose process holds only bm25s and the doc store).
`freeze_loaded_heap()`, called once a server or trainer has loaded what it keeps for its whole life, moves those
objects to the permanent generation (`gc.freeze`, made for exactly this), so later collections scan only what came
after. Objects are still freed by reference counting; only cyclic garbage among the frozen ones would stay, and a
process's startup state is not garbage. The CLI calls it in `s3 serve`, `s3 serve-retriever` and `s3 train`; library
code never does (a test process builds and drops many searchers).
"""

from __future__ import annotations

import gc

__all__ = ["freeze_loaded_heap"]


def freeze_loaded_heap() -> int:
    """Collect once, then freeze every object alive now; returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
