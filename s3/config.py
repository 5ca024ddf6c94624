"""The one configuration: `S3Config` maps one to one onto config.toml, one pydantic section per table.

    cfg = load_config("config.toml", ["searcher.max_turns=2", "generator.model=openai/gpt-4o-mini"])

Relative paths inside the file are resolved against the file's folder (`cfg.resolve(cfg.retriever.index)`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, model_validator

from eval.config import EvalConfig
from generator_adapters.config import GeneratorConfig, JudgeConfig
from searcher.config import RetrieverConfig, SearcherConfig, ServiceConfig
from s3core.configbase import Section, apply_overrides, build_model, load_toml
from training.config import TrainingConfig

DEFAULT_CONFIG_NAME = "config.toml"


class S3Config(Section):
    retriever: RetrieverConfig = Field(default_factory=RetrieverConfig)
    searcher: SearcherConfig = Field(default_factory=SearcherConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    service: ServiceConfig = Field(default_factory=ServiceConfig)

    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)

    @model_validator(mode="after")
    def _cross_checks(self) -> S3Config:
        s = self.searcher
        if s.max_select > s.effective_k:
            raise ValueError(
                f"searcher.max_select={s.max_select} exceeds the per-turn k={s.effective_k}: lower max_select or raise k"
            )
        return self

    @property
    def base_dir(self) -> Path:
        return self._base_dir

    def resolve(self, path: str | Path | None) -> Path | None:
        """Resolve a path from the config against the config file's folder (absolute paths pass through)."""
        if path is None:
            return None
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self._base_dir / p)

    @property
    def generator_resolved(self) -> GeneratorConfig:
        """[generator] with its cache_path resolved like every other path in the config (against the config file's
        folder), so that every command opens the same cache file."""
        g = self.generator
        return g.model_copy(update={"cache_path": str(self.resolve(g.cache_path))}) if g.cache_path else g

    @property
    def judge_resolved(self) -> JudgeConfig:
        """[judge] with its cache_path resolved against the config file's folder."""
        j = self.judge
        return j.model_copy(update={"cache_path": str(self.resolve(j.cache_path))}) if j.cache_path else j


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> S3Config:
    """Load config.toml (or `path`), apply `--set` overrides, validate strictly.

    With no path, ./config.toml is used when it exists, else the built-in defaults (which equal config.toml).
    """
    data: dict[str, Any] = {}
    base = Path.cwd()
    if path is None and Path(DEFAULT_CONFIG_NAME).is_file():
        path = DEFAULT_CONFIG_NAME
    if path is not None:
        data = load_toml(path)
        base = Path(path).resolve().parent
    apply_overrides(data, overrides or [])
    cfg = build_model(S3Config, data, where=f" in {path}" if path else "")
    cfg._base_dir = base
    return cfg
