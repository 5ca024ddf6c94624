"""The generator layer's typed build layer: a frozen generator and a judge, each from its own config section.

The section's `cache_path` is used as given: resolve it against the config file's folder before (`S3Config` does).
"""

from __future__ import annotations

from generator_adapters.config import GeneratorConfig, JudgeConfig
from generator_adapters.generator import Generator
from generator_adapters.judge import Judge


def _register_if_local(model: str, setting: str) -> None:
    """An offline `local/<name>` model: refused now when its data wheels are missing (naming the pip extra), so a run
    never starts and fails every row on it; else its litellm provider is registered (idempotent)."""
    if model.startswith("local/"):
        from s3runtime.llm_local import register_local_provider
        from s3runtime.local_models import require_installed

        require_installed(model.removeprefix("local/"), setting)
        register_local_provider()


def build_generator(cfg: GeneratorConfig) -> Generator:
    """The frozen generator G of `cfg` (any litellm model; `local/...` = offline, in process)."""
    _register_if_local(cfg.model, "generator.model")
    return Generator(cfg)


def build_judge(cfg: JudgeConfig) -> Judge:
    """The GenAcc judge of `cfg`."""
    _register_if_local(cfg.model, "judge.model")
    return Judge(cfg)
