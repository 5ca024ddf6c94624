"""Prepare a training run, then build its parts from the one configuration — the training twin of eval/build.py:

    prepared = prepare_run(cfg)          # the step's memory checked first (training/learn/memory.py), then the
                                         # preparation stage: the training set (prepared where it is not: the
                                         # index, the naive-RAG baseline's paid calls) and the warm-up's distillation
    parts = build_training(cfg, prepared)  # held-out split, retriever, learner(s), executor, oracle, resume point
    trainer = S3Trainer(parts)           # the loop: rollout -> reward -> update -> log -> checkpoint (training/run/trainer.py)

Every part comes from its own config section and is handed its inputs; no part holds the trainer:

    data        [training.data]       the prepared training set (prepare_run; training/prep/data.py)
    heldout     [training.heldout]    the last `questions` of the prepared set, kept out of training
    retriever   [retriever]           over the training corpus's index
    learner     [training.learner]    this process's Learner, or a LearnerGroup of ray.learners Ray actors
                [training.update]     (training/learn/learner.py, training/learn/learner_group.py)
    executor    [training.rollout]    where rollouts and rewards run (training/rollouts/executors.py, training/rollouts/ray_backend.py),
                [training.backend]    priced and capped by training.budget_usd (training/rollouts/budget.py)
    oracle      [training.sft]        the searcher loop driven by oracle replies, for the format warm-up, and the
                                      questions it learns from (all, or those whose oracle beats naive RAG:
                                      training/prep/distill.py, in prepare_run)

Building writes no data and makes no paid call: that is the preparation stage's, which `s3 train` runs first and
`s3 train --dry-run` never runs (it builds from the prepared set as it is). `s3 train`, `s3 train --dry-run`, the
benchmarks and the tests all build through `build_training`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from s3core.errors import S3Error
from s3core.types import QAExample
from searcher.build import AgentKind, build_retriever, build_searcher
from searcher.config import SearcherConfig
from searcher.policy.base import ChatTokenizerMixin
from training.config import TrainingConfig, TrainSettings
from training.prep.data import TrainingSet
from training.rollouts.executors import StepExecutor
from training.rundir import checkpoint_step, latest_checkpoint

if TYPE_CHECKING:
    from searcher.agent import S3Searcher
    from searcher.retrieval.base import Retriever
    from training.learn.api import PolicyLearner
    from training.learn.learner import Learner
    from training.learn.learner_group import LearnerGroup
    from training.learn.memory import StepMemory

__all__ = ["Prepared", "TrainingParts", "build_training", "loop_config", "new_learner", "prepare_run", "step_memory"]

Log = Callable[[str], None]


@dataclass
class TrainingParts:
    """What a training loop runs with (see the module docstring). `learner` is this process's Learner, or a
    LearnerGroup (ray.learners > 1) holding the model on Ray actors: the loop drives either through
    training/learn/api.py's `PolicyLearner`."""

    cfg: TrainSettings
    run_dir: Path
    device: str
    data: TrainingSet
    examples: list[QAExample]  # the training questions (the held-out ones excluded)
    heldout: list[QAExample]
    retriever: Retriever
    loop_cfg: SearcherConfig  # the searcher loop as rollouts run it (searcher settings, training.rollout.temperature)
    learner: PolicyLearner
    tokenizer: Any
    executor: StepExecutor
    oracle: S3Searcher | None = None
    sft_pool: list[int] | None = None  # the questions the warm-up draws from (training.sft.keep); None = all
    resume_dir: Path | None = None  # the checkpoint the learner(s) were built from (None: a fresh run)
    agent_kind: AgentKind = "s3"
    memory: StepMemory | None = None  # the step's memory estimate (training/learn/memory.py), None when not made

    @property
    def end_to_end(self) -> bool:
        return self.agent_kind == "search_r1"

    def close(self) -> None:
        """Stop the executor's workers and the learner group's actors."""
        self.executor.close()
        self.learner.close()


@dataclass
class Prepared:
    """What the preparation stage (`prepare_run`) leaves for `build_training`: the prepared training set and, with
    training.sft.keep = 'gbr_positive' or 'gold_added', the questions the warm-up learns from (indices into the training questions)."""

    data: TrainingSet
    sft_pool: list[int] | None = None
    memory: StepMemory | None = None  # the step's memory estimate, checked before the preparation (`step_memory`)


