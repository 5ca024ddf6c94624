"""The generator layer's typed build layer: a frozen generator and a judge, each from its own config section.

The section's `cache_path` is used as given: resolve it against the config file's folder before (`S3Config` does).
"""

from __future__ import annotations

from generator_adapters.config import GeneratorConfig, JudgeConfig
from generator_adapters.generator import Generator
from generator_adapters.judge import Judge


def _register_if_local(model: str) -> None:
    if model.startswith("local/"):
        from s3runtime.llm_local import register_local_provider

        register_local_provider()  # idempotent: offline `local/<name>` models reachable through litellm


def build_generator(cfg: GeneratorConfig) -> Generator:
    """The frozen generator G of `cfg` (any litellm model; `local/...` = offline, in process)."""
    _register_if_local(cfg.model)
    return Generator(cfg)


def build_judge(cfg: JudgeConfig) -> Judge:
    """The GenAcc judge of `cfg`."""
    _register_if_local(cfg.model)
    return Judge(cfg)
