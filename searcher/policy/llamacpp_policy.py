"""The trained searcher on llama.cpp: a LoRA policy merged into its base, exported once as a GGUF file, generated
greedily by llama-cpp-python with the KV cache of the previous prompt reused.

    policy = LlamaCppPolicy.load("searcher/policies/smollm2-135m-hotpotqa")    # exported on first use, then cached

Why: a search is 4 policy calls whose prompts grow by one window each (token mode: turn t's prompt = turn t-1's
prompt + its reply + the new <information>). llama.cpp keeps the last sequence's KV cache and evaluates only the
tokens after the longest common prefix, so each turn pays for its new window, not the whole history; its CPU
kernels do the rest, on threads chosen call by call (searcher/policy/threads.py: two on a quiet 2-core machine, one
as soon as another process on the cores would stall them; $S3_LLAMA_THREADS fixes the count).
The tokenizer, the chat template and the stop rule are the transformers policy's (same ids, same cut), so the agent
sees the same protocol; replies carry no log-probs (inference only: training keeps the transformers policy).

The export (`export_gguf`) writes the merged weights of a llama-architecture model (SmolLM2) in the tensor layout
llama.cpp reads, with the metadata (architecture, tokenizer, chat template) of the base model's own GGUF file: the
offline base ships as a GGUF (s3runtime.local_models), so nothing is fetched.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from s3core.errors import ConfigError, S3Error
from searcher.policy.base import ChatTokenizerMixin, PolicyOutput, PolicyPrompt
from searcher.policy.stopping import truncate_token_ids
from searcher.policy.threads import ThreadGovernor

__all__ = ["GGUF_TYPES", "LlamaCppPolicy", "export_gguf", "policy_gguf"]

# how the exported weights are stored: f32 (the merged float32 weights as they are), f16, q8_0 (8-bit blocks)
GGUF_TYPES = ("f32", "f16", "q8_0")
EXPORT_FORMAT = 1  # bump when the export changes: the cached file's name carries it
MOST_THREADS = 4  # the governor's ceiling (measured on 2 cores only: 2 threads 1.7x one, quiet)

_LAYER = {  # Hugging Face llama names -> llama.cpp's
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _permute(w: Any, n_head: int) -> Any:
    """Hugging Face's rotary layout of a q / k projection -> llama.cpp's (convert_hf_to_gguf's `permute`)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_name(hf: str) -> str | None:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in _LAYER:
        return f"blk.{parts[2]}.{_LAYER[parts[3]]}"
    return None


def export_gguf(model_dir: Path, base_gguf: Path, out: Path, dtype: str = "f16") -> Path:
    """Write the llama-architecture model in `model_dir` (config.json + safetensors) as the GGUF file `out`, its
    metadata copied from `base_gguf` (the same architecture and tokenizer). 2-D weights in `dtype`, norms in f32."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import quantize
    from safetensors.numpy import load_file

    if dtype not in GGUF_TYPES:
        raise ConfigError(f"unknown GGUF type {dtype!r}: use one of {', '.join(GGUF_TYPES)}")
    config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") != "llama":
        raise ConfigError(f"{model_dir}: a {config.get('model_type')!r} model; the GGUF export handles llama models")
    n_head, n_kv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    weights: dict[str, Any] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        weights.update(load_file(str(f)))
    reader = GGUFReader(str(base_gguf))
    tmp = out.with_name(out.name + ".tmp")
    writer = GGUFWriter(str(tmp), arch=str(config["model_type"]))
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type",
                                              "general.quantization_version"):
            continue
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[1]
            items = [field.parts[i] for i in field.data]
            value: Any = [bytes(x).decode("utf-8") for x in items] if sub == GGUFValueType.STRING else [
                x.tolist()[0] for x in items]
            writer.add_key_value(key, value, vtype, sub_type=sub)
        elif vtype == GGUFValueType.STRING:
            writer.add_key_value(key, bytes(field.parts[field.data[0]]).decode("utf-8"), vtype)
        else:
            writer.add_key_value(key, field.parts[field.data[0]].tolist()[0], vtype)
    writer.add_uint32("general.file_type", {"f32": 0, "f16": 1, "q8_0": 7}[dtype])
    if dtype == "q8_0":
        writer.add_uint32("general.quantization_version", 2)
    for hf, w in weights.items():
        name = _gguf_name(hf)
        if name is None:
            continue
        w = np.asarray(w, dtype=np.float32)
        if name.endswith("attn_q.weight"):
            w = _permute(w, n_head)
        elif name.endswith("attn_k.weight"):
            w = _permute(w, n_kv)
        if w.ndim == 1 or dtype == "f32":
            writer.add_tensor(name, np.ascontiguousarray(w))
        elif dtype == "f16":
            writer.add_tensor(name, np.ascontiguousarray(w.astype(np.float16)))
        else:
            q = quantize(w, GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, q, raw_shape=q.shape, raw_dtype=GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return out


def policy_gguf(spec: str, dtype: str = "f16") -> tuple[Path, Path]:
    """(the GGUF file, the tokenizer folder) of a policy: a LoRA adapter folder is merged into its base (cached,
    `merged_adapter_dir`) and exported once, cached beside the merged model by its content."""
    from s3runtime.local_models import gguf_path, resolve_name
    from searcher.policy.transformers_policy import merged_adapter_dir, resolve_checkpoint

    where = resolve_checkpoint(spec)
    if not isinstance(where, Path):
        raise ConfigError(f"searcher.policy = 'llamacpp' needs a local checkpoint, not the hub name {spec!r}")
    base = None
    if (where / "adapter_config.json").is_file():
        base = json.loads((where / "adapter_config.json").read_text()).get("base_model_name_or_path")
        where = merged_adapter_dir(where)
    else:
        source = where / "s3_source.json"  # an offline model converted from its GGUF: the base is that file
        base = json.loads(source.read_text()).get("gguf") if source.is_file() else None
    if not base:
        raise ConfigError(f"{spec}: no base GGUF to take llama.cpp's metadata from (only offline bases have one)")
    base_file = Path(base) if str(base).endswith(".gguf") else gguf_path(resolve_name(str(base)).name)
    out = where / f"s3-policy-v{EXPORT_FORMAT}.{dtype}.gguf"
    if not out.is_file():
        export_gguf(where, base_file, out, dtype)
    return out, where


class LlamaCppPolicy(ChatTokenizerMixin):
    """Token-id policy over llama-cpp-python: greedy (temperature 0) or sampled replies, the previous prompt's KV
    reused where the next prompt extends it (one sequence at a time: `max_batch = 1` makes the agent take one
    question through all its turns before the next)."""

    supports_token_ids = True
    max_concurrent_batches = 1  # one llama.cpp context: `s3 serve` runs one batch at a time on it

    def __init__(self, llm: Any, tokenizer: Any, *, name: str = "llamacpp", governor: ThreadGovernor | None = None) -> None:
        self.llm = llm
        # None: the threads llm was made with, fixed; else chosen call by call from the speed (searcher/policy/threads.py)
        self.governor = governor
        self.threads = int(llm.n_threads) if governor is None else governor.threads
        if governor is not None:
            llm._ctx.set_n_threads(self.threads, self.threads)
        self.tokenizer = tokenizer
        self.name = name
        # one question at a time through all its turns: each turn extends the previous prompt, whose KV cache
        # llama.cpp still holds (a lockstep batch would interleave the questions and re-evaluate each history)
        self.max_batch: int | None = 1
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.pad_id: int = int(tokenizer.pad_token_id)
        eos = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
        if "<|im_end|>" in tokenizer.get_vocab():
            eos.add(int(tokenizer.convert_tokens_to_ids("<|im_end|>")))
        eos.add(int(llm.token_eos()))
        self.eos_ids: set[int] = eos
        self.reused_tokens = 0  # prompt tokens served from the KV cache (last call), for the benchmark

    @classmethod
    def load(cls, spec: str, *, threads: int | None = None, dtype: str = "f16", n_ctx: int = 8192) -> LlamaCppPolicy:
        try:
            from llama_cpp import Llama

            # the fast tokenizer class itself: the same ids and chat template as AutoTokenizer (tested), without
            # the auto module's imports (torch among them: ~4-6 s of a cold `s3 search`)
            from transformers import PreTrainedTokenizerFast
        except ImportError as e:
            raise ConfigError(f"searcher.policy = 'llamacpp' needs llama-cpp-python and transformers (the 'local' and "
                              f"'train' extras): {e}") from None
        gguf, tok_dir = policy_gguf(spec, dtype)
        # threads: fixed when told (threads, $S3_LLAMA_THREADS), else governed call by call (ThreadGovernor: up to
        # MOST_THREADS while they keep their speed, one as soon as another process on the cores stalls them)
        env = os.environ.get("S3_LLAMA_THREADS")
        n = threads or (int(env) if env and env.isdigit() and int(env) > 0 else None)
        most = max(1, min(MOST_THREADS, os.cpu_count() or 1))
        llm = Llama(model_path=str(gguf), n_ctx=n_ctx, n_batch=512, n_threads=n or most, n_threads_batch=n or most,
                    verbose=False)
        return cls(llm, PreTrainedTokenizerFast.from_pretrained(str(tok_dir)), name=f"llamacpp:{spec}",
                   governor=None if n else ThreadGovernor(most))

    def generate(self, prompts: Sequence[PolicyPrompt], *, stop: Sequence[str] = (), max_new_tokens: int = 160,
                 temperature: float = 0.0) -> list[PolicyOutput]:
        outs = []
        self.reused_tokens = 0
        for p in prompts:
            outs.append(self._one(self._ids(p), list(stop), max_new_tokens, temperature))
        return outs

    def _set_threads(self, n: int) -> None:
        if n != self.threads:
            self.llm._ctx.set_n_threads(n, n)
            self.threads = n

    def _one(self, ids: list[int], stop: list[str], max_new_tokens: int, temperature: float) -> PolicyOutput:
        llm = self.llm
        if len(ids) + max_new_tokens > llm.n_ctx():
            raise S3Error(f"{self.name}: a prompt of {len(ids)} tokens + {max_new_tokens} to write exceeds the "
                          f"context of {llm.n_ctx()} tokens")
        have = list(llm._input_ids[: llm.n_tokens]) if llm.n_tokens else []
        shared = 0
        for a, b in zip(have, ids[:-1], strict=False):
            if a != b:
                break
            shared += 1
        self.reused_tokens += shared
        gov = self.governor
        if gov is not None:  # the new prompt tokens in chunks, each timed, so a stall is seen after one chunk
            todo, i = ids[shared:-1], 0
            self._set_threads(gov.begin(len(todo)))
            llm.n_tokens = shared  # eval drops the KV past it
            while i < len(todo):
                part = todo[i : i + gov.chunk()]
                t = time.perf_counter()
                llm.eval(part)
                self._set_threads(gov.prompt(len(part), time.perf_counter() - t))
                i += len(part)
        new: list[int] = []
        t = time.perf_counter()
        for tok in llm.generate(ids, temp=temperature, top_k=0 if temperature > 0 else 1, top_p=1.0, min_p=0.0,
                                repeat_penalty=1.0, reset=True):
            new.append(int(tok))  # an end-of-sequence token is kept (and cut after), as the transformers policy does
            if new[-1] in self.eos_ids or len(new) >= max_new_tokens or (stop and any(s in self.decode(new)
                                                                                     for s in stop)):
                break
            if gov is not None:
                now = time.perf_counter()
                self._set_threads(gov.written(now - t))
                t = now
        kept, hit, finish = truncate_token_ids(new, self.decode, stop, self.eos_ids, self.pad_id)
        return PolicyOutput(text=self.decode(kept), token_ids=kept, logprobs=None, prompt_tokens=len(ids),
                            completion_tokens=len(kept), stop=hit, finish_reason=finish)