def step_memory(cfg: TrainSettings, log: Log = print) -> StepMemory | None:
    """The learner's step, estimated from the model's shape and checked against the memory it may take
    (training/learn/memory.py `check_step_memory`: a ConfigError naming the settings to change when it would not fit),
    before any data is prepared or any rollout runs. A LearnerGroup on GPUs (ray.learner_gpus) is not checked here:
    its ranks' GPUs are not this process's."""
    from s3core.devices import resolve_device
    from training.learn.memory import check_step_memory

    if cfg.ray.learners > 1 and cfg.ray.learner_gpus > 0:
        log("train: step memory: not estimated for learners on Ray GPUs")
        return None
    return check_step_memory(cfg, resolve_device(cfg.training.learner.device), log)


def prepare_run(cfg: TrainSettings, log: Log = print) -> Prepared:
    """The preparation stage of a run, logged, before anything is built: every data write and paid call a run's start
    makes. The training set ([training.data]; training/prep/data.py: prepared where it is not, the work of
    `s3 prepare-training`) and, for a warm-up with training.sft.keep = 'gbr_positive' (or 'gold_added') still to run, the questions
    whose oracle trajectory beats naive RAG (or adds gold beyond its top-k) (training/prep/distill.py; cached in RUN_DIR/distill.jsonl)."""
    from training.prep.data import Preparation

    tc = cfg.training
    _agent_kind(cfg)  # a configuration the builder refuses pays for nothing first
    memory = step_memory(cfg, log)  # and a step that cannot fit neither
    prep = Preparation(cfg, log=log)
    data = prep.prepared()
    run_dir = _run_dir(cfg)
    resume_dir = latest_checkpoint(run_dir)
    done = checkpoint_step(resume_dir) if resume_dir is not None else 0
    if not tc.sft.steps or tc.sft.keep == "all" or done >= tc.sft.steps:
        return Prepared(data, memory=memory)
    return Prepared(data, _distill(cfg, data, prep.retriever(data.index_dir), run_dir, resume_dir, log), memory)


