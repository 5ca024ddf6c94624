"""`s3 doctor`: does every GPU path of s3 work on this machine? (scripts/gpu_check.sh runs it with --device cuda)

    s3 doctor --device cuda --out gpu-check          # a new GPU machine, ~5 minutes
    s3 doctor --device cpu --quick --out /tmp/check  # the same steps on the CPU, smaller (what CI runs)

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
resume, rollout_speed (the transformers engine's policy tokens/s), search (`s3 search` on the trained run),
vllm_sync (a training step whose rollouts come from a vLLM engine that receives the learner's weights in place),
serve_generator (`s3 serve-generator` answering one request), dense (a dense index on the device; faiss-gpu when
present), learner_group (two learners on nccl, one GPU each).
"""

from __future__ import annotations

import contextlib
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

__all__ = ["StepResult", "run_doctor"]

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

    @property
    def work(self) -> Path:
        return self.out / "work"


def _s3(ctx: Ctx, name: str, args: list[str], *, timeout_s: float | None = None, background: bool = False,
        ) -> tuple[int, str, dict[str, Any]] | subprocess.Popen[str]:
    """Run `s3 ARGS` as a step's process (its log in OUT/logs/NAME.log); returns (rc, log tail, stats)."""
    log_path = ctx.out / "logs" / f"{name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stats_path = ctx.out / "logs" / f"{name}.stats.json"
    stats_path.unlink(missing_ok=True)
    env = {**os.environ, **ctx.env, STATS_ENV: str(stats_path)}
    cmd = [sys.executable, "-m", "s3.doctor", "--child", "--", *args]
    with log_path.open("a") as f:
        f.write("$ s3 " + " ".join(args) + "\n")
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


def run_doctor(out: Path, device: str = "auto", quick: bool = False, only: str | None = None,
               timeout_s: float = 600.0, log: Callable[[str], None] = print, keep_work: bool = False) -> list[StepResult]:
    """Run the steps into OUT (summary.json, summary.md, logs/). Their models, runs and indexes go to OUT/work, which
    is removed at the end (a few hundred MB) unless `keep_work`."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "auto":
        device = "cuda" if gpus else "cpu"
    out.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(out=out, device=device, quick=quick, timeout_s=timeout_s, gpus=gpus, log=log,
              env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "VLLM_HOST_IP": "127.0.0.1",
                   "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONPATH": os.pathsep.join(
                       [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])})
    ctx.work.mkdir(parents=True, exist_ok=True)
    steps = [(n, f) for n, f in STEPS if only is None or re.search(only, n)]
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
    (out / "summary.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child" and sys.argv[2] == "--":
        raise SystemExit(child_main(sys.argv[3:]))
    raise SystemExit("usage: python -m s3.doctor --child -- <s3 arguments>  (the user command is `s3 doctor`)")
