"""Config section owned by the evaluation layer: [eval]."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol, overload

from pydantic import Field, field_validator

from generator_adapters.config import GeneratorConfig, JudgeConfig
from s3core.configbase import Section
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


class RayConfig(Section):
    """[ray]: the Ray cluster that `training.backend = "ray"` and `eval.backend = "ray"` run on."""

    address: str | None = Field(
        None,
        description="None = start a local Ray cluster in this process, on 127.0.0.1 only; else a running cluster's "
        "address ('auto', 'HOST:6379' or 'ray://HOST:10001'; README, 'Ray').",
    )
    num_cpus: float | None = Field(2, gt=0, description="CPUs of the local cluster (address = none); None = all of them.")
    rollout_workers: int = Field(2, ge=1, description="Rollout actors (each holds a policy engine and a retriever).")
    rollout_worker_cpus: float = Field(
        0.5, gt=0, description="CPUs reserved per rollout actor (fractions allowed: 2 cores never deadlock); its torch "
        "threads = max(1, round(this))."
    )
    rollout_worker_gpus: float = Field(0.0, ge=0, description="GPUs per rollout actor (a vLLM engine on a GPU node).")
    reward_workers: int = Field(1, ge=1, description="Reward actors (each holds the frozen generator and the judge).")
    reward_worker_cpus: float = Field(0.25, gt=0, description="CPUs reserved per reward actor.")
    reward_concurrency: int | None = Field(
        None, ge=1,
        description="Generator calls in flight per reward actor (None = generator.concurrency); the step's total is "
        "reward_workers x this.",
    )
    learners: int = Field(
        1, ge=1,
        description="Learner processes of a training run. 1 = the learner is the trainer's own process; N > 1 = N Ray "
        "actors in one torch.distributed group (gloo on CPU, nccl on GPU) doing data-parallel updates: the update's "
        "rows split over them, gradients all-reduced, the same loss and step as one learner (training/learner_group.py). "
        "Needs training.backend = 'ray'.",
    )
    learner_cpus: float = Field(0.5, gt=0, description="CPUs reserved per learner actor (ray.learners > 1); its torch "
                                "threads = max(1, round(this)).")
    learner_gpus: float = Field(
        0.0, ge=0,
        description="GPUs per learner actor (ray.learners > 1): 1 on a GPU node (each learner on its own GPU, nccl); "
        "0 = CPU learners (gloo).",
    )
    eval_workers: int = Field(2, ge=1, description="Evaluation actors (eval.backend = 'ray' / `s3 eval --ray`).")
    eval_worker_cpus: float = Field(0.5, gt=0, description="CPUs reserved per evaluation actor.")
    rollout_worker_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources each rollout actor needs (e.g. {rollout_node = 1}; --set "
        "ray.rollout_worker_resources.rollout_node=1): the actors go only to "
        "nodes started with those resources (`ray start --resources`, `Cluster.add_node(resources=...)`), e.g. the "
        "second node of a cluster (scripts/ray_cluster.py).",
    )
    reward_worker_resources: dict[str, float] = Field(
        default_factory=dict, description="Custom Ray resources each reward actor needs (like rollout_worker_resources)."
    )
    eval_worker_resources: dict[str, float] = Field(
        default_factory=dict, description="Custom Ray resources each evaluation actor (and grid cell task) needs."
    )
    learner_resources: dict[str, float] = Field(
        default_factory=dict, description="Custom Ray resources each learner actor needs (ray.learners > 1)."
    )
    placement: Literal["pack", "spread", "none"] = Field(
        "pack",
        description="Placement group strategy of a job's actors: 'pack' on as few nodes as fit, 'spread' over nodes, "
        "'none' = no placement group (Ray's default scheduling).",
    )
    max_restarts: int = Field(
        3, ge=0,
        description="Restarts of a lost actor (Ray's max_restarts); its unfinished work is redone once it is back. "
        "A worker lost more often fails the step with an error.",
    )


    @field_validator("rollout_worker_resources", "reward_worker_resources", "eval_worker_resources", "learner_resources")
    @classmethod
    def _custom_resources(cls, v: dict[str, float]) -> dict[str, float]:
        for name, amount in v.items():
            if name in ("CPU", "GPU", "memory", "object_store_memory"):
                raise ValueError(f"{name!r} is not a custom resource: use the *_cpus / *_gpus settings")
            if amount <= 0:
                raise ValueError(f"custom resource {name!r} needs an amount > 0, got {amount}")
        return v


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
