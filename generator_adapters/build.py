"""The generator layer's typed build layer: a frozen generator and a judge, each from its own config section.

The section's `cache_path` is used as given: resolve it against the config file's folder before (`S3Config` does).
"""

from __future__ import annotations

from generator_adapters.config import GeneratorConfig, JudgeConfig
from generator_adapters.generator import Generator
from generator_adapters.judge import Judge
from s3core.credentials import require_llm_key
from s3core.errors import ConfigError


def _register_if_local(model: str, setting: str) -> None:
    """An offline `local/<name>` model: refused now when its data wheels are missing (naming the pip extra), so a run
    never starts and fails every row on it; else its litellm provider is registered (idempotent)."""
    if model.startswith("local/"):
        from s3runtime.llm_local import register_local_provider
        from s3runtime.local_models import require_installed

        require_installed(model.removeprefix("local/"), setting)
        register_local_provider()


def check_provider(model: str, api_base: str | None, setting: str) -> None:
    """A model string litellm cannot route (no provider: a bare name such as `qwen2.5-coder-0.5b-instruct`) is refused
    before the first call, with the fix, instead of failing every row with BadRequestError. litellm decides which
    providers it knows (`get_llm_provider`); an offline model's bare name is pointed at its `local/` form."""
    if model.startswith("local/"):
        return  # ours: `_register_if_local` checked its data wheels
    import litellm

    quiet = litellm.suppress_debug_info
    litellm.suppress_debug_info = True  # litellm prints its provider list to stdout on a miss; the error below says it
    try:
        litellm.get_llm_provider(model=model, api_base=api_base)
    except litellm.BadRequestError:
        from s3runtime.local_models import MODELS

        hint = (f"the offline model is 'local/{model}'" if model.lower() in MODELS else
                "write it as 'provider/name' (e.g. 'openai/gpt-4o-mini', 'hosted_vllm/NAME' with an api_base), or "
                "'local/NAME' for an offline model (`s3 models list`)")
        raise ConfigError(f"{setting} = {model!r}: litellm knows no provider for this model name; {hint}") from None
    finally:
        litellm.suppress_debug_info = quiet


def check_key(cfg: GeneratorConfig | JudgeConfig, section: str) -> None:
    """A provider that needs a key (litellm's knowledge, s3core.credentials `require_llm_key`) must have api_key_env
    name one, else one error before the first call that names the variable to set, instead of every call failing on
    the placeholder key. (A variable api_key_env names that is unset is refused when the client reads it.)"""
    require_llm_key(cfg.model, cfg.api_key_env, cfg.api_base, setting=f"{section}.api_key_env")


def build_generator(cfg: GeneratorConfig) -> Generator:
    """The frozen generator G of `cfg` (any litellm model; `local/...` = offline, in process)."""
    _register_if_local(cfg.model, "generator.model")
    check_provider(cfg.model, cfg.api_base, "generator.model")
    check_key(cfg, "generator")
    return Generator(cfg)


def build_judge(cfg: JudgeConfig) -> Judge:
    """The GenAcc judge of `cfg`."""
    _register_if_local(cfg.model, "judge.model")
    check_provider(cfg.model, cfg.api_base, "judge.model")
    check_key(cfg, "judge")
    return Judge(cfg)
