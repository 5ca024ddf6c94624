"""The learner: the policy being trained, its PPO critic, its reference policy, optimizer and scheduler, and the one
masked PPO / GRPO update (training/learn/algorithms.py's losses) that every learner runs.

    learner = Learner(cfg.training, device, run_dir, resume_dir)        # the trainer's with ray.learners = 1
    report = learner.update(rows)                                       # training/learn/api.py's UpdateRows
    out = learner.update_shard(micro_batches, weights)                  # weights_j = tokens_j / T: the global token mean
    state = learner.save(checkpoint_dir)                                # policy/ (+ adapter/); optimizer, scheduler, critic

`Learner` implements the loop's learner interface (training/learn/api.py `PolicyLearner`), as the Ray LearnerGroup
does. With ray.learners = N > 1 each rank of a LearnerGroup (training/learn/learner_group.py) holds one `Learner`, built
from the same configuration and checkpoint, and runs the same `update_shard` on its share of the micro-batches with
weights N * tokens_j / T and `reduce_grads` = the all-reduce (mean) of the gradients over the ranks: the averaged
gradient is the single learner's, so the loss code is this file's `masked_update` either way (no second copy).

The learner owns its state and both of its update paths: `update` (RL) and `sft_update` (the format warm-up), and
`end_warmup` (RL's reference becomes the warmed policy). The trainer (training/run/trainer.py) keeps what is not the
learner's: the data order, the rollouts and rewards (through its executor), the rows of an update (their advantages:
advantages.py), the metrics and the checkpoint's trainer_state.pt (it stores the state `save` returns, in the single
learner's format). training/learn/api.py `pad_rollouts` turns rollouts into the `Batch`es both read.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from s3core.errors import S3Error
from training.config import TrainingConfig
from training.learn.api import Batch, MicroBatch, UpdateReport, UpdateRows

__all__ = ["GapSums", "Learner", "UpdateCore", "UpdateOut", "checkpointing", "checkpointing_for", "decoder_and_head",
           "export_model", "forward_logprobs", "load_policy", "load_tokenizer", "masked_update", "ref_logprobs",
           "right_padded", "set_attention", "set_checkpointing"]


@dataclass
class GapSums:
    """|learner - rollout engine| log-prob over the policy tokens of an update: sum, token count, max (ranks add up)."""

    total: float = 0.0
    tokens: float = 0.0
    max: float = 0.0

    def add(self, other: GapSums) -> GapSums:
        return GapSums(self.total + other.total, self.tokens + other.tokens, max(self.max, other.max))

    def stats(self) -> dict[str, float]:
        if self.tokens == 0:
            return {}
        return {"rollout/logprob_gap_mean_abs": self.total / self.tokens, "rollout/logprob_gap_max": self.max}


@dataclass
class UpdateOut:
    """One learner's (one rank's) update: the weighted loss stats (losses/...) and its log-prob gap sums."""

    stats: dict[str, float] = field(default_factory=dict)
    gaps: GapSums = field(default_factory=GapSums)


# ---------------------------------------------------------------------------------------------------- forward passes
def autocast(mode: str, model: Any) -> Any:
    """torch.autocast on the model's device for training.learner.autocast = 'bf16', else a no-op context."""
    import torch

    if mode == "off":
        return contextlib.nullcontext()
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=torch.bfloat16)


def decoder_and_head(model: Any) -> tuple[Any, Callable[[Any], Any]]:
    """The causal LM's decoder (hidden states, final norm included) and its vocabulary head as a function of hidden
    states — for a plain transformers model or a peft wrapper (the LoRA layers live inside both). Gemma-style final
    logit soft-capping is applied by the head as the model's own forward would."""
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, lm_head = base.get_decoder(), base.get_output_embeddings()
    if decoder is None or lm_head is None:
        raise S3Error(f"{type(base).__name__}: the learner needs a causal LM with a decoder and an output head")
    cap = getattr(base.config, "final_logit_softcapping", None)
    scale = getattr(base.config, "logit_scale", None)

    def head(h: Any) -> Any:
        logits = lm_head(h)
        if scale is not None:
            logits = logits * scale
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    return decoder, head


def right_padded(attention: Any) -> bool:
    """Whether every row of an attention mask (B, L) is ones, then zeros (pad_rollouts' padding)."""
    return bool((attention[:, 1:] <= attention[:, :-1]).all())


