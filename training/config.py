"""Config section owned by the training layer: [training]."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import Field, model_validator

from eval.config import EvalSettings
from s3core.configbase import Section


class TrainingConfig(Section):
    backend: Literal["local", "ray"] = Field(
        "local",
        description="Where rollouts and rewards run: in this process ('local'), or on Ray actors ([ray]: rollout workers "
        "with their own engine, reward workers with the generator); the update, the checkpoints and the data order "
        "stay here either way.",
    )
    mode: Literal["s3", "search_r1"] = Field("s3", description="'s3' trains a searcher with a frozen generator; 'search_r1' end to end.")
    algorithm: Literal["grpo", "ppo"] = Field("grpo", description="Policy-gradient algorithm.")
    reward: Literal["gbr", "acc_plus_gbr", "em", "r1_searcher_stage1", "r1_searcher_stage2", "confidence_gated"] = Field(
        "gbr", description="Reward function (training/rewards.py)."
    )
    base_model: str = Field("smollm2-135m", description="Trainable policy: an offline model name or a HF model dir.")
    output_dir: str = Field("runs/train", description="Run directory: checkpoints, metrics.jsonl, TensorBoard, plots.")
    train_data: str | None = Field(None, description="Prepared training directory (s3 prepare-training); built if missing.")
    total_steps: int = Field(20, ge=1, description="Optimizer steps (the warm-up steps included).")
    batch_size: int = Field(4, ge=1, description="Questions per step.")
    group_size: int = Field(4, ge=1, description="Rollouts per question (GRPO group; PPO uses 1 unless set).")
    learning_rate: float = Field(1e-6, gt=0, description="Actor learning rate (s3 paper: 1e-6).")
    critic_learning_rate: float = Field(1e-5, gt=0, description="Critic learning rate (PPO; s3 paper: 1e-5).")
    clip_coef: float = Field(0.2, gt=0, description="PPO/GRPO ratio clip epsilon.")
    value_clip_coef: float = Field(0.2, gt=0, description="PPO value-loss clip.")
    kl_coef: float = Field(0.001, ge=0, description="KL-to-reference coefficient (low-variance k3 estimator).")
    gamma: float = Field(1.0, ge=0, le=1, description="PPO discount.")
    gae_lambda: float = Field(1.0, ge=0, le=1, description="GAE lambda.")
    ppo_epochs: int = Field(1, ge=1, description="Update epochs per batch of rollouts.")
    drop_flat_groups: bool = Field(
        False,
        description="GRPO only (PPO's advantages come from its critic): leave out of the update the groups whose "
        "rewards are all equal (zero advantage, only the KL term would move them; DAPO's dynamic-sampling filter "
        "without refill). Saves their forward/backward passes.",
    )
    temperature: float = Field(
        0.6, ge=0,
        description="Rollout sampling temperature (s3 paper: 0.6); 0 = greedy rollouts (deterministic: for checks "
        "such as local vs Ray; a GRPO group then has identical members), their log-probs at temperature 1.",
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping.")
    lora: bool = Field(False, description="Train LoRA adapters (peft) instead of all weights.")
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    save_every: int = Field(10, ge=1, description="Checkpoint interval in steps (a final checkpoint is always written).")
    seed: int = Field(0)
    drop_yes_no: bool = Field(True, description="Drop yes/no and true/false questions when preparing training data.")
    keep_baseline_zero: bool = Field(True, description="Keep only questions naive RAG gets wrong (s3 §3.2).")
    keep_answerable: bool = Field(
        False,
        description="Keep only training questions the generator answers from their gold supporting paragraphs "
        "(metadata.supporting_ids; cached like the baseline): on the others every rollout gets the same reward whatever "
        "the searcher finds. The held-out questions are not filtered.",
    )
    confidence_beta: float = Field(0.4, ge=0, le=1, description="Search Wisely's beta for the confidence-gated reward.")
    invalid_penalty: float = Field(
        0.0,
        ge=0,
        description="Format term on top of the reward: minus this x the fraction of a rollout's turns whose action was "
        "invalid (no <query> and no <search_complete>, an empty query, ...). 0 = the s3 paper (no format term); a small "
        "searcher may then drift into select-only replies at no cost (docs/transfer.md).",
    )
    train_sources: list[str] = Field(
        default_factory=lambda: [
            "hotpotqa:../shared/data/train_hotpotqa_musique100/hotpotqa_train.json",
            "musique:../shared/data/train_hotpotqa_musique100/musique_train.json",
        ],
        description="Raw QA files as 'format:path' (the formats of `s3 data formats`; paths relative to the config file); "
        "their paragraphs form the training corpus. Used when train_data is missing.",
    )
    exclude_sources: list[str] = Field(
        default_factory=list,
        description="QA files ('format:path', like train_sources) whose paragraphs must not be in the training corpus, "
        "e.g. the evaluation slices: their paragraphs are removed from it and the training questions whose gold "
        "supporting paragraphs were among them are dropped (both counted in manifest.json).",
    )
    shuffle_seed: int | None = Field(
        None, description="Shuffle the loaded questions with this seed before max_questions and the held-out split "
        "(None = the sources' order; the held-out questions are the last heldout_questions either way)."
    )
    max_questions: int | None = Field(None, ge=1, description="Cap on questions taken from the sources (None = all).")
    baseline_batch: int = Field(16, ge=1, description="Questions per batch of naive-RAG baseline generator calls (cached, resumable).")
    max_new_tokens: int | None = Field(None, ge=8, description="Policy tokens per turn in rollouts (None = searcher.max_new_tokens).")
    vf_coef: float = Field(1.0, ge=0, description="PPO value-loss weight.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warm-up steps.")
    micro_batch_size: int = Field(4, ge=1, description="Sequences per forward/backward pass (gradient accumulation over the batch).")
    keep_checkpoints: int = Field(2, ge=1, description="Newest checkpoints kept in output_dir/checkpoints.")
    torch_threads: int | None = Field(
        None, ge=1, description="torch intra-op threads on CPU (None = 2, capped by the CPU count, or 1 when the machine "
        "is already saturated when the run starts: threads on oversubscribed cores stall each other)."
    )
    sft_warmup_steps: int = Field(
        0, ge=0,
        description="Supervised format warm-up steps on oracle trajectories (training/oracle.py) before RL; a searcher "
        "that writes no valid action gets identical rewards in a group and zero GRPO advantage without it.",
    )
    sft_learning_rate: float = Field(1e-4, gt=0, description="Learning rate of the warm-up steps.")
    autocast: Literal["off", "bf16"] = Field(
        "off",
        description="Mixed precision for rollouts and the training forward passes (torch.autocast; weights, optimizer "
        "state and log-softmax stay fp32). 'bf16' is ~3x faster on CPUs with AVX512-BF16/AMX (benchmarks/train_step.py).",
    )
    share_prefix: bool = Field(
        True,
        description="Compute the prompt prefix a micro-batch shares (the s3 instruction; the whole first prompt for a "
        "GRPO group) once per forward, gradients included, instead of once per row (exact; searcher.policy.prefix_kv).",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the learner, the reference policy and the critic live ('auto' = cuda when available, "
        "else cpu)."
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="Weights of the learner and the reference policy. bfloat16 is for LoRA only (frozen base weights at "
        "2 bytes a parameter; the adapters and their optimizer state stay float32); full fine-tuning keeps float32 "
        "weights (the master copy every AdamW update lands in) and computes in bf16 with autocast = 'bf16' "
        "(docs/training.md, 'Precision and memory').",
    )
    logprob_chunk: int = Field(
        1024, ge=1,
        description="Policy-token positions whose vocabulary logits the learner computes at once (training/algorithms.py "
        "masked_logprobs; recomputed in the backward pass): its transient memory is ~logprob_chunk x vocabulary x 4 B "
        "(1024 x 151,936 = 0.6 GB for Qwen2.5), whatever the sequence length.",
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass (less memory, ~30% more compute). Turns off "
        "share_prefix in the training forward (the shared prefix's KV cache cannot be checkpointed)."
    )
    rollout_engine: Literal["transformers", "vllm"] = Field(
        "transformers",
        description="Who generates rollouts: the learner itself (transformers) or a vLLM engine (searcher.vllm) that "
        "receives the learner's weights in place after every optimizer step. The PPO/GRPO ratio always uses "
        "log-probs the learner recomputes; vLLM's are reported against them (rollout/logprob_gap_*).",
    )
    logprob_gap_tolerance: float = Field(
        0.05, ge=0,
        description="vLLM rollouts: a trajectory whose mean |vLLM - learner| token log-prob gap exceeds this feeds the "
        "confidence-gated reward the learner's log-probs instead of vLLM's.",
    )
    heldout_questions: int = Field(0, ge=0, description="Questions held out of training (from the end of the prepared set) for `s3 train-eval`.")
    heldout_every: int = Field(
        0, ge=0,
        description="Every N steps (from the end of the warm-up on, and at the last step) the rollout engine's greedy "
        "rollouts of the held-out questions, scored with the training reward: metrics heldout/*, RUN_DIR/heldout.jsonl, "
        "a checkpoint of that step, and checkpoints/best = the one with the highest held-out Acc of the searcher's "
        "documents (kept whatever keep_checkpoints prunes). 0 = off.",
    )

    budget_usd: float | None = Field(
        None, ge=0,
        description="Cap in dollars on what the run (all its invocations) spends on paid reward calls (the frozen "
        "generator and the judge; same as `s3 train --max-cost-usd`). Before each step its calls are projected "
        "(prompts measured, completions at max_tokens); a step that could pass the cap is not started: the run stops "
        "with the previous step's checkpoint, exit status 3 and 'budget reached', and resumes with a higher cap. A "
        "model of unknown price is refused (set its input_cost_per_mtok / output_cost_per_mtok). None = no cap.",
    )

    @model_validator(mode="after")
    def _check(self) -> TrainingConfig:
        if self.algorithm == "grpo" and self.group_size < 2:
            raise ValueError("GRPO needs training.group_size >= 2 (the group is its baseline); set group_size or use ppo")
        if self.heldout_every and not self.heldout_questions:
            raise ValueError("training.heldout_every needs training.heldout_questions > 0 (the questions it evaluates)")
        if self.dtype == "bfloat16" and not self.lora:
            raise ValueError(
                "training.dtype = 'bfloat16' with full fine-tuning (training.lora = false) would let AdamW update bf16 "
                "weights in place: most of each update rounds away (at lr 1e-6, 2% of the weights moved in three steps). "
                "Use training.dtype = 'float32' with training.autocast = 'bf16' (float32 master weights, bf16 compute: "
                "16 bytes a parameter), or training.lora = true (bf16 base weights are fine when only the float32 "
                "adapters train)")
        if self.mode == "search_r1" and self.reward not in ("em", "r1_searcher_stage1", "r1_searcher_stage2", "confidence_gated"):
            raise ValueError(f"search_r1 mode answers itself: training.reward={self.reward!r} needs a generator; use 'em'")
        return self


class TrainSettings(EvalSettings, Protocol):
    """What training reads of the one configuration (`s3.config.S3Config` is one)."""

    @property
    def training(self) -> TrainingConfig: ...
    @property
    def base_dir(self) -> Path:
        """The config file's folder (relative paths resolve against it)."""
        ...
    def model_dump_json(self, *, indent: int | None = None) -> str:
        """The whole configuration as JSON (a run directory keeps it as config.json)."""
        ...