class _StudentTokens(ChatTokenizerMixin):
    """The student's tokenizer as the oracle's token policy: the warm-up oracle's prompts, without loading the model."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer, self.name = tokenizer, "student tokenizer"


def _distill(cfg: TrainSettings, data: TrainingSet, retriever: Retriever, run_dir: Path, resume_dir: Path | None,
             log: Log) -> list[int]:
    """The warm-up's questions: those whose trajectory of the oracle the warm-up imitates (the same loop, retriever and
    tokenizer) beats naive RAG with the frozen generator (training/prep/distill.py)."""
    from training.learn.learner import load_tokenizer
    from training.prep.distill import rejection_sample, retrieval_sample

    examples, _ = split_heldout(cfg, data.examples)
    tokens = _StudentTokens(load_tokenizer(cfg.training, resume_dir))
    oracle = oracle_agent(cfg, examples, data, retriever, loop_config(cfg), tokens)
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.training.sft.keep == "gold_added":  # the retrieval check: no generator call
        return retrieval_sample(cfg, examples, oracle, run_dir, log)
    return rejection_sample(cfg, examples, oracle, data, run_dir, log=log)


def _run_dir(cfg: TrainSettings) -> Path:
    """The run directory (training.output_dir, resolved against the config file's folder)."""
    run_dir = cfg.resolve(cfg.training.output_dir)
    assert run_dir is not None
    return run_dir


def _agent_kind(cfg: TrainSettings) -> AgentKind:
    """Which searcher the run trains (training.mode); the oracle warm-up is for s3 searchers only."""
    if cfg.training.mode == "search_r1" and cfg.training.sft.steps:
        raise S3Error("training.sft.steps: the oracle warm-up is for s3 searchers (training.mode = 's3')")
    return "search_r1" if cfg.training.mode == "search_r1" else "s3"


def split_heldout(cfg: TrainSettings, examples: list[QAExample]) -> tuple[list[QAExample], list[QAExample]]:
    """(training questions, held-out questions): the last training.heldout.questions are held out."""
    n = cfg.training.heldout.questions
    if not n:
        return examples, []
    if n >= len(examples):
        raise S3Error(f"training.heldout.questions={n} leaves no training question ({len(examples)})")
    return examples[:-n], examples[-n:]


def loop_config(cfg: TrainSettings) -> SearcherConfig:
    """The searcher loop rollouts run: [searcher] as configured (the loop the trained searcher is served with),
    sampling at training.rollout.temperature."""
    return cfg.searcher.model_copy(update={"temperature": cfg.training.rollout.temperature})


def _learner_group(cfg: TrainSettings, run_dir: Path, resume_dir: Path | None, log: Log) -> LearnerGroup:
    """ray.learners Learner actors in one torch.distributed group (training/learn/learner_group.py), each built from
    [training] and the checkpoint to resume from; on a GPU each when ray.learner_gpus > 0, else on the CPU."""
    from s3runtime.raycluster import connect
    from training.learn.learner_group import LearnerGroup

    rc = cfg.ray
    connect(rc)
    device = "cuda" if rc.learner_gpus > 0 else "cpu"  # a rank sees only the GPUs Ray gave it
    t0 = time.perf_counter()
    build = functools.partial(new_learner, cfg.training, device, run_dir, resume_dir)  # each rank seeds its own
    group = LearnerGroup(rc, rc.learners, build, device=device, cpus=rc.learner_cpus, gpus=rc.learner_gpus,
                         resources=rc.learner_resources)
    log(f"train: {rc.learners} learners ({'nccl' if device.startswith('cuda') else 'gloo'}) ready in "
        f"{time.perf_counter() - t0:.1f}s")
    return group


def new_learner(tc: TrainingConfig, device: str, run_dir: Path, resume_dir: Path | None) -> Learner:
    """The learner of a run (training/learn/learner.py), built from the checkpoint `resume_dir` (whose RNG state the trainer
    restores), or, on a fresh run, after torch.manual_seed(training.seed): two fresh runs of one config start from
    the same LoRA adapters and critic (their random initialisation)."""
    import torch

    from training.learn.learner import Learner

    if resume_dir is None:
        torch.manual_seed(tc.seed)
    return Learner(tc, device, run_dir, resume_dir)


def build_executor(cfg: TrainSettings, *, data: TrainingSet, retriever: Retriever, loop_cfg: SearcherConfig,
                   learner: Learner | None, learners: LearnerGroup | None, agent_kind: AgentKind, device: str,
                   log: Log) -> StepExecutor:
    """Where rollouts and rewards run (training.backend): this process, or Ray actors (training/rollouts/ray_backend.py)."""
    from training.learn.weight_sync import merges_lora
    from training.rollouts.executors import LocalExecutor, make_scorer, rollout_policy

    end_to_end = agent_kind == "search_r1"
    if cfg.training.backend == "ray":
        from training.rollouts.ray_backend import RayExecutor

        model = learner.model if learner is not None else None
        return RayExecutor(cfg, loop_cfg=loop_cfg, index_dir=data.index_dir, agent_kind=agent_kind,
                           baseline=data.baseline, end_to_end=end_to_end,
                           learner=None if learners is not None else lambda: model,
                           weights_ref=learners.weights_ref if learners is not None else None, log=log)
    assert learner is not None  # ray.learners > 1 needs training.backend = 'ray' (S3Config's check)
    engine = None
    if cfg.training.rollout.engine == "vllm":
        if not cfg.searcher.vllm.in_process:
            log("train: searcher.vllm.in_process = false: every weight sync is serialized to the engine's process")
        engine = rollout_policy(cfg, device)
    sampler = engine if engine is not None else learner.policy
    tokenizer = learner.tokenizer
    scorer = make_scorer(cfg, data.baseline, end_to_end=end_to_end,
                         decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=False))
    agent = build_searcher(loop_cfg, retriever, sampler, k0=cfg.retriever.k, agent=agent_kind)
    greedy = build_searcher(loop_cfg.model_copy(update={"temperature": 0.0}), retriever, sampler, k0=cfg.retriever.k,
                            agent=agent_kind)  # the held-out evaluation's (training.heldout.every)
    return LocalExecutor(agent=agent, greedy_agent=greedy, scorer=scorer, model=learner.model, engine=engine,
                         autocast=cfg.training.learner.autocast, merge_lora=merges_lora(cfg.training.rollout.merge_lora, device))