def checkpointing(model: Any) -> bool:
    """Whether the model's decoder layers recompute their activations in this (training) forward."""
    return bool(model.training and any(getattr(m, "gradient_checkpointing", False) for m in model.modules()))


def set_checkpointing(model: Any, on: bool) -> None:
    """Turn the decoder layers' gradient checkpointing on or off for the next forward (a flag on each layer: cheap
    enough to set per micro-batch). The first time it is turned on, transformers sets the layers up
    (`gradient_checkpointing_enable`, non-reentrant)."""
    if on and not getattr(model, "_s3_checkpointing_ready", False):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model._s3_checkpointing_ready = True
    for m in model.modules():
        if isinstance(getattr(m, "gradient_checkpointing", None), bool):
            m.gradient_checkpointing = on


def checkpointing_for(tc: TrainingConfig, model: Any, batch: Batch) -> bool:
    """Whether micro-batch `batch` is computed with gradient checkpointing: training.learner.gradient_checkpointing,
    and for 'auto' the memory rule of training/learn/memory.py `auto_checkpointing` (its activations without
    checkpointing against those of a checkpointed micro-batch of max_tokens_per_micro_batch tokens)."""
    mode = tc.learner.gradient_checkpointing
    if mode != "auto":
        return bool(mode)
    from training.learn.memory import ModelShape, auto_checkpointing

    rows, length = (int(n) for n in batch.ids.shape)
    return auto_checkpointing(ModelShape.of_config(model.config), tc, rows=rows, length=length,
                              prefix=batch.prefix > 0)


def forward_logprobs(tc: TrainingConfig, model: Any, batch: Batch, want_hidden: bool = False) -> tuple[Any, Any]:
    """Token logprobs (B, T') at the sampling temperature for positions batch.start .. L-2 (the response part),
    computed only where batch.loss_mask is 1 (the policy's tokens; 0 elsewhere), `training.learner.logprob_chunk` positions
    at a time (training/learn/algorithms.py `masked_logprobs`: no (B, T', V) logits), and the last hidden states (B, T', H)
    if asked (PPO's critic).

    A right-padded batch without a shared prefix runs with no attention mask: under the causal mask a real token
    attends only to the positions before it, which are all real (the pads come after them), so its output is the
    same, and SDPA gets its fused causal kernel instead of a (B, 1, L, L) mask kept in every layer for the backward
    pass. The pads' own outputs change, but they are never read (every loss and log-prob is masked). A micro-batch
    computed with gradient checkpointing ignores the shared prefix (its KV cache cannot be recomputed)."""
    from searcher.policy.prefix_kv import cache_arg, expand, prefix_cache
    from training.learn.algorithms import masked_logprobs

    decoder, head = decoder_and_head(model)
    P = 0 if checkpointing(model) else batch.prefix
    with autocast(tc.learner.autocast, model):
        if P:
            # the shared prefix once (batch 1, differentiated once), every row's remainder on top of its KV cache
            cache = expand(prefix_cache(model, batch.ids[0, :P].tolist()), batch.ids.shape[0], copy_first=False)
            out = decoder(input_ids=batch.ids[:, P:], attention_mask=batch.attention, use_cache=True,
                          **{cache_arg(model): cache})
        else:
            mask = None if right_padded(batch.attention) else batch.attention
            out = decoder(input_ids=batch.ids, attention_mask=mask, use_cache=False)
        hidden = out.last_hidden_state[:, batch.start - P : -1, :]  # (B, T', H): position t predicts ids[:, t+1]
        lp = masked_logprobs(hidden, head, batch.ids[:, batch.start + 1 :], batch.loss_mask,
                             temperature=tc.rollout.temperature or 1.0, chunk=tc.learner.logprob_chunk)  # (B, T')
    return lp, hidden if want_hidden else None


class UpdateCore(Protocol):
    """What the update reads and steps: a Learner (or a benchmark's bare model and optimizer)."""

    tc: TrainingConfig
    model: Any
    value_head: Any
    ref_model: Any
    optimizer: Any


