"""Config section owned by the evaluation layer: [eval]."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from searcher.configbase import Section


class EvalConfig(Section):
    metric: Literal["genacc", "span", "em", "judge"] = Field(
        "genacc", description="Accuracy used for GenAcc-style scores and GBR (judge = judge-only, for MIRAGE)."
    )
    use_judge: bool = Field(True, description="GenAcc calls the judge when the span check fails.")
    bootstrap_samples: int = Field(1000, ge=100, description="Bootstrap resamples for 95% intervals.")
    seed: int = Field(0, description="Seed of the bootstrap.")
    out_dir: str = Field("runs/eval", description="Default parent of run directories.")
