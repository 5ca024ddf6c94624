"""Keep GPU frameworks we do not use out of our processes.

bm25s imports JAX when it is installed and calls `jax.lax.top_k` at import (bm25s/selection.py); JAX then
preallocates 75% of every visible GPU (seen on an H200: ~108 GB held by each s3 process while torch had allocated
622 MiB), starving the trainer's own vLLM engine and learner. We never use JAX, so:

    bm25s = import_bm25s()          # bm25s with its numpy top-k: `import jax` fails while bm25s imports
    keep_jax_off_gpus()             # s3's entry point: any JAX a dependency still imports stays on the CPU

A process that already imported JAX itself (a user's JAX program calling our library) keeps its own choice: nothing
is hidden from it and its environment is left as it is.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

__all__ = ["JAX_ENV", "import_bm25s", "keep_jax_off_gpus", "without_jax"]

# JAX on the CPU only, and no preallocation should it ever reach a GPU
JAX_ENV = {"JAX_PLATFORMS": "cpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


@contextlib.contextmanager
def without_jax() -> Iterator[None]:
    """Inside the block `import jax` raises ImportError (the module slot holds None), unless JAX is already loaded."""
    if "jax" in sys.modules:
        yield
        return
    sys.modules["jax"] = None  # type: ignore[assignment]  # Python's documented way to make an import fail
    try:
        yield
    finally:
        if "jax" in sys.modules and sys.modules["jax"] is None:
            del sys.modules["jax"]


def import_bm25s() -> ModuleType:
    """bm25s, imported (once) with JAX hidden: its selection falls back to numpy's top-k, no GPU is touched."""
    loaded = sys.modules.get("bm25s")
    if loaded is not None:
        return loaded
    with without_jax():
        import bm25s
    return bm25s


def keep_jax_off_gpus() -> None:
    """Set JAX_ENV's defaults in this process (and so in its children: Ray workers, vLLM engine cores), unless the
    user set them or JAX is already loaded."""
    if "jax" in sys.modules:
        return
    for key, value in JAX_ENV.items():
        os.environ.setdefault(key, value)