def ref_logprobs(core: UpdateCore, batch: Batch) -> Any:
    """The frozen reference policy's log-probs of `batch` (None without a KL term); LoRA: the adapters disabled."""
    import torch

    if core.ref_model is None:
        return None
    with torch.no_grad():
        if isinstance(core.ref_model, str) and core.ref_model == "adapter-disabled":
            with core.model.disable_adapter():
                return forward_logprobs(core.tc, core.model, batch)[0]
        return forward_logprobs(core.tc, core.ref_model, batch)[0]


# ---------------------------------------------------------------------------------------------------- the update
def masked_update(core: UpdateCore, mbs: list[MicroBatch], weights: list[float],
                  reduce_grads: Callable[[list[Any]], None] | None = None) -> UpdateOut:
    """One masked policy-gradient update (training.update.ppo_epochs epochs) of `core` (anything with tc, model, value_head,
    ref_model, optimizer: a Learner, or a benchmark's bare model and optimizer) from its micro-batches: sum_j loss_j * weights[j] is backpropagated,
    then `reduce_grads(params)` (a LearnerGroup rank's all-reduce; None for the single learner), clipping, the step.
    The stats are weighted by `weights` too (so a group's mean over ranks is the single learner's). A micro-batch of
    weight 0 (a rank without rows joining the all-reduce) adds nothing: no gradient, no stat, no log-prob gap."""
    import torch

    from training.learn import algorithms as alg
    from training.learn.advantages import token_advantages

    tc = core.tc
    ppo = tc.algorithm == "ppo"
    core.model.train()
    # the no-grad passes (reference, old log-probs) recompute nothing: no checkpointing there, so they keep the shared
    # prefix and compute exactly as an unchecked first epoch's forward does (set per micro-batch below)
    set_checkpointing(core.model, False)
    refs = [ref_logprobs(core, mb.batch) for mb in mbs]
    old: list[Any] = [None] * len(mbs)
    old_values: list[Any] = [None] * len(mbs)
    if tc.update.ppo_epochs > 1 or ppo:
        with torch.no_grad():
            for j, mb in enumerate(mbs):
                lp, hid = forward_logprobs(tc, core.model, mb.batch, want_hidden=ppo)
                old[j] = lp
                if core.value_head is not None:
                    old_values[j] = core.value_head(hid.float()).squeeze(-1)  # (B, T)
    # Asynchronous RL (training.rollout.max_staleness > 0): the decoupled PPO objective (AReaL). The clipped ratio is
    # pi_theta / pi_prox, pi_prox = old_lp below (the learner's own log-probs before this update), and each policy
    # token's surrogate is multiplied by the detached behaviour weight min(pi_prox / pi_behaviour, is_cap), pi_behaviour
    # = the rollout's log-probs (Batch.rollout_lp: the weights up to s updates old that sampled it). Token-level weights
    # (algorithms.behaviour_weight says why). The KL-to-reference term is NOT weighted: it is a penalty on pi_theta's
    # own distance from pi_ref, not an estimate of the return under the behaviour policy; the k3 estimate at tokens
    # drawn from a slightly older policy is biased by O(staleness) at a coefficient of 0.001, while weighting it would
    # add the weights' variance to the one term meant to stabilise the update (verl's rollout correction and TIS
    # likewise weight only the policy-gradient loss; AReaL puts its KL in the reward, before any weighting).
    # Synchronous (s = 0) or offpolicy = "none": no weight at all, the loss and stats as before, bit for bit.
    decoupled = tc.rollout.max_staleness > 0 and tc.update.offpolicy == "decoupled"
    acc: dict[str, float] = {}
    gaps = GapSums()
    params = [q for g in core.optimizer.param_groups for q in g["params"]]
    for epoch in range(tc.update.ppo_epochs):
        core.optimizer.zero_grad(set_to_none=True)
        for j, (mb, weight) in enumerate(zip(mbs, weights, strict=True)):
            p = mb.batch
            set_checkpointing(core.model, checkpointing_for(tc, core.model, p))
            lp, hid = forward_logprobs(tc, core.model, p, want_hidden=ppo)
            # the ratio's old log-probs: the learner's own recomputation, never the rollout engine's
            old_lp = old[j] if old[j] is not None else lp.detach()
            if epoch == 0 and weight != 0:
                gap = ((old_lp - p.rollout_lp).abs() * p.loss_mask).detach()
                gaps = gaps.add(GapSums(float(gap.sum()), float(p.loss_mask.sum()), float(gap.max())))
            w, w_stats = None, {}
            if decoupled:
                w, cut = alg.behaviour_weight(old_lp, p.rollout_lp, tc.update.is_cap)  # (B, T) each
                w_stats = {"losses/is_weight_mean": alg.masked_mean(w, p.loss_mask),
                           "losses/is_clipfrac": alg.masked_mean(cut.to(w.dtype), p.loss_mask)}
            if not ppo:
                assert mb.adv is not None
                adv = torch.tensor(mb.adv, dtype=lp.dtype, device=lp.device)  # (B,)
                if mb.turn_adv is not None:  # training.update.turn_credit: each reply's own credit on its tokens
                    adv = adv.unsqueeze(1) + mb.turn_adv.to(device=lp.device, dtype=lp.dtype)  # (B, T)
                out = alg.grpo_loss(lp, old_lp, refs[j], adv, p.loss_mask, tc.update.clip_coef, tc.update.kl_coef,
                                    is_weight=w)
                parts = {"losses/policy": out.pg_loss, "losses/kl": out.kl, "losses/total": out.loss,
                         "losses/clipfrac": out.clipfrac, "losses/approx_kl": out.approx_kl}
            else:
                assert core.value_head is not None and mb.rewards is not None
                values = core.value_head(hid.detach().float()).squeeze(-1)  # (B, T)
                r_seq = torch.tensor(mb.rewards, dtype=values.dtype, device=values.device)  # (B,)
                adv_t, ret = token_advantages(tc, r_seq, old_values[j], p.loss_mask)  # (B, T) each: GAE
                pout = alg.ppo_loss(lp, old_lp, refs[j], adv_t, values, old_values[j], ret, p.loss_mask,
                                    tc.update.clip_coef, tc.update.value_clip_coef, tc.update.kl_coef, tc.update.vf_coef,
                                    is_weight=w)
                out = pout  # type: ignore[assignment]
                parts = {"losses/policy": pout.pg_loss, "losses/kl": pout.kl, "losses/value": pout.value_loss,
                         "losses/total": pout.loss, "losses/clipfrac": pout.clipfrac, "losses/approx_kl": pout.approx_kl}
            (out.loss * weight).backward()
            for k, v in {**parts, **w_stats}.items():
                acc[k] = acc.get(k, 0.0) + float(v.detach()) * weight
        if reduce_grads is not None:
            reduce_grads(params)
        gn = torch.nn.utils.clip_grad_norm_(params, tc.update.max_grad_norm)
        acc["losses/grad_norm"] = float(gn)
        core.optimizer.step()
    return UpdateOut(stats=acc, gaps=gaps)


