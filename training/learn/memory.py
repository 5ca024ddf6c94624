"""What one training step's learner takes of the memory, estimated from the model's shape before anything is loaded,
and the check that refuses a run whose step would not fit (training.learner.memory_gb, else what is available).

    shape = ModelShape.of_model(tc.base_model)            # config.json alone: layers, hidden, heads, vocab, parameters
    est = estimate_step(shape, tc, tokens=4096, longest=4096, policy_tokens=640)
    est.total / GB, est.parts                             # bytes: weights, reference, gradients, optimizer, ...
    step = check_step_memory(cfg, device, log)            # the run's worst micro-batch; ConfigError when it cannot fit
    auto_checkpointing(shape, tc, rows=4, length=900, prefix=True)   # gradient_checkpointing = 'auto', per micro-batch

The estimate, in bytes (P parameters, P_t trainable: P for full fine-tuning, the adapters' for LoRA; w = 4 bytes a
weight in float32, 2 in bfloat16; a micro-batch of N tokens whose longest row has T tokens; L layers, H hidden units,
I the MLP's, A attention heads, V the vocabulary):

    base         BASE_BYTES                                  the process: Python, torch, transformers, the tokenizer
                                                             (CUDA_BASE_BYTES on a GPU: its context, the allocator)
    weights      P x w                                       the policy
    reference    P x w                                       with training.update.kl_coef > 0 under full fine-tuning
                                                             (LoRA: the base with its adapters off, no copy, until a
                                                             warm-up's reference is merged into one)
    gradients    P_t x 4
    optimizer    P_t x 8                                     AdamW's two moments (float32)
    activations  N x L x a,  a = 4 (ACT_H x H + ACT_I x I)   kept for the backward pass, every layer
              or N x L x H x 4  +  N x a                     with gradient checkpointing: each layer's input, and one
                                                             layer's activations while it is recomputed
                 x ACT_BF16 under training.learner.autocast = 'bf16'
    attention    N x T x A x 4 x EAGER_T2 (x L without checkpointing)    eager attention's probabilities; SDPA keeps
                                                             none (the learner drops the padding mask of a right-padded
                                                             batch, so SDPA runs its fused causal kernel); a shared
                                                             prefix's mask: N x T x MASK_BYTES per layer
    logits       min(logprob_chunk, policy tokens) x V x 4 x LOGIT_COPIES    the vocabulary projection's chunk, its
                                                             log-softmax and their gradients, live at the start of the
                                                             backward pass with every activation
    engine       the vLLM rollout engine: on the CPU its KV cache (searcher.vllm.kv_cache_gb, 2 GiB when unset) and
                 a copy of the weights; on a GPU searcher.vllm.memory_utilization of it

The activation constants come from the tensors autograd keeps (counted with torch.autograd.graph.saved_tensors_hooks
on SmolLM2-135M: 44,759 bytes a token a layer with SDPA = 4 x (8.76 H + 4 I), H = 576, I = 1,536; eager attention adds
1.1 probability tensors of A x T x T floats a layer); BASE_BYTES and the copies of the logits were fitted to the peak
RSS of one learner update measured in a fresh process (benchmarks/learner_memory.py, full fine-tuning and LoRA,
1,024-8,192 tokens, 1 and 4 rows, checkpointing on and off, SDPA and eager; benchmarks/results/learner_memory). Against
those rows (the code as it is now) the estimate of each row's own micro-batches is within ESTIMATE_ERROR
(tests/unit/test_learner_memory_bench.py); the check asks for MARGIN on top of its estimate, and under
gradient_checkpointing = 'auto' it prices the worst micro-batch 'auto' can let through uncheckpointed (the budget's
allowance) as well as the largest one, so it bounds every micro-batch of the run, not only the measured shapes.

The longest trajectory the searcher's settings allow (`longest_trajectory`): the prompt (PROMPT_TOKENS: the s3
instruction and the question) and naive RAG's top-k0 documents, then searcher.max_turns turns of a reply of
searcher.max_new_tokens and a window of searcher.k documents, each document searcher.doc_token_budget tokens of text
plus DOC_OVERHEAD (its title and tags; DOC_TOKENS when the budget is unset: the text is then whole, and a paragraph
of the HotpotQA / MuSiQue training corpora is ~110-140 tokens on average with SmolLM2's tokenizer, 90% of them under
~240, 99% under ~420); at most the vLLM engine's max_model_len.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from s3core.errors import ConfigError
from training.config import TrainingConfig, TrainSettings

__all__ = ["GB", "MARGIN", "ModelShape", "StepMemory", "auto_checkpointing", "available_bytes", "check_step_memory",
           "estimate_step", "layer_bytes", "longest_trajectory", "worst_micro_batch"]

GB = 1e9

# calibration (module docstring): activations from autograd's saved tensors, the rest fitted to measured peaks
ACT_H = 8.76  # floats a token a layer kept for backward, per hidden unit (norms, q / k / v / o, residuals)
ACT_I = 4.0  # per MLP unit (gate, up, their product, the activation)
ACT_BF16 = 0.6  # share of the activations' bytes left under bf16 autocast (norms and softmax statistics stay float32)
EAGER_T2 = 1.1  # eager attention: A x T x T float tensors kept a layer (the softmax's output, its dropout's)
EAGER_BWD = 1.0  # and in a layer's backward pass, the probabilities' gradient
MASK_BYTES = 10.0  # SDPA under an explicit mask (a shared prefix): bytes a (row, query, key) a layer
LOGIT_COPIES = 2.0  # the logits chunk and its log-softmax, or their gradients (recomputed in the backward pass)
RECOMPUTED = 2.0  # with checkpointing: one layer's activations while it is recomputed, and their gradients
NO_CKPT = 1.0  # without checkpointing: the saved tensors' share of what the backward pass holds at its peak
BASE_BYTES = 0.69 * GB  # the process besides the weights and optimizer: Python, torch, transformers, tokenizer, heap
CUDA_BASE_BYTES = 2.0 * GB  # on a GPU: the CUDA context and the caching allocator's slack (as s3/doctor.py counts them)
OPT_STEP_COPIES = 2.0  # AdamW's step and the clipping: temporaries of the largest trainable tensor's size
ESTIMATE_ERROR = 0.15  # the largest relative error against the measured rows (benchmarks/results/learner_memory)
MARGIN = 0.10  # the check's headroom on top of the estimate

PROMPT_TOKENS = 640  # the s3 instruction (~570 tokens with SmolLM2's template) and a question
DOC_OVERHEAD = 24  # a document's title and tags inside <information>
DOC_TOKENS = 256  # a document's text when searcher.doc_token_budget is unset
TURN_OVERHEAD = 24  # a turn's tags and chat template


@dataclass(frozen=True)
class ModelShape:
    """The shape of a decoder-only transformer, as its config.json gives it, and its parameter count."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool

    @classmethod
    def of_config(cls, c: Any) -> ModelShape:
        """From a transformers config (or anything with its attribute names)."""
        g = (lambda k, d=None: c.get(k, d)) if isinstance(c, dict) else (lambda k, d=None: getattr(c, k, d))
        hidden, heads = int(g("hidden_size")), int(g("num_attention_heads"))
        return cls(layers=int(g("num_hidden_layers")), hidden=hidden, heads=heads,
                   kv_heads=int(g("num_key_value_heads") or heads), head_dim=int(g("head_dim") or hidden // heads),
                   intermediate=int(g("intermediate_size") or 4 * hidden), vocab=int(g("vocab_size")),
                   tied=bool(g("tie_word_embeddings", False)))

    @classmethod
    def of_model(cls, spec: str) -> ModelShape:
        """The shape of training.base_model (an offline model name, a model or run folder, a LoRA adapter: its
        base's), from its config.json alone: no weight is read."""
        from searcher.policy.transformers_policy import resolve_checkpoint

        where = resolve_checkpoint(spec)
        for _ in range(4):  # an adapter names its base (which may itself be an adapter)
            if not isinstance(where, Path) or (where / "config.json").is_file():
                break
            base = json.loads((where / "adapter_config.json").read_text())["base_model_name_or_path"]
            where = resolve_checkpoint(str(base))
        if isinstance(where, Path):
            return cls.of_config(json.loads((where / "config.json").read_text()))
        from transformers import AutoConfig

        return cls.of_config(AutoConfig.from_pretrained(where))

    @property
    def params(self) -> int:
        """Parameters of a Llama-style decoder: embeddings (and an untied head), attention, gated MLP, norms."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        layer = h * q + 2 * h * kv + q * h + 3 * h * self.intermediate + 2 * h
        return self.vocab * h * (1 if self.tied else 2) + self.layers * layer + h

    def lora_params(self, r: int) -> int:
        """Trainable parameters of LoRA rank r on every linear layer of the decoder (peft's 'all-linear')."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        per_layer = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)
        return r * per_layer * self.layers


@dataclass
class StepMemory:
    """An estimate of one step's peak (bytes, by part) for its worst micro-batch: `tokens` padded tokens, the longest
    row `longest`, computed with gradient checkpointing or not."""

    parts: dict[str, float]
    tokens: int
    longest: int
    checkpointed: bool
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    def describe(self) -> str:
        """'3.61 GB (weights 0.54, reference 0.54, ...)'."""
        inner = ", ".join(f"{k} {v / GB:.2f}" for k, v in self.parts.items() if v)
        return f"{self.total / GB:.2f} GB ({inner})"


def layer_bytes(shape: ModelShape, tc: TrainingConfig) -> float:
    """Bytes a token a layer autograd keeps for the backward pass without checkpointing (SDPA attention)."""
    a = 4.0 * (ACT_H * shape.hidden + ACT_I * shape.intermediate)
    return a * (ACT_BF16 if tc.learner.autocast == "bf16" else 1.0)


def _eager(tc: TrainingConfig) -> bool:
    return tc.learner.attn_implementation == "eager"


def activation_bytes(shape: ModelShape, tc: TrainingConfig, *, tokens: int, longest: int, checkpointed: bool,
                     prefix: bool = False) -> float:
    """What a micro-batch of `tokens` padded tokens (its longest row `longest`) keeps for its backward pass."""
    a = layer_bytes(shape, tc)
    quad = tokens * longest  # sum over rows of T^2 (rows x T x T for a padded micro-batch)
    probs = quad * shape.heads * 4.0  # one layer's attention probabilities (eager)
    kept = probs * EAGER_T2 if _eager(tc) else (quad * MASK_BYTES if prefix else 0.0)  # a layer keeps
    bwd = probs * EAGER_BWD if _eager(tc) else 0.0  # and, in its backward pass, their gradient
    if checkpointed:  # each layer's input kept; one layer's activations (and attention) live while recomputed
        return tokens * shape.layers * shape.hidden * 4.0 + RECOMPUTED * tokens * a + kept + bwd
    return shape.layers * (NO_CKPT * tokens * a + kept) + bwd


def auto_checkpointing(shape: ModelShape, tc: TrainingConfig, *, rows: int, length: int, prefix: bool = False) -> bool:
    """gradient_checkpointing = 'auto' for a micro-batch of `rows` rows padded to `length` tokens: checkpointed when
    its activations without it would exceed those of a checkpointed micro-batch of the full token budget (one row of
    max_tokens_per_micro_batch tokens), so no micro-batch takes more than the budget allows; without a budget, never."""
    budget = tc.learner.max_tokens_per_micro_batch
    if budget is None:
        return False
    allowance = activation_bytes(shape, tc, tokens=budget, longest=budget, checkpointed=True)
    plain = activation_bytes(shape, tc, tokens=rows * length, longest=length, checkpointed=False, prefix=prefix)
    return plain > allowance


def worst_micro_batch(tc: TrainingConfig, longest: int) -> tuple[int, int]:
    """(padded tokens, longest row) of the largest micro-batch the learner may form when no row is longer than
    `longest` tokens: the token budget's (a row longer than it goes alone), else micro_batch_size rows."""
    lc = tc.learner
    if lc.max_tokens_per_micro_batch is None:
        return lc.micro_batch_size * longest, longest
    if longest >= lc.max_tokens_per_micro_batch:
        return longest, longest
    # shorter rows may fill the budget where rows of `longest` cannot: the budget's tokens, with `longest` as the
    # longest row, bounds every micro-batch (the attention's tokens x longest term included)
    return min(lc.max_tokens_per_micro_batch, lc.micro_batch_size * longest), longest


def estimate_step(shape: ModelShape, tc: TrainingConfig, *, tokens: int, longest: int, policy_tokens: int,
                  engine_bytes: float = 0.0, accumulating: bool = True, device: str = "cpu",
                  any_micro_batch: bool = True) -> StepMemory:
    """The peak of one update whose largest micro-batch holds `tokens` padded tokens (longest row `longest`),
    `policy_tokens` of them the policy's (the module docstring's formula). `accumulating`: the update has more than
    one micro-batch, so an earlier one's gradients are all there while this one's activations are (an update of one
    micro-batch builds its gradients up as it frees its activations: only the larger of the two counts).
    `any_micro_batch` (the check's bound): under gradient_checkpointing = 'auto' a smaller micro-batch may run
    uncheckpointed with activations up to the budget's allowance (`auto_checkpointing`), so the activations are at
    least that; False prices exactly the micro-batch given (the benchmark's rows)."""
    lc = tc.learner
    w = 2.0 if lc.dtype == "bfloat16" else 4.0
    trainable = shape.lora_params(lc.lora_r) if lc.lora else shape.params
    rows = max(1, tokens // max(longest, 1))
    if lc.gradient_checkpointing == "auto":
        ckpt = auto_checkpointing(shape, tc, rows=rows, length=longest, prefix=lc.share_prefix and rows > 1)
    else:
        ckpt = bool(lc.gradient_checkpointing)
    prefix = lc.share_prefix and rows > 1 and not ckpt
    reference = tc.update.kl_coef > 0 and (not lc.lora or tc.sft.steps > 0)
    act = activation_bytes(shape, tc, tokens=tokens, longest=longest, checkpointed=ckpt, prefix=prefix)
    budget = lc.max_tokens_per_micro_batch
    if any_micro_batch and lc.gradient_checkpointing == "auto" and budget is not None:
        act = max(act, activation_bytes(shape, tc, tokens=budget, longest=budget, checkpointed=True))
    logits = min(lc.logprob_chunk, max(policy_tokens, 1)) * shape.vocab * 4.0 * LOGIT_COPIES
    if not lc.lora:  # the trained head's weight gradient of a chunk, before it is added to the head's
        logits += shape.vocab * shape.hidden * 4.0
    grads = trainable * 4.0
    # AdamW's step (one tensor at a time) and the clipping: temporaries of the largest trainable tensor's size
    largest = shape.vocab * shape.hidden if not lc.lora else max(shape.hidden, shape.intermediate) * lc.lora_r
    step = grads + largest * 4.0 * OPT_STEP_COPIES
    # the backward pass: an earlier micro-batch's gradients under this one's activations and logits' chunk; one
    # micro-batch's own gradients build up as its activations are freed (the larger of the two)
    backward = grads + act + logits if accumulating else max(act + logits, grads)
    parts = {
        "base": BASE_BYTES if device == "cpu" else CUDA_BASE_BYTES,
        "weights": shape.params * w,
        "reference": shape.params * w if reference else 0.0,
        "gradients": grads,
        "optimizer": trainable * 8.0,
        "activations": max(backward, step) - grads,  # the backward pass's peak, or the optimizer step's
        "rollout engine": engine_bytes,
    }
    notes = [f"{'checkpointed' if ckpt else 'not checkpointed'} micro-batch of {tokens} tokens"]
    return StepMemory(parts=parts, tokens=tokens, longest=longest, checkpointed=ckpt, notes=notes)


def longest_trajectory(cfg: TrainSettings) -> tuple[int, str]:
    """The most tokens (prompt included) a rollout may hold under the searcher's settings, and how it was counted
    (the module docstring)."""
    s = cfg.searcher
    doc = (s.doc_token_budget if s.doc_token_budget is not None else DOC_TOKENS) + DOC_OVERHEAD
    k0 = cfg.retriever.k if s.begin_with_search else 0
    n = PROMPT_TOKENS + k0 * doc + (s.max_turns + 1) * (s.max_new_tokens + TURN_OVERHEAD) + s.max_turns * s.k * doc
    how = (f"prompt ~{PROMPT_TOKENS} + {k0} documents + {s.max_turns + 1} replies of searcher.max_new_tokens = "
           f"{s.max_new_tokens} + searcher.max_turns = {s.max_turns} windows of searcher.k = {s.k} documents of ~{doc} "
           f"tokens ({'searcher.doc_token_budget' if s.doc_token_budget is not None else 'searcher.doc_token_budget unset: ~' + str(DOC_TOKENS) + ' assumed'})")
    cap = s.vllm.max_model_len if cfg.training.rollout.engine == "vllm" else None
    if cap is not None and cap < n:
        return cap, f"searcher.vllm.max_model_len = {cap} (below {n}: {how})"
    return n, how


def most_policy_tokens(cfg: TrainSettings, rows: int) -> int:
    """The most policy-written tokens `rows` rollouts hold: each reply up to searcher.max_new_tokens."""
    return rows * (cfg.searcher.max_turns + 1) * cfg.searcher.max_new_tokens


def engine_bytes(cfg: TrainSettings, shape: ModelShape, device: str) -> float:
    """The vLLM rollout engine beside the learner (0 for the learner's own rollouts): on a GPU the share of its
    memory the engine takes (searcher.vllm.memory_utilization), on the CPU its KV cache and its weights."""
    if cfg.training.rollout.engine != "vllm":
        return 0.0
    v = cfg.searcher.vllm
    if device.startswith("cuda"):
        import torch

        return v.memory_utilization * float(torch.cuda.mem_get_info(torch.device(device))[1])
    kv = (v.kv_cache_gb if v.kv_cache_gb is not None else 2.0) * 2**30
    w = 2.0 if v.dtype in ("bfloat16", "float16") else 4.0
    return kv + shape.params * w


def available_bytes(device: str) -> tuple[float, str]:
    """What a run may use: the GPU's free memory on cuda, else the RAM available (MemAvailable) plus what this
    process already holds (its baseline is part of the estimate)."""
    if device.startswith("cuda"):
        import torch

        # what this process's caching allocator holds counts as available too (a run rebuilt after a rollback is
        # checked while the abandoned learner's blocks are still cached), as its RSS does on the CPU
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return float(free + torch.cuda.memory_reserved(torch.device(device))), f"free on {device}"
    avail = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    if avail is None:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    rss = 0
    with contextlib.suppress(OSError):
        rss = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return float(avail + rss), "RAM available"


def step_estimate(cfg: TrainSettings, shape: ModelShape, device: str, tc: TrainingConfig | None = None) -> StepMemory:
    """The run's step estimate at its worst micro-batch (`tc`: the training settings to try, default the run's)."""
    tc = tc or cfg.training
    longest, how = longest_trajectory(cfg)
    tokens, length = worst_micro_batch(tc, longest)
    est = estimate_step(shape, tc, tokens=tokens, longest=length,
                        policy_tokens=most_policy_tokens(cfg, max(1, tokens // length)),
                        engine_bytes=engine_bytes(cfg, shape, device), device=device)
    learners = cfg.ray.learners if device == "cpu" else 1  # a local group's ranks share this machine's RAM
    if learners > 1:
        est.parts = {k: v * learners if k not in ("base", "rollout engine") else v for k, v in est.parts.items()}
        est.notes.append(f"x {learners} learners (ray.learners) on this machine")
    est.notes.append(f"longest trajectory {longest} tokens: {how}")
    return est


def _largest(fits: Callable[[int], bool], lo: int = 16, hi: int = 1 << 20) -> int | None:
    """The largest n in [lo, hi] with fits(n) (fits monotone: true up to some n), None when fits(lo) is false."""
    if not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _fixes(cfg: TrainSettings, shape: ModelShape, device: str, limit: float, source: str) -> list[str]:
    """The settings that would make the step fit `limit`, each as the user would write it."""
    tc, lc = cfg.training, cfg.training.learner
    engine = engine_bytes(cfg, shape, device)
    longest = longest_trajectory(cfg)[0]

    def fits(t: TrainingConfig, tokens: int, length: int) -> bool:
        est = estimate_step(shape, t, tokens=tokens, longest=length,
                            policy_tokens=most_policy_tokens(cfg, max(1, tokens // length)), engine_bytes=engine,
                            device=device)
        return est.total * (1 + MARGIN) <= limit

    def with_budget(n: int) -> TrainingConfig:
        return tc.model_copy(update={"learner": lc.model_copy(update={"max_tokens_per_micro_batch": n})})

    fixes: list[str] = []
    if lc.gradient_checkpointing is not True:
        t = tc.model_copy(update={"learner": lc.model_copy(update={"gradient_checkpointing": True})})
        if fits(t, *worst_micro_batch(t, longest)):
            fixes.append("training.learner.gradient_checkpointing = true")
    row = _largest(lambda m: fits(with_budget(m), m, m))  # one row alone of m tokens, the budget m
    if row is not None and row < longest:
        fixes.append(f"training.learner.max_tokens_per_micro_batch <= {row} with trajectories of at most {row} "
                     f"tokens (now up to {longest}: searcher.max_turns, searcher.k, searcher.doc_token_budget, "
                     "searcher.max_new_tokens)")
    elif row is not None:
        budget = _largest(lambda n: fits(with_budget(n), *worst_micro_batch(with_budget(n), longest)), lo=longest)
        fixes.append(f"training.learner.max_tokens_per_micro_batch <= {budget or longest}")
    if lc.attn_implementation == "eager":
        fixes.append("training.learner.attn_implementation = 'sdpa'")
    if not lc.lora:
        fixes.append("training.learner.lora = true")
    fixes.append(f"more memory ({source})")
    return fixes


def check_step_memory(cfg: TrainSettings, device: str, log: Callable[[str], None] = print,
                      shape: ModelShape | None = None) -> StepMemory:
    """Estimate the run's step (`step_estimate`) and refuse, with ConfigError naming the settings to change, one that
    would not fit training.learner.memory_gb (else the memory available now, `available_bytes`) with MARGIN to
    spare. Called before any rollout: `s3 train` before its preparation stage, `s3 train --dry-run` before it builds."""
    tc = cfg.training
    shape = shape or ModelShape.of_model(tc.base_model)
    est = step_estimate(cfg, shape, device)
    if tc.learner.memory_gb is not None:
        limit, source = tc.learner.memory_gb * GB, "training.learner.memory_gb"
    else:
        limit, source = available_bytes(device)
    need = est.total * (1 + MARGIN)
    line = (f"train: step memory ~{est.describe()} for its largest micro-batch ({'; '.join(est.notes)}); "
            f"{limit / GB:.1f} GB {source}")
    if need <= limit:
        log(line)
        return est
    fixes = _fixes(cfg, shape, device, limit, source)
    raise ConfigError(
        f"a training step would need ~{est.describe()} ({'; '.join(est.notes)}) with {MARGIN:.0%} to spare, but "
        f"{limit / GB:.1f} GB is {source}: set {' or '.join(fixes)}")
