"""Where a model runs: one rule for the learner, the reference policy, the critic and a served policy.

    resolve_device("auto")   # "cuda" when torch sees a GPU, else "cpu"

torch is imported only when asked, so importing this module costs nothing.
"""

from __future__ import annotations

from s3core.errors import ConfigError

__all__ = ["cuda_available", "resolve_device"]


def cuda_available() -> bool:
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