# ---------------------------------------------------------------------------------------------------- building
def load_policy(tc: TrainingConfig, device: str, resume_dir: Path | None) -> tuple[Any, Any, Any]:
    """The transformers policy (trainable): (policy, model, tokenizer). Full fine-tuning resumes from the checkpoint's
    policy/ dir; LoRA loads the base model and the checkpoint's adapter. A base_model that is itself a LoRA adapter (a
    trained searcher, e.g. searcher/policies/smollm2-135m-hotpotqa) is merged into its own base first: RL starts from
    that policy, and a fresh LoRA trains on top of it (unmerged, its frozen adapter would take the new one's place)."""
    from searcher.policy.transformers_policy import TransformersPolicy

    source = tc.base_model
    if resume_dir is not None and not tc.learner.lora:
        source = str(resume_dir / "policy")
    policy = TransformersPolicy.load(source, device=device, dtype=tc.learner.dtype, merge_adapter=True)
    if not tc.learner.lora:
        policy.model.requires_grad_(True)  # a merged adapter's base comes back frozen (peft froze it)
    if tc.learner.lora:
        if resume_dir is not None:
            from peft import PeftModel

            policy.model = PeftModel.from_pretrained(policy.model, str(resume_dir / "adapter"), is_trainable=True)
        else:
            policy.enable_lora(r=tc.learner.lora_r, alpha=tc.learner.lora_alpha)
    model = policy.model
    set_attention(model, tc.learner.attn_implementation)
    if tc.learner.gradient_checkpointing is True:
        set_checkpointing(model, True)
        if tc.learner.lora and hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    return policy, model, policy.tokenizer


