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
