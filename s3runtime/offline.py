"""The environment a process of this project runs offline in, set before litellm, transformers or Ray is imported:
litellm's bundled cost map (no download at import), the Hugging Face hub and transformers offline, tokenizers
without the fork warning; with `ray_loopback`, Ray's loopback rule (s3runtime/raycluster.py: every node 127.0.0.1;
Ray reads it when it is imported).

    use_offline_env(ray_loopback=True)                      # a script's first lines, before the heavy imports
    env = {**os.environ, **offline_env(ray_loopback=True)}  # a child process's environment

Nothing here imports anything.
"""

from __future__ import annotations

import os

__all__ = ["OFFLINE_ENV", "RAY_LOOPBACK_ENV", "offline_env", "use_offline_env"]

OFFLINE_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
RAY_LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def offline_env(ray_loopback: bool = False) -> dict[str, str]:
    """The variables of the offline environment (and of Ray's loopback rule)."""
    return {**OFFLINE_ENV, **(RAY_LOOPBACK_ENV if ray_loopback else {})}


def use_offline_env(ray_loopback: bool = False) -> None:
    """Set the offline variables in this process where they are not set; Ray's loopback rule always."""
    for k, v in OFFLINE_ENV.items():
        os.environ.setdefault(k, v)
    if ray_loopback:
        os.environ.update(RAY_LOOPBACK_ENV)