def set_attention(model: Any, impl: str) -> None:
    """training.learner.attn_implementation on a loaded model ('auto': the model's own choice, left as it is)."""
    if impl == "auto":
        return
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base.set_attn_implementation(impl)


def load_tokenizer(tc: TrainingConfig, resume_dir: Path | None) -> Any:
    """The policy's tokenizer alone (the driver of a LearnerGroup pads rollouts; the ranks hold the model), with the
    pad token the transformers policy gives it (eos when it has none)."""
    from transformers import AutoTokenizer

    from searcher.policy.transformers_policy import resolve_checkpoint

    where = resolve_checkpoint(str(resume_dir / "policy") if resume_dir is not None else tc.base_model)
    if isinstance(where, Path) and not (where / "tokenizer_config.json").is_file() and (where / "adapter_config.json").is_file():
        where = resolve_checkpoint(str(json.loads((where / "adapter_config.json").read_text())["base_model_name_or_path"]))
    tok = AutoTokenizer.from_pretrained(str(where))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def reference_model(tc: TrainingConfig, device: str, run_dir: Path) -> Any:
    """The frozen reference policy pi_ref = the policy RL starts from: training.base_model, or after a format
    warm-up the warmed policy (RUN_DIR/reference, written when the warm-up ends), loaded from disk so a resumed
    run keeps the same reference. Full fine-tuning: RUN_DIR/reference is a plain HF dir. LoRA: it is the warmed
    adapter alone (a few MB), merged into a frozen copy of the base (with training.learner.dtype = bfloat16 the merge
    rounds: the first RL step's KL is then ~0, not exactly 0); before the warm-up ends (or without one) the
    reference is the policy's own model with its adapters disabled (the base model: no copy)."""
    if tc.update.kl_coef == 0:
        return None
    from searcher.policy.transformers_policy import TransformersPolicy

    warmed = run_dir / "reference"
    if tc.learner.lora:
        if not (warmed / "adapter_config.json").is_file():
            return "adapter-disabled"
        ref = TransformersPolicy.load(str(warmed), device=device, dtype=tc.learner.dtype).model.merge_and_unload()
    else:
        source = str(warmed) if (warmed / "config.json").is_file() else tc.base_model
        ref = TransformersPolicy.load(source, device=device, dtype=tc.learner.dtype, merge_adapter=True).model
    set_attention(ref, tc.learner.attn_implementation)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