def oracle_agent(cfg: TrainSettings, examples: list[QAExample], data: TrainingSet, retriever: Retriever,
                 loop_cfg: SearcherConfig, tokenizer_policy: Any) -> S3Searcher:
    """The same loop driven by oracle replies (training/prep/oracle.py), tokenized with the student's tokenizer, so its
    trajectories carry the student's chat template and exact policy / environment masks."""
    from searcher.policy.scripted import ScriptedPolicy
    from training.prep.oracle import gold_titles, oracle_script

    gold = gold_titles(examples, data.directory / "corpus.jsonl")
    if not any(gold.values()):
        raise S3Error("training.sft.steps needs gold supporting paragraphs (metadata.supporting_ids or "
                      "supporting_titles) in the training questions; these have none")
    script = oracle_script(gold, loop_cfg.max_select, loop_cfg.max_turns, teacher=cfg.training.sft.teacher,
                           queries_per_turn=loop_cfg.queries_per_turn)
    oracle = ScriptedPolicy(script, name="oracle", tokenizer=tokenizer_policy)
    return build_searcher(loop_cfg, retriever, oracle, k0=cfg.retriever.k)


def build_training(cfg: TrainSettings, prepared: Prepared, log: Log = print) -> TrainingParts:
    """Every part of a training run (see the module docstring) assembled from what the preparation stage left
    (`prepare_run`), ready for the loop: no data is written and no paid call is made here. A resumed run's
    learner(s) are built from its latest checkpoint's weights (the optimizer state is the trainer's to restore with
    the data order)."""
    import torch

    from s3core.devices import auto_cpu_threads, resolve_device
    from training.learn.learner import load_tokenizer
    from training.rollouts.budget import BudgetedExecutor

    tc = cfg.training
    memory = prepared.memory if prepared.memory is not None else step_memory(cfg, log)  # before any model loads
    device = resolve_device(tc.learner.device)
    if device == "cpu":
        torch.set_num_threads(tc.learner.torch_threads or auto_cpu_threads())
    run_dir = _run_dir(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    agent_kind = _agent_kind(cfg)
    data = prepared.data
    examples, heldout = split_heldout(cfg, data.examples)
    if tc.update.turn_credit and not any(e.supporting_ids for e in examples):
        raise S3Error("training.update.turn_credit credits each reply with the gold paragraphs it admits: the "
                      "training questions need supporting ids (metadata.supporting_ids); these have none")
    retriever = build_retriever(cfg.retriever, data.index_dir)
    resume_dir = latest_checkpoint(run_dir)  # the newest complete checkpoint (None: a fresh run)
    learner: Learner | None = None
    learners: LearnerGroup | None = None
    if cfg.ray.learners > 1:
        tokenizer = load_tokenizer(tc, resume_dir)
        learners = _learner_group(cfg, run_dir, resume_dir, log)
        chosen: PolicyLearner = learners
    else:
        learner = new_learner(tc, device, run_dir, resume_dir)  # seeded when fresh
        learner.policy.gen_batch = cfg.searcher.generate_batch  # the learner generates its own rollouts
        tokenizer = learner.tokenizer
        chosen = learner
    loop_cfg = loop_config(cfg)
    inner: StepExecutor | None = None
    try:
        inner = build_executor(cfg, data=data, retriever=retriever, loop_cfg=loop_cfg, learner=learner,
                               learners=learners, agent_kind=agent_kind, device=device, log=log)
        # training/rollouts/budget.py: the reward calls priced, capped by training.budget_usd (cost/ metrics); the step each
        # call belongs to is the one its rollout was asked for
        start = checkpoint_step(resume_dir) if resume_dir is not None else 0
        executor = BudgetedExecutor(inner, cfg, run_dir, start_step=start, budget_usd=tc.budget_usd)
        oracle = None
        if tc.sft.steps:
            assert learner is not None  # a warm-up runs in this process's learner (S3Config's check)
            oracle = oracle_agent(cfg, examples, data, retriever, loop_cfg, learner.policy)
    except BaseException:  # the workers and learner actors do not outlive a run that failed to start
        if inner is not None:
            inner.close()
        if learners is not None:
            learners.close()
        raise
    return TrainingParts(cfg=cfg, run_dir=run_dir, device=device, data=data, examples=examples, heldout=heldout,
                         retriever=retriever, loop_cfg=loop_cfg, learner=chosen,
                         tokenizer=tokenizer, executor=executor, oracle=oracle, sft_pool=prepared.sft_pool, resume_dir=resume_dir,
                         agent_kind=agent_kind, memory=memory)
