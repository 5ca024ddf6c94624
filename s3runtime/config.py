"""Config section of the shared runtime: [ray], the Ray cluster that training and evaluation both run on."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from s3core.configbase import Section

__all__ = ["RayConfig"]


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
        "rows split over them, gradients all-reduced, the same loss and step as one learner (training/learn/learner_group.py). "
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