def value_head(tc: TrainingConfig, model: Any, device: str) -> Any:
    """PPO's critic: a zero-initialised linear value head on the policy's last hidden states (None for GRPO)."""
    import torch

    if tc.algorithm != "ppo":
        return None
    head = torch.nn.Linear(int(model.config.hidden_size), 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return head.to(device)


def optimizer_and_scheduler(tc: TrainingConfig, model: Any, head: Any) -> tuple[Any, Any]:
    """AdamW over the trainable policy weights (training.update.learning_rate) and the critic (critic_learning_rate), and the
    linear learning-rate warm-up (training.update.warmup_steps)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    groups: list[dict[str, Any]] = [{"params": params, "lr": tc.update.learning_rate}]
    if head is not None:
        groups.append({"params": list(head.parameters()), "lr": tc.update.critic_learning_rate})
    optimizer = torch.optim.AdamW(groups, weight_decay=0.0)
    warm = tc.update.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm) if warm > 0 else 1.0)
    return optimizer, scheduler


def export_model(model: Any, tokenizer: Any, out: Path, lora: bool) -> None:
    """Save `model` as a plain HF dir (merging LoRA adapters into a copy when present)."""
    import copy

    out.mkdir(parents=True, exist_ok=True)
    m = model
    if lora and hasattr(model, "merge_and_unload"):
        m = copy.deepcopy(model).merge_and_unload()
    m.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))


class Learner:
    """One learner: the policy (transformers), PPO's critic, the reference policy, the optimizer and the scheduler,
    built from [training] (and a checkpoint to resume from). The single learner of S3Trainer, or one rank of a
    LearnerGroup (every rank builds the same one; rank 0's parameters are broadcast when the group forms)."""

    def __init__(self, tc: TrainingConfig, device: str, run_dir: Path, resume_dir: Path | None = None) -> None:
        self.tc, self.device, self.run_dir = tc, device, Path(run_dir)
        if device == "cpu":
            # glibc's mmap threshold held fixed before the model loads: an update's freed activations and gradients
            # go back to the system instead of staying in the heap (one update of SmolLM2-135M on 2,048 tokens
            # peaked at 4.29 GB RSS without it, 3.64 GB with it; benchmarks/results/learner_memory)
            from s3core.devices import steady_malloc

            steady_malloc()
        self.policy, self.model, self.tokenizer = load_policy(tc, device, resume_dir)
        self.value_head = value_head(tc, self.model, device)
        self.ref_model = reference_model(tc, device, self.run_dir)
        self.optimizer, self.scheduler = optimizer_and_scheduler(tc, self.model, self.value_head)

    # -------------------------------------------------------------- the update
    @property
    def batch_device(self) -> str:
        """The loop pads batches on this learner's own device."""
        return self.device

    def update(self, rows: UpdateRows) -> UpdateReport:
        """One update from the loop's rows: micro-batches of at most training.learner.micro_batch_size rows and
        max_tokens_per_micro_batch padded tokens (`UpdateRows.chunks`), each weighted by its share of the batch's
        policy tokens (the global token mean: the same loss and gradients whatever the cut)."""
        mbs = [rows.micro(c) for c in rows.chunks()]
        total = float(sum(mb.batch.loss_mask.sum().item() for mb in mbs))
        out = self.update_shard(mbs, [mb.batch.loss_mask.sum().item() / max(total, 1.0) for mb in mbs])
        return UpdateReport(stats={**out.stats, **out.gaps.stats()}, tokens=total, batches=[mb.batch for mb in mbs])

    def update_shard(self, mbs: list[MicroBatch], weights: list[float],
                     reduce_grads: Callable[[list[Any]], None] | None = None) -> UpdateOut:
        """The update of weighted micro-batches (a LearnerGroup rank's share, with its gradient all-reduce)."""
        mbs = [replace(mb, batch=mb.batch.to(self.device)) for mb in mbs]
        return masked_update(self, mbs, weights, reduce_grads)

    def sft_update(self, batches: list[Batch]) -> dict[str, float]:
        """One supervised step (the format warm-up, [training.sft]): the token-weighted masked NLL of the batches'
        policy tokens (prompts and retrieved windows masked out exactly as in RL), clipped, one optimizer step at
        training.sft.learning_rate (its RL learning rate restored after the step; the scheduler does not advance).
        RL does not inherit these AdamW moments: end_warmup starts it from a fresh optimizer and scheduler."""
        import torch

        from training.learn.algorithms import masked_mean

        batches = [b.to(self.device) for b in batches]
        total = float(sum(b.loss_mask.sum().item() for b in batches))
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        nll = 0.0
        for b in batches:
            weight = b.loss_mask.sum().item() / max(total, 1.0)
            set_checkpointing(self.model, checkpointing_for(self.tc, self.model, b))
            loss = -masked_mean(forward_logprobs(self.tc, self.model, b)[0], b.loss_mask)
            (loss * weight).backward()
            nll += float(loss.detach()) * weight
        gn = torch.nn.utils.clip_grad_norm_(self.parameters(), self.tc.update.max_grad_norm)
        group = self.optimizer.param_groups[0]
        rl_lr, group["lr"] = group["lr"], self.tc.sft.learning_rate
        try:
            self.optimizer.step()
        finally:
            group["lr"] = rl_lr
        return {"losses/sft_nll": nll, "losses/grad_norm": float(gn), "charts/policy_tokens": total}

    def logprobs(self, batch: Batch) -> Any:
        """The policy's token log-probs of `batch` (no gradient): what the confidence-gated reward compares with the
        rollout engine's."""
        import torch

        self.model.eval()
        with torch.no_grad():
            return forward_logprobs(self.tc, self.model, batch.to(self.device))[0]

    def step_scheduler(self) -> float:
        """The scheduler's step after an update; the learning rate it sets. A step whose update had no row (every
        group flat) steps it too, without an optimizer step: torch warns of that when the scheduler is fresh (a run's
        first step, the start after a rollback), which is what the loop means here."""
        import warnings

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
            self.scheduler.step()
        return self.learning_rate()

    def learning_rate(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def parameters(self) -> list[Any]:
        """Every trainable tensor the optimizer steps (policy, then critic): what a group all-reduces and broadcasts."""
        return [q for g in self.optimizer.param_groups for q in g["params"]]

    # -------------------------------------------------------------- state and checkpoints
    def state(self) -> dict[str, Any]:
        """Optimizer, scheduler and critic state: the learner's part of trainer_state.pt."""
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "value_head": self.value_head.state_dict() if self.value_head is not None else None}

    def load_state(self, state: dict[str, Any]) -> None:
        """A checkpoint's optimizer, scheduler and critic state; an optimizer / scheduler of None keeps this learner's
        own fresh ones (the start after a rollback: training/run/recovery.py)."""
        if state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.value_head is not None and state.get("value_head") is not None:
            self.value_head.load_state_dict(state["value_head"])

    def save(self, out: str | Path) -> dict[str, Any]:
        """Write the checkpoint's model folders into `out`: policy/ (a plain HF dir, LoRA merged: what `s3 serve
        --policy` and vLLM load) and, for LoRA, adapter/; return `state()` for trainer_state.pt."""
        out = Path(out)
        export_model(self.model, self.tokenizer, out / "policy", lora=self.tc.learner.lora)
        if self.tc.learner.lora:
            self.save_adapter(out / "adapter")
        return self.state()

    def save_adapter(self, out: Path) -> None:
        """The LoRA adapter alone (a few MB): `s3 search --policy out` loads it on top of its base model, named as
        training.base_model was (an offline model name resolves on any machine; peft would write this machine's path
        of the converted model), so the folder is a complete policy to ship. A base_model that is a LoRA adapter is
        named too (its merged base is what this adapter was trained on; TransformersPolicy.load merges it first)."""
        self.model.save_pretrained(str(out))
        base = self.tc.base_model
        on_adapter = (Path(base).expanduser() / "adapter_config.json").is_file()  # trained on top of a LoRA searcher
        if on_adapter or not Path(base).expanduser().exists():
            cfg_path = out / "adapter_config.json"
            cfg = json.loads(cfg_path.read_text())
            cfg["base_model_name_or_path"] = base
            cfg_path.write_text(json.dumps(cfg, indent=2))
        self.tokenizer.save_pretrained(str(out))

    def end_warmup(self) -> Path | None:
        """The format warm-up is over: RL starts from a fresh optimizer and scheduler (the warm-up's AdamW moments
        would otherwise carry into RL: the first moment keeps imitating the oracle for the first RL steps, the second,
        sized by the supervised gradients, shrinks RL's effective learning rate; issue 45), and RL's reference policy
        becomes the current (warmed) policy. The reference is written to RUN_DIR/reference atomically (full fine-tuning:
        the model; LoRA: the adapter) and loaded back from there, so a resumed run gets exactly this reference (and,
        from a checkpoint after the warm-up, the RL optimizer state that checkpoint saved)."""
        self.optimizer, self.scheduler = optimizer_and_scheduler(self.tc, self.model, self.value_head)
        if self.ref_model is None:
            return None
        final, tmp = self.run_dir / "reference", self.run_dir / ".reference.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        if self.tc.learner.lora:
            self.save_adapter(tmp)
        else:
            export_model(self.model, self.tokenizer, tmp, lora=False)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        self.ref_model = None  # the old reference goes before the new one loads (never two copies at once)
        self.ref_model = reference_model(self.tc, self.device, self.run_dir)
        return final

    def close(self) -> None:
        """Nothing to stop: the learner lives in this process."""
        return None

    # -------------------------------------------------------------- weights out
    def weights(self) -> list[tuple[str, Any]]:
        """(checkpoint name, tensor), LoRA merged: what a rollout engine loads (training/learn/weight_sync.py)."""
        from training.learn.weight_sync import learner_weights

        return learner_weights(self.model)

    def state_dict(self) -> dict[str, Any]:
        """The policy's parameters (and the critic's, under value_head.*), detached CPU copies: what tests compare."""
        sd = {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}
        if self.value_head is not None:
            sd.update({f"value_head.{k}": v.detach().cpu().clone() for k, v in self.value_head.state_dict().items()})
        return sd
