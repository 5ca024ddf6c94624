"""s3core/devices.py: the CUDA check costs nothing where there can be no CUDA (no NVIDIA driver on a Linux machine),
so the llama.cpp searcher's cold start never imports torch."""

from __future__ import annotations

import builtins
import os
import sys

import pytest

from s3core import devices


def test_no_nvidia_driver_means_no_cuda_without_importing_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the driver file is Linux's")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    real_exists, real_import = os.path.exists, builtins.__import__
    monkeypatch.setattr(devices.os.path, "exists",
                        lambda p: False if p == "/proc/driver/nvidia/version" else real_exists(p))

    def no_torch(name: str, *a: object, **k: object) -> object:
        if name.split(".")[0] == "torch":
            raise AssertionError("torch imported")
        return real_import(name, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_torch)
    assert devices.cuda_available() is False
    assert devices.resolve_device("auto") == "cpu"


def test_the_cold_llamacpp_searcher_path_does_not_import_torch() -> None:
    """A fresh interpreter building the default searcher's policy loader path imports no torch (on this CPU
    machine; with a driver present torch is asked, as before)."""
    import subprocess

    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("a GPU machine asks torch")
    code = ("import sys; from s3core.devices import resolve_device; "
            "from searcher.policy import load_policy; from searcher.policy.llamacpp_policy import LlamaCppPolicy; "
            "assert resolve_device('auto') == 'cpu'; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


_REUSED_BLOCK = """
import ctypes, sys
from s3core.devices import steady_malloc
if sys.argv[1] == "steady":
    assert steady_malloc()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = Info
libc.free(libc.malloc(4 << 20))  # a 4 MiB block freed: glibc's dynamic threshold rises to 4 MiB
block = libc.malloc(4 << 20)
print("mmapped" if libc.mallinfo2().hblkhd >= 4 << 20 else "heap")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_steady_malloc_keeps_big_blocks_mmapped_after_one_is_freed() -> None:
    """The growth steady_malloc stops: by default glibc serves the second 4 MiB block from the heap (which it keeps
    after free); with the threshold held, the block is mmapped again and goes back to the system when freed. In a
    child process, so this one keeps its allocator as it was."""
    import ctypes
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2"):
        pytest.skip("glibc before 2.33 has no mallinfo2")
    seen = {how: subprocess.run([sys.executable, "-c", _REUSED_BLOCK, how], capture_output=True, text=True,
                                check=True, cwd=root).stdout.strip() for how in ("dynamic", "steady")}
    assert seen == {"dynamic": "heap", "steady": "mmapped"}
