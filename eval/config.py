"""Config section owned by the evaluation layer: [eval]."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol, overload

from pydantic import Field

from generator_adapters.config import GeneratorConfig, JudgeConfig
from s3core.configbase import Section
from s3runtime.config import RayConfig
from searcher.config import RetrieverConfig, SearcherConfig


class EvalConfig(Section):
    metric: Literal["genacc", "span", "em", "judge"] = Field(
        "genacc", description="Accuracy used for GenAcc-style scores and GBR (judge = judge-only, for MIRAGE)."
    )
    use_judge: bool = Field(True, description="GenAcc calls the judge when the span check fails.")
    bootstrap_samples: int = Field(1000, ge=100, description="Bootstrap resamples for 95% intervals.")
    seed: int = Field(0, description="Seed of the bootstrap.")
    out_dir: str = Field("runs/eval", description="Default parent of run directories.")
    backend: Literal["local", "ray"] = Field(
        "local",
        description="'ray' runs the question batches of `s3 eval` as tasks on Ray workers ([ray]; same as `s3 eval "
        "--ray`): each worker builds the run's pieces from this configuration; rows, resume and summary are the "
        "local run's. For `s3 leaderboard --grid` (same as its --ray) each grid cell is one Ray task.",
    )
    max_failed_fraction: float = Field(
        0.1, ge=0, le=1,
        description="`s3 eval` exits non-zero (1, with a one-line summary) when nothing was scored or more than this "
        "fraction of the rows failed; re-running the same command resumes and retries the failed rows.",
    )
    budget_usd: float | None = Field(
        None, ge=0,
        description="Cap in dollars on what one `s3 eval` run (all its invocations) spends on paid generator and judge "
        "calls (same as --max-cost-usd). Before each batch the most its calls can cost (prompts measured, completions "
        "at max_tokens) is checked; the run stops with its rows written, exit status 3 and 'budget reached', and the "
        "same command with a higher cap resumes it. A model of unknown price is refused (set its "
        "input_cost_per_mtok / output_cost_per_mtok). None = no cap.",
    )


class EvalSettings(Protocol):
    """What evaluation reads of the one configuration (`s3.config.S3Config` is one): typed sections, not `Any`."""

    @property
    def retriever(self) -> RetrieverConfig: ...
    @property
    def searcher(self) -> SearcherConfig: ...
    @property
    def eval(self) -> EvalConfig: ...
    @property
    def ray(self) -> RayConfig: ...
    @property
    def generator_resolved(self) -> GeneratorConfig:
        """[generator] with its cache_path resolved against the config file's folder."""
        ...
    @property
    def judge_resolved(self) -> JudgeConfig:
        """[judge] with its cache_path resolved against the config file's folder."""
        ...
    @overload
    def resolve(self, path: str | Path) -> Path: ...
    @overload
    def resolve(self, path: None) -> None: ...
    def resolve(self, path: str | Path | None) -> Path | None:
        """A path from the config, resolved against the config file's folder."""
        ...
