"""Where a model runs: one rule for the learner, the reference policy, the critic and a served policy.

    resolve_device("auto")   # "cuda" when torch sees a GPU, else "cpu"

torch is imported only when asked, so importing this module costs nothing.
"""

from __future__ import annotations

import os

from s3core.errors import ConfigError

__all__ = ["auto_cpu_threads", "cuda_available", "resolve_device", "steady_malloc"]

MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value, held fixed


def auto_cpu_threads(limit: int = 2) -> int:
    """Intra-op CPU threads for a model (llama.cpp, torch): `limit` capped by the CPU count, or 1 when the machine is
    already saturated (1-minute load above the CPU count). Threads that meet at a barrier after every layer stall each
    other when one of them is descheduled: on this 2-core machine llama.cpp with 2 threads ran ~100x slower than with
    1 next to another job, and torch rollouts stalled the same way."""
    cpus = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0] > cpus
    except OSError:
        busy = False
    return 1 if busy else max(1, min(limit, cpus))


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU. Without an NVIDIA driver on the machine the answer is no without importing torch
    (~3-6 s of a cold `s3 search` on the llama.cpp runtime, which never needs torch)."""
    import sys

    linux = sys.platform.startswith("linux")  # the NVIDIA kernel module writes this file (in containers too)
    if linux and "torch" not in sys.modules and not os.path.exists("/proc/driver/nvidia/version"):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def resolve_device(spec: str) -> str:
    """'auto' -> 'cuda' when available, else 'cpu'; 'cuda' (or 'cuda:N') without a GPU is one clear error."""
    spec = spec.strip().lower()
    if spec == "auto":
        return "cuda" if cuda_available() else "cpu"
    if spec == "cpu":
        return "cpu"
    if spec == "cuda" or spec.startswith("cuda:"):
        if not cuda_available():
            raise ConfigError(f"device={spec!r} but torch sees no CUDA GPU here; use 'auto' or 'cpu'")
        return spec
    raise ConfigError(f"unknown device {spec!r}: use 'auto', 'cpu' or 'cuda'")


def steady_malloc(threshold: int = MMAP_THRESHOLD) -> bool:
    """Hold glibc's mmap threshold fixed, so freed tensor buffers go back to the system; False off glibc.

    glibc raises the threshold each time a large mmapped block is freed (dynamic mmap threshold), and from then on
    serves blocks of that size from the heap, whose freed memory it keeps. A torch training loop that allocates and
    frees activations of many sizes then grows without bound: the selection probe's training on this CPU climbed
    ~0.7 GB every 6 s and was killed at 24.3 GB, full fine-tuning and LoRA alike; with the threshold fixed the LoRA run
    held 1.4-11.8 GB over its 37 minutes, without climbing (docs/transfer.md). The same as running under
    MALLOC_MMAP_THRESHOLD_=131072, set from inside the process; call it before the model loads. A no-op off glibc
    (macOS, musl, Windows)."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_mmap_threshold = -3  # malloc.h: M_MMAP_THRESHOLD
    return bool(mallopt(ctypes.c_int(m_mmap_threshold), ctypes.c_int(threshold)))
