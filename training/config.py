"""Config section owned by the training layer: [training] and its sub-tables, one owner per setting.

    [training]              what is trained and for how long: mode, algorithm, reward, base_model, total_steps, ...
    [training.data]         the training questions: sources, filters, the prepared directory     (training/prep/data.py)
    [training.heldout]      questions kept out of training, evaluated every N steps                 (the trainer)
    [training.rollout]      the step's rollouts: engine, batch and group size, temperature          (training/rollouts/executors.py)
    [training.update]       the policy-gradient update: learning rates, clipping, KL, PPO's GAE     (training/learn/learner.py)
    [training.sft]          the supervised format warm-up on oracle trajectories                    (training/learn/learner.py)
    [training.learner]      where and how the learner holds the model: device, dtype, LoRA, memory  (training/learn/learner.py)
    [training.checkpoint]   how often checkpoints are written and how many are kept                 (the trainer)

A setting of the searcher's loop (searcher.max_new_tokens, searcher.k, ...) is read from [searcher]: the trained
searcher is served with the loop it was trained with. A flat key of an older s3 (`training.batch_size`) is refused
with the key that replaced it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import Field, field_validator, model_validator

from eval.config import EvalSettings
from s3core.configbase import Section
from training.rewards import REGISTRY, reward_spec

# flat [training] keys of s3 before the sub-tables -> where each lives now (a config that uses one gets this key)
MOVED_KEYS = {
    "train_data": "training.data.dir", "train_sources": "training.data.sources",
    "exclude_sources": "training.data.exclude_sources", "shuffle_seed": "training.data.shuffle_seed",
    "max_questions": "training.data.max_questions", "baseline_batch": "training.data.baseline_batch",
    "drop_yes_no": "training.data.drop_yes_no", "keep_baseline_zero": "training.data.keep_baseline_zero",
    "keep_answerable": "training.data.keep_answerable",
    "heldout_questions": "training.heldout.questions", "heldout_every": "training.heldout.every",
    "rollout_engine": "training.rollout.engine", "batch_size": "training.rollout.batch_size",
    "group_size": "training.rollout.group_size", "temperature": "training.rollout.temperature",
    "logprob_gap_tolerance": "training.rollout.logprob_gap_tolerance", "max_new_tokens": "searcher.max_new_tokens",
    "learning_rate": "training.update.learning_rate", "critic_learning_rate": "training.update.critic_learning_rate",
    "clip_coef": "training.update.clip_coef", "value_clip_coef": "training.update.value_clip_coef",
    "kl_coef": "training.update.kl_coef", "vf_coef": "training.update.vf_coef", "gamma": "training.update.gamma",
    "gae_lambda": "training.update.gae_lambda", "ppo_epochs": "training.update.ppo_epochs",
    "max_grad_norm": "training.update.max_grad_norm", "warmup_steps": "training.update.warmup_steps",
    "drop_flat_groups": "training.update.drop_flat_groups",
    "sft_warmup_steps": "training.sft.steps", "sft_learning_rate": "training.sft.learning_rate",
    "device": "training.learner.device", "dtype": "training.learner.dtype", "autocast": "training.learner.autocast",
    "lora": "training.learner.lora", "lora_r": "training.learner.lora_r", "lora_alpha": "training.learner.lora_alpha",
    "micro_batch_size": "training.learner.micro_batch_size", "logprob_chunk": "training.learner.logprob_chunk",
    "gradient_checkpointing": "training.learner.gradient_checkpointing",
    "share_prefix": "training.learner.share_prefix", "torch_threads": "training.learner.torch_threads",
    "save_every": "training.checkpoint.every", "keep_checkpoints": "training.checkpoint.keep",
}


# where a missing gold title may be visible for training.data.keep_copyable to keep the question (all by default)
CopyablePlace = Literal["question", "documents"]
COPYABLE_PLACES: tuple[CopyablePlace, ...] = ("question", "documents")


class TrainingData(Section):
    """[training.data]: which questions the searcher trains on (s3 prepare-training; training/prep/data.py)."""

    dir: str | None = Field(None, description="Prepared training directory (s3 prepare-training); built if missing.")
    sources: list[str] = Field(
        default_factory=lambda: [
            "hotpotqa:../shared/data/train_hotpotqa_musique100/hotpotqa_train.json",
            "musique:../shared/data/train_hotpotqa_musique100/musique_train.json",
        ],
        description="Raw QA files as 'format:path' (the formats of `s3 data formats`; paths relative to the config file); "
        "their paragraphs form the training corpus. Used when dir is missing.",
    )
    exclude_sources: list[str] = Field(
        default_factory=list,
        description="QA files ('format:path', like sources) whose paragraphs must not be in the training corpus, "
        "e.g. the evaluation slices: their paragraphs are removed from it and the training questions whose gold "
        "supporting paragraphs were among them are dropped (both counted in manifest.json).",
    )
    shuffle_seed: int | None = Field(
        None, description="Shuffle the loaded questions with this seed before max_questions and the held-out split "
        "(None = the sources' order; the held-out questions are the last training.heldout.questions either way)."
    )
    max_questions: int | None = Field(None, ge=1, description="Cap on questions taken from the sources (None = all).")
    baseline_batch: int = Field(16, ge=1, description="Questions per batch of naive-RAG baseline generator calls (cached, resumable).")
    drop_yes_no: bool = Field(True, description="Drop yes/no and true/false questions when preparing training data.")
    keep_baseline_zero: bool = Field(
        True, description="Keep only questions naive RAG gets wrong (s3 §3.2; the s3 release's filter_fn): on the others "
        "'keep naive RAG's documents and stop' is already the optimum. The held-out questions (training.heldout) are "
        "never filtered: checkpoints are chosen on the natural mix.")
    keep_answerable: bool = Field(
        False,
        description="Keep only training questions the generator answers from their gold supporting paragraphs "
        "(metadata.supporting_ids; cached like the baseline): on the others every rollout gets the same reward whatever "
        "the searcher finds. The held-out questions are not filtered.",
    )
    keep_copyable: bool = Field(
        False,
        description="Keep only training questions whose naive-RAG top-k lacks a gold supporting paragraph whose title "
        "is visible in the question or a top-k document (title and first words: what the copyable teacher could ask "
        "for, training/prep/oracle.py `copyable_gold`; no generator call): a curriculum where asking for the right visible "
        "title is the only way to a positive retrieval_gain. The held-out questions are not filtered.",
    )
    copyable_places: list[CopyablePlace] = Field(
        list(COPYABLE_PLACES), min_length=1,
        description="With keep_copyable: where the missing gold title may be visible for a question to be kept "
        "(training/prep/oracle.py `missing_gold_place`; a question whose missing title is in the question counts as "
        "'question'). [\"documents\"] keeps only the questions whose missing title shows in a retrieved document's "
        "text alone, in HotpotQA mostly the bridge to the second hop: where the documents' gain to the generator was "
        "found (docs/transfer.md, the diagnosis table of the dev evaluation).",
    )

    @model_validator(mode="after")
    def _places_need_the_filter(self) -> TrainingData:
        if self.narrows_copyable() and not self.keep_copyable:
            raise ValueError("copyable_places narrows training.data.keep_copyable, which is off: set keep_copyable = "
                             "true (or leave copyable_places at its default)")
        return self

    def narrows_copyable(self) -> bool:
        """Whether copyable_places leaves out a place keep_copyable keeps by default."""
        return set(self.copyable_places) != set(COPYABLE_PLACES)


class TrainingHeldout(Section):
    """[training.heldout]: questions kept out of training, for checkpoint choice and `s3 train-eval`."""

    questions: int = Field(0, ge=0, description="Questions held out of training (the last ones of the prepared set).")
    every: int = Field(
        0, ge=0,
        description="Every N steps (from the end of the warm-up on, and at the last step) the rollout engine's greedy "
        "rollouts of the held-out questions, scored with the training reward: metrics heldout/*, RUN_DIR/heldout.jsonl, "
        "a checkpoint of that step, and checkpoints/best = the one with the highest held-out Acc of the searcher's "
        "documents (kept whatever checkpoint.keep prunes). 0 = off.",
    )


class TrainingRollout(Section):
    """[training.rollout]: what a step rolls out and who generates it (training/rollouts/executors.py)."""

    engine: Literal["transformers", "vllm"] = Field(
        "transformers",
        description="Who generates rollouts: the learner itself (transformers) or a vLLM engine (searcher.vllm) that "
        "receives the learner's weights in place after every optimizer step. The PPO/GRPO ratio always uses "
        "log-probs the learner recomputes; vLLM's are reported against them (rollout/logprob_gap_*).",
    )
    merge_lora: Literal["auto", "on", "off"] = Field(
        "auto",
        description="The transformers engine (the learner sampling itself) with a LoRA learner: sample with the adapters "
        "merged into the weights (training/learn/weight_sync.py lora_merged: out of place, the originals restored "
        "after each rollout; one matmul a layer instead of three; nothing merged when the copies would take over half "
        "the GPU's free memory; metric rollout/lora_merged). 'auto' = on when the learner is on a GPU, where decoding "
        "is bound by launches (the 3B shape on an H200: 793 -> 1,680-2,002 policy tokens/s; "
        "benchmarks/results/gpu_rollout_levers), off on the CPU (no gain measured there).",
    )
    batch_size: int = Field(4, ge=1, description="Questions per step.")
    group_size: int = Field(
        4, ge=1, description="Rollouts per question: GRPO's group (its baseline; >= 2). PPO's critic is the baseline, "
        "so 1 is the usual PPO setting (set it: nothing changes it for you).")
    temperature: float = Field(
        0.6, ge=0,
        description="Rollout sampling temperature (s3 paper: 0.6); 0 = greedy rollouts (deterministic: for checks "
        "such as local vs Ray; a GRPO group then has identical members), their log-probs at temperature 1. The "
        "searcher's own searcher.temperature is what serving samples at; training's rollouts use this one.",
    )
    logprob_gap_tolerance: float = Field(
        0.05, ge=0,
        description="vLLM rollouts: a trajectory whose mean |vLLM - learner| token log-prob gap exceeds this feeds the "
        "confidence-gated reward the learner's log-probs instead of vLLM's.",
    )
    max_staleness: int = Field(
        0, ge=0,
        description="Asynchronous RL (training/rollouts/pipeline.py): while the learner updates on batch k, batches up to k + "
        "max_staleness are rolled out and scored with weights at most max_staleness updates old (admission control: "
        "nothing generated is discarded; the data order stays a function of seed and step). 0 = the synchronous loop "
        "(rollout -> reward -> update), unchanged. Stale samples are corrected by training.update.offpolicy.",
    )


class TrainingUpdate(Section):
    """[training.update]: the masked PPO / GRPO update (training/learn/algorithms.py, training/learn/learner.py)."""

    learning_rate: float = Field(1e-6, gt=0, description="Actor learning rate (s3 paper: 1e-6).")
    critic_learning_rate: float = Field(1e-5, gt=0, description="Critic learning rate (PPO; s3 paper: 1e-5).")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warm-up steps.")
    clip_coef: float = Field(0.2, gt=0, description="PPO/GRPO ratio clip epsilon.")
    value_clip_coef: float = Field(0.2, gt=0, description="PPO value-loss clip.")
    vf_coef: float = Field(1.0, ge=0, description="PPO value-loss weight.")
    kl_coef: float = Field(0.001, ge=0, description="KL-to-reference coefficient (low-variance k3 estimator); 0 = no "
                           "reference policy is loaded.")
    gamma: float = Field(1.0, ge=0, le=1, description="PPO discount.")
    gae_lambda: float = Field(1.0, ge=0, le=1, description="GAE lambda.")
    ppo_epochs: int = Field(1, ge=1, description="Update epochs per batch of rollouts.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping.")
    drop_flat_groups: bool = Field(
        False,
        description="GRPO only (PPO's advantages come from its critic): leave out of the update the groups whose "
        "rewards are all equal (zero advantage, only the KL term would move them; DAPO's dynamic-sampling filter "
        "without refill). Saves their forward/backward passes.",
    )
    advantage_scale: Literal["group_std", "none"] = Field(
        "group_std",
        description="GRPO only: 'group_std' = (r - group mean) / group std (the s3 paper, TRL, verl); 'none' = "
        "r - group mean (Dr. GRPO, Liu et al. 2025). With a reward whose small differences come from a cheap, safe "
        "action (retrieval_gain: stopping at once scores 0, a non-gold paragraph -retrieval_cost), the std makes a "
        "0.25 gap as strong a push as a gold paragraph's 1.25. Unscaled, the format term's bound (training.format_advantage "
        "= 'centred') no longer sits below every task-reward gap: keep invalid_penalty below the smallest gap. In the "
        "third transfer attempt 'none' alone did not stop the collapse into stopping at once (docs/transfer.md).",
    )
    offpolicy: Literal["decoupled", "none"] = Field(
        "decoupled",
        description="Asynchronous RL only (training.rollout.max_staleness > 0): 'decoupled' = the decoupled PPO "
        "objective (AReaL): the clipped ratio is taken against the learner's recomputed log-probs (the proximal "
        "policy) and each token is weighted by the truncated importance weight min(pi_prox / pi_behaviour, is_cap) of "
        "the behaviour policy that sampled it (the rollout's own log-probs); 'none' = no weight (an ablation).",
    )
    is_cap: float = Field(
        2.0, gt=0,
        description="Truncation of the behaviour importance weight (training.update.offpolicy = 'decoupled'; "
        "losses/is_clipfrac counts the tokens it cut).",
    )
    turn_credit: float = Field(
        0.0, ge=0,
        description="GRPO in s3 mode: weight of each reply's own credit, added to the outcome's sequence advantage on "
        "that reply's tokens (0 = off, the s3 paper). A reply's credit is the gold supporting paragraphs its selection "
        "admits first, minus training.retrieval_cost per other paragraph (training/rewards.py turn_credits), taken as "
        "reward-to-go less the group's mean at the same reply (training/learn/advantages.py turn_advantages): the "
        "selection and the query that opened its window are credited apart from the rest of the trajectory. Needs the "
        "training questions' supporting ids; metrics reward/turn_credit_mean, reward/turn_credit_unaligned.",
    )


class TrainingSft(Section):
    """[training.sft]: the supervised format warm-up before RL (oracle trajectories, training/prep/oracle.py)."""

    steps: int = Field(
        0, ge=0,
        description="Supervised format warm-up steps on oracle trajectories (training/prep/oracle.py) before RL; a searcher "
        "that writes no valid action gets identical rewards in a group and zero GRPO advantage without it. RL's "
        "reference policy is then the warmed policy.",
    )
    learning_rate: float = Field(1e-4, gt=0, description="Learning rate of the warm-up steps.")
    keep: Literal["all", "gbr_positive", "gold_added"] = Field(
        "all",
        description="Which oracle trajectories the warm-up learns from. 'all': every training question's. "
        "'gbr_positive': distillation by rejection sampling - only the trajectories whose documents beat naive RAG "
        "with the frozen generator (GBR > 0; one generator call each, cached in the run directory's distill.jsonl "
        "before the first step), so the warmed policy imitates what earns the reward, not just the format. "
        "'gold_added': the retrieval check - only the trajectories that add a gold supporting paragraph naive RAG's "
        "top-k lacked (no generator call; training/prep/distill.py retrieval_sample).",
    )
    teacher: Literal["gold_title", "copyable", "candidates", "spans"] = Field(
        "gold_title",
        description="The warm-up's oracle (training/prep/oracle.py). 'gold_title': queries the missing gold title (attempts "
        "1-2; the title is in neither the question nor the retrieved text on ~31% of HotpotQA questions, so the "
        "student cannot copy it). 'copyable': queries a missing gold title only where the question or a document shown "
        "so far shows it, otherwise stops - only actions the student could take from what it sees. 'candidates': "
        "the copyable query followed, in one JSON list, by the other title-like spans it sees, up to "
        "searcher.queries_per_turn (>= 2): the student learns to list candidates instead of choosing one. 'spans': the "
        "same list in the order the prompt shows the spans, the copyable title in its place (the heuristic control's "
        "list, copyable without knowing which span is gold).",
    )
    candidates: int | None = Field(
        None, ge=1,
        description="With keep = 'gbr_positive' or 'gold_added': the oracle is tried on the first this-many training "
        "questions (in a seeded order; with 'gbr_positive' each try is a generator call). None = every training question.",
    )


class TrainingLearner(Section):
    """[training.learner]: where and how the learner holds the policy (training/learn/learner.py)."""

    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the learner, the reference policy and the critic live ('auto' = cuda when available, "
        "else cpu). searcher.device is where a served searcher runs."
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="Weights of the learner and the reference policy. bfloat16 is for LoRA only (frozen base weights at "
        "2 bytes a parameter; the adapters and their optimizer state stay float32); full fine-tuning keeps float32 "
        "weights (the master copy every AdamW update lands in) and computes in bf16 with autocast = 'bf16' "
        "(docs/gpu.md, 'Precision and memory').",
    )
    autocast: Literal["off", "bf16"] = Field(
        "off",
        description="Mixed precision for rollouts and the training forward passes (torch.autocast; weights, optimizer "
        "state and log-softmax stay fp32). 'bf16' is ~3x faster on CPUs with AVX512-BF16/AMX (benchmarks/train_step.py).",
    )
    lora: bool = Field(False, description="Train LoRA adapters (peft) instead of all weights.")
    lora_r: int = Field(16, ge=1, description="LoRA rank: trainable parameters per adapted matrix = r x (rows + columns).")
    lora_alpha: int = Field(32, ge=1, description="LoRA scaling: the adapters' update is multiplied by lora_alpha / lora_r.")
    micro_batch_size: int = Field(
        4, ge=1, description="Most sequences per forward/backward pass (gradient accumulation over the batch); "
        "max_tokens_per_micro_batch may cut a micro-batch smaller.")
    max_tokens_per_micro_batch: int | None = Field(
        4096, ge=16,
        description="Token budget of one forward/backward pass: an update's rows are cut, in order, into micro-batches "
        "of at most micro_batch_size rows whose padded size (rows x the longest row's tokens) stays within it; a row "
        "longer than the budget goes alone (logged). The loss and gradients are the same whatever the cut (each "
        "micro-batch weighted by its share of the update's policy tokens). With gradient checkpointing the update's "
        "memory grows linearly with it (benchmarks/results/learner_memory). None = micro_batch_size rows whatever "
        "their length. `s3 train` and its --dry-run refuse a run whose step would not fit the memory (memory_gb).",
    )
    logprob_chunk: int = Field(
        256, ge=1,
        description="Policy-token positions whose vocabulary logits the learner computes at once (training/learn/algorithms.py "
        "masked_logprobs; recomputed in the backward pass): its transient memory is ~logprob_chunk x vocabulary x 4 B "
        "x ~4 (logits, log-softmax, their gradients: 256 x 151,936 x 16 B = 0.6 GB for Qwen2.5), whatever the sequence "
        "length. 256 took 0.3 GB less than 1024 on SmolLM2-135M at no measured cost in time "
        "(benchmarks/results/learner_memory).",
    )
    gradient_checkpointing: Literal["auto"] | bool = Field(
        "auto",
        description="Recompute activations in the backward pass (less memory, ~30% more compute on the micro-batches "
        "it runs on). A checkpointed micro-batch is computed without share_prefix (the shared prefix's KV cache cannot "
        "be checkpointed). 'auto' = per micro-batch: checkpointed when its activations without it (estimated from the "
        "model's shape: training/learn/memory.py) would exceed those of a checkpointed micro-batch of "
        "max_tokens_per_micro_batch tokens, so the update's peak is bounded by the budget and short micro-batches "
        "run at full speed ('auto' without a budget, max_tokens_per_micro_batch = None, never checkpoints).",
    )
    attn_implementation: Literal["auto", "sdpa", "eager"] = Field(
        "auto",
        description="The learner's attention (and its own rollouts'): 'sdpa' = torch's fused attention, which keeps no "
        "(heads x T x T) probabilities for the backward pass (measured on CPU: benchmarks/results/learner_memory); "
        "'eager' = transformers' reference attention, which keeps them in every layer; 'auto' = the model's own "
        "choice (sdpa where transformers supports it).",
    )
    memory_gb: float | None = Field(
        None, gt=0,
        description="Memory a training step may take in GB: `s3 train` and `s3 train --dry-run` estimate the step's "
        "peak from the model's shape, the token budget and the longest trajectory the searcher's settings allow "
        "(training/learn/memory.py) and refuse a run that would not fit, before any rollout. None = the memory "
        "available when the run starts (RAM, or the GPU's free memory when the learner runs on cuda).",
    )
    share_prefix: bool = Field(
        True,
        description="Compute the prompt prefix a micro-batch shares (the s3 instruction; the whole first prompt for a "
        "GRPO group) once per forward, gradients included, instead of once per row (exact; searcher.policy.prefix_kv).",
    )
    torch_threads: int | None = Field(
        None, ge=1, description="torch intra-op threads on CPU (None = 2, capped by the CPU count, or 1 when the machine "
        "is already saturated when the run starts: threads on oversubscribed cores stall each other)."
    )


class TrainingCheckpoint(Section):
    """[training.checkpoint]: RUN_DIR/checkpoints (the trainer)."""

    every: int = Field(10, ge=1, description="Checkpoint interval in steps (a final checkpoint is always written).")
    keep: int = Field(2, ge=1, description="Newest checkpoints kept in output_dir/checkpoints (the held-out best besides).")


class TrainingReading(Section):
    """[training.reading]: `s3 train` with searcher.kind = 'reading' (training/reading/): each training question's
    candidate pages are scored by the frozen generator (the gain in log p(gold answer) when a page is added to the
    start's documents), a LoRA pointwise reader learns that credit, a ranker is fitted over it, and how many pages to
    add is chosen on the held-out questions (training.heldout.questions)."""

    credit: Literal["logprob", "genacc", "gold"] = Field(
        "logprob",
        description="What teaches the reader: 'logprob' = the frozen generator's gain in log p(gold answer) per page, "
        "teacher-forced (offline generators: llama.cpp); 'genacc' = the gain in Acc(G(Q, D)) (eval.metric, the "
        "generator's own answers, as the GBR reward scores them) when the page is added: any generator, served or "
        "API, one answer a page plus one for the start (costlier, coarser: -1, 0 or +1 a page with greedy "
        "decoding; the dry run says how many calls); 'gold' = the data's gold supporting-paragraph labels.",
    )
    questions: int | None = Field(None, ge=1, description="Training questions scored (None = all of the prepared set).")
    credit_path: str | None = Field(
        None, description="Where the credit is kept (one line a question, resumable; relative to the config file). "
        "None = output_dir/credit.jsonl. Set it to keep the scoring (the slow stage) apart from the run directory, "
        "e.g. in a folder that is committed while a multi-session run goes on.")
    temperature: float = Field(
        1.0, gt=0, description="The credit's softmax temperature, in the credit's units (nats for 'logprob', "
        "accuracy for 'genacc': e.g. 0.25 to sharpen a -1 / 0 / +1 gain): the reader's target over a question's pages "
        "is softmax(gain / temperature).")
    positive_gain: float = Field(
        0.5, description="A page whose credit is at least this much (nats for 'logprob', accuracy for 'genacc': 0.5 "
        "= the page turns a wrong answer right) counts as helping, for the ranker's labels.")
    reader_base: str = Field("smollm2-135m-instruct", description="The reader's base model (offline name or HF dir).")
    lora_r: int = Field(16, ge=1, description="The reader's LoRA rank.")
    lora_alpha: int = Field(32, ge=1, description="The reader's LoRA alpha.")
    learning_rate: float = Field(2e-4, gt=0, description="The reader's learning rate (AdamW).")
    epochs: int = Field(1, ge=1, description="Passes over the scored questions.")
    batch_questions: int = Field(4, ge=1, description="Questions per optimizer step.")
    max_pages: int = Field(2, ge=0, le=4, description="The most pages the searcher may add (0..max_pages is chosen "
                           "on the held-out questions).")
    threads: int | None = Field(None, ge=1, description="CPU threads of the scorer and the reader (None = by load).")


class TrainingRecovery(Section):
    """[training.recovery]: the run heals itself (training/run/recovery.py): a trigger rolls the run back to its last
    good checkpoint, changes what addresses the cause, and goes on; at most max_rollbacks times, then it stops."""

    enabled: bool = Field(True, description="Roll back on a trigger (false: the triggers only log, as before).")
    max_rollbacks: int = Field(3, ge=0, description="Rollbacks a run may make; one more trigger stops it (exit 4).")
    collapse: bool = Field(True, description="Trigger on training/run/collapse.py's kinds (stopped searching, "
                           "invalid actions climbing).")
    collapse_window: int = Field(5, ge=2, description="RL steps the collapse signals are smoothed over (2 windows "
                                 "of history before it can fire).")
    nonfinite: bool = Field(True, description="Trigger on a NaN / inf loss or gradient norm.")
    spike_k: float = Field(10.0, gt=0, description="A loss or gradient norm above median + spike_k x MAD (scaled to "
                           "a standard deviation) of the trailing spike_window RL steps is a spike.")
    spike_window: int = Field(20, ge=4, description="Trailing RL steps the spike test's median and MAD are taken "
                              "over (at least spike_window / 2 of them before it can fire).")
    kl_max: float | None = Field(1.0, gt=0, description="Trigger when losses/kl (k3 estimate of KL to the reference, "
                                 "per policy token) exceeds this (the healthy committed runs stay under 0.3); None = off.")
    heldout_z: float | None = Field(2.0, gt=0, description="Trigger when the held-out reward falls below the run's "
                                    "best by more than heldout_z standard errors of the paired per-question "
                                    "difference (and by at least heldout_min_drop); None = off.")
    heldout_min_drop: float = Field(0.02, ge=0, description="The smallest held-out drop that can trigger.")
    lr_factor: float = Field(0.5, gt=0, le=1, description="A rollback multiplies the learning rate by this (the "
                             "causes that call for it: training/run/recovery.py).")
    kl_factor: float = Field(2.0, ge=1, description="A rollback for a collapse or a KL excursion multiplies "
                             "training.update.kl_coef by this.")
    skip: bool = Field(True, description="A rollback skips the batches from its checkpoint to the trigger (PaLM's "
                       "loss-spike recipe): the next step draws the batch after the trigger's.")


class TrainingConfig(Section):
    backend: Literal["local", "ray"] = Field(
        "local",
        description="Where rollouts and rewards run: in this process ('local'), or on Ray actors ([ray]: rollout workers "
        "with their own engine, reward workers with the generator); the update, the checkpoints and the data order "
        "stay here either way.",
    )
    mode: Literal["s3", "search_r1"] = Field("s3", description="'s3' trains a searcher with a frozen generator; 'search_r1' end to end.")
    algorithm: Literal["grpo", "ppo"] = Field("grpo", description="Policy-gradient algorithm.")
    reward: str = Field(
        "gbr", description="Reward function, a name of training/rewards.py's REGISTRY: "
        + " ".join(f"'{s.name}': {s.description}" for s in REGISTRY.values())
    )
    confidence_beta: float = Field(0.4, ge=0, le=1, description="Search Wisely's beta for the confidence-gated reward.")
    retrieval_cost: float = Field(
        0.25, ge=0, description="reward = 'retrieval_gain': the cost of each non-gold paragraph the searcher adds to naive "
        "RAG's top-k (a gold one earns 1).")
    invalid_penalty: float = Field(
        0.0,
        ge=0,
        description="Format term on top of the reward: minus this x the fraction of a rollout's turns whose action was "
        "invalid (no <query> and no <search_complete>, an empty query, ...). 0 = the s3 paper (no format term); a small "
        "searcher may then drift into select-only replies at no cost (docs/transfer.md).",
    )
    format_advantage: Literal["centred", "normalised"] = Field(
        "centred",
        description="How GRPO weighs the format term (invalid_penalty). 'centred': the task reward is group-normalised "
        "alone and the format term is only centred on its group's mean, so it moves an advantage by at most "
        "invalid_penalty and a group whose task rewards are all equal gets small advantages (training/learn/advantages.py "
        "group_advantages_format_centred). 'normalised': the format term is part of the reward the group normalises "
        "(attempts 1-2 of docs/transfer.md): a format-only difference then gets a full-size advantage. Either way the "
        "groups whose task rewards are all equal but whose rewards differ are counted (reward/format_only_groups).",
    )
    base_model: str = Field("smollm2-135m", description="Trainable policy: an offline model name or a HF model dir.")
    output_dir: str = Field("runs/train", description="Run directory: checkpoints, metrics.jsonl, TensorBoard, plots.")
    total_steps: int = Field(20, ge=1, description="Optimizer steps (the warm-up steps included).")
    seed: int = Field(0, description="Seeds the data order (a pure function of seed and step: a resumed run sees the "
                      "same batches), the rollout sampling and the LoRA / critic initialisation.")
    budget_usd: float | None = Field(
        None, ge=0,
        description="Cap in dollars on what the run (all its invocations) spends on paid reward calls (the frozen "
        "generator and the judge; same as `s3 train --max-cost-usd`). Before each step its calls are projected "
        "(prompts measured, completions at max_tokens); a step that could pass the cap is not started: the run stops "
        "with the previous step's checkpoint, exit status 3 and 'budget reached', and resumes with a higher cap. A "
        "model of unknown price is refused (set its input_cost_per_mtok / output_cost_per_mtok). None = no cap.",
    )
    data: TrainingData = Field(default_factory=TrainingData)
    heldout: TrainingHeldout = Field(default_factory=TrainingHeldout)
    rollout: TrainingRollout = Field(default_factory=TrainingRollout)
    update: TrainingUpdate = Field(default_factory=TrainingUpdate)
    sft: TrainingSft = Field(default_factory=TrainingSft)
    learner: TrainingLearner = Field(default_factory=TrainingLearner)
    checkpoint: TrainingCheckpoint = Field(default_factory=TrainingCheckpoint)
    recovery: TrainingRecovery = Field(default_factory=TrainingRecovery)
    reading: TrainingReading = Field(default_factory=TrainingReading)

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: object) -> object:
        if isinstance(data, dict):
            old = [k for k in data if k in MOVED_KEYS]
            if old:
                raise ValueError("; ".join(f"training.{k} is now {MOVED_KEYS[k]}" for k in old)
                                 + " (the [training] settings moved into sub-tables: docs/configuration.md)")
        return data

    @field_validator("reward")
    @classmethod
    def _known_reward(cls, name: str) -> str:
        reward_spec(name)  # the registry as it is now: a ValueError naming its rewards
        return name

    @model_validator(mode="after")
    def _check(self) -> TrainingConfig:
        reward = reward_spec(self.reward)
        if self.algorithm == "grpo" and self.rollout.group_size < 2:
            raise ValueError("GRPO needs training.rollout.group_size >= 2 (the group is its baseline); set it or use ppo")
        if self.heldout.every and not self.heldout.questions:
            raise ValueError("training.heldout.every needs training.heldout.questions > 0 (the questions it evaluates)")
        if self.learner.dtype == "bfloat16" and not self.learner.lora:
            raise ValueError(
                "training.learner.dtype = 'bfloat16' with full fine-tuning (training.learner.lora = false) would let "
                "AdamW update bf16 weights in place: most of each update rounds away (at lr 1e-6, 2% of the weights "
                "moved in three steps). Use training.learner.dtype = 'float32' with training.learner.autocast = 'bf16' "
                "(float32 master weights, bf16 compute: 16 bytes a parameter), or training.learner.lora = true (bf16 "
                "base weights are fine when only the float32 adapters train)")
        if self.rollout.max_staleness and reward.query_logprobs and self.rollout.engine == "vllm":
            raise ValueError(f"training.reward = {self.reward!r} on vLLM rollouts needs the learner's log-probs of "
                             "each rollout before it is scored, at the weights it was rolled out with: set "
                             "training.rollout.max_staleness = 0 (or the transformers engine)")
        if self.update.turn_credit and (self.algorithm != "grpo" or self.mode != "s3"):
            raise ValueError("training.update.turn_credit credits the s3 searcher's selections on GRPO's advantages: it "
                             f"needs training.algorithm = 'grpo' and mode = 's3' (got {self.algorithm!r}, {self.mode!r})")
        if self.mode == "search_r1" and "search_r1" not in reward.modes:
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
    @property
    def explicit_keys(self) -> frozenset[str]:
        """Dotted keys set on purpose (a --config file, --set): a trained policy's recorded loop gives way to them."""
        ...
