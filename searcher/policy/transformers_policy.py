"""The trainable policy: a transformers causal LM driven by token ids, returning sampled ids and their logprobs.

    policy = TransformersPolicy.load("smollm2-135m-instruct")       # offline GGUF -> torch (cached as safetensors)
    policy = TransformersPolicy.load("runs/train1/checkpoint-20")   # a trained checkpoint (full or LoRA adapter)
    policy.enable_lora(r=8)                                          # wrap in a peft LoRA for training

Offline GGUF models (s3runtime.local_models) are dequantized once with
`AutoModelForCausalLM.from_pretrained(dir, gguf_file=f, quantization_config=GgufConfig(dequantize=True))`, saved as
safetensors under `<model cache>/hf/<gguf sha256[:16]>/` (the 0.5B takes ~65 s once, then reloads in seconds).
Generation is batched with left padding; the prompt prefix a batch shares (the s3 instruction) is computed once
(searcher.policy.prefix_kv); every reply is cut by the shared stop rule (searcher.policy.stopping).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from s3core.errors import ConfigError, S3Error
from s3core.runs import policy_checkpoint
from searcher.policy.base import ChatTokenizerMixin, PolicyOutput, PolicyPrompt
from searcher.policy.prefix_kv import (
    MIN_SHARED_PREFIX,
    cache_arg,
    common_prefix_len,
    expand,
    pack_after_prefix,
    prefix_cache,
)
from searcher.policy.stopping import truncate_token_ids

__all__ = ["ChosenLogprobs", "TransformersPolicy", "converted_gguf_dir", "resolve_checkpoint"]


def _hf_cache_root() -> Path:
    env = os.environ.get("S3_HF_CACHE")
    if env:
        return Path(env).expanduser()
    from s3runtime.local_models import model_dir

    return model_dir() / "hf"


def converted_gguf_dir(gguf_file: Path, sha256: str | None = None, cache_root: Path | None = None) -> Path:
    """A transformers directory (config, safetensors, tokenizer) converted from `gguf_file`, cached by its sha256.

    The first call dequantizes the GGUF (GgufConfig(dequantize=True)); later calls return the cached directory.
    """
    from s3core.io import file_sha256

    gguf_file = Path(gguf_file)
    if not gguf_file.is_file():
        raise S3Error(f"GGUF file not found: {gguf_file}")
    sha = sha256 or file_sha256(gguf_file)
    root = cache_root or _hf_cache_root()
    dest = root / sha[:16]
    if (dest / "config.json").is_file() and (dest / "model.safetensors").is_file():
        return dest
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    except ImportError as e:
        raise ConfigError(f"the transformers policy needs the 'train' extra (pip install -e '.[train]'): {e}") from None
    root.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(gguf_file.parent), gguf_file=gguf_file.name, quantization_config=GgufConfig(dequantize=True)
    )
    if getattr(tok, "chat_template", None) is None:
        try:
            from gguf import GGUFReader

            field = GGUFReader(str(gguf_file)).fields.get("tokenizer.chat_template")
            if field is not None:
                tok.chat_template = bytes(field.parts[field.data[0]]).decode("utf-8")
        except Exception:  # pragma: no cover - template is optional; encode_chat then raises a clear error
            pass
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=root))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        (tmp / "s3_source.json").write_text(json.dumps({"gguf": str(gguf_file), "sha256": sha}) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def resolve_checkpoint(spec: str) -> Path | str:
    """Where to load `spec` from: a checkpoint directory (a HF model dir, a trainer checkpoint step_N, or a training
    run directory = its held-out best checkpoint, else its newest: s3core/runs.py), a .gguf file (converted), an
    offline model name ('smollm2-135m-instruct', 'local/qwen2.5-coder-0.5b-instruct'; converted), or a hub name (passed
    through)."""
    p = Path(spec).expanduser()
    if p.is_dir():
        # a training run dir (checkpoints/best, else latest) or one trainer checkpoint (step_N/policy) also work
        chosen = policy_checkpoint(p)
        if chosen is not None:
            p = chosen
        if (p / "policy").is_dir() and not (p / "config.json").is_file():
            p = p / "policy"
        if not ((p / "config.json").is_file() or (p / "adapter_config.json").is_file()):
            raise S3Error(f"{p} is not a model checkpoint (no config.json or adapter_config.json)")
        return p
    if p.suffix == ".gguf":
        return converted_gguf_dir(p)
    if spec.count("/") > 1 or spec.startswith((".", "/", "~")) or (p.parent.is_dir() and str(p.parent) != "."):
        # a path, not a hub id ('namespace/name'): say what is missing instead of asking the hub
        near = sorted(x.name for x in p.parent.iterdir()) if p.parent.is_dir() else []
        hint = f"; {p.parent} holds: {', '.join(near[:12])}" if near else ""
        raise S3Error(f"no checkpoint at {spec!r}: no such directory{hint}")
    name = spec.split("/", 1)[1] if spec.startswith("local/") else spec
    from s3runtime.local_models import MODELS, gguf_path, resolve_name

    try:
        model = resolve_name(name)
    except S3Error:
        if spec.startswith("local/") or name.lower() in MODELS:
            raise
        return spec  # a hub name; works where the hub is reachable or cached
    return converted_gguf_dir(gguf_path(model.name), sha256=model.sha256)


def full_weights(spec: str) -> str | Path:
    """A policy as an engine that loads full weights takes it (vLLM): `resolve_checkpoint(spec)`, a LoRA adapter
    folder merged into its base (`merged_adapter_dir`, cached)."""
    where = resolve_checkpoint(spec)
    if isinstance(where, Path) and (where / "adapter_config.json").is_file():
        return merged_adapter_dir(where)
    return where


def merged_adapter_dir(adapter_dir: Path, cache_root: Path | None = None) -> Path:
    """A plain transformers directory with the LoRA adapter at `adapter_dir` merged into its base model, cached by
    the adapter's content (what an engine that loads full weights, e.g. vLLM, is given for a LoRA policy)."""
    from s3core.io import file_sha256, text_sha256

    files = sorted(p for p in adapter_dir.iterdir() if p.is_file() and p.name.startswith("adapter_"))
    if not files:
        raise S3Error(f"{adapter_dir} holds no adapter_* files")
    key = text_sha256("".join(f"{p.name}:{file_sha256(p)}" for p in files))[:16]
    dest = (cache_root or _hf_cache_root()) / "merged" / key
    if (dest / "config.json").is_file():
        return dest
    pol = TransformersPolicy.load(str(adapter_dir))
    model: Any = pol.model.merge_and_unload()
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(str(tmp), safe_serialization=True)
    pol.tokenizer.save_pretrained(str(tmp))
    os.replace(tmp, dest)
    return dest


class ChosenLogprobs:
    """A transformers logits processor that records, on the model's device, the log-probability of each generated
    token under the sampling distribution (logits / temperature) — one step's (B, V) log-softmax alive at a time,
    never the whole (B, N, V) history. It divides the scores by the temperature itself and returns them, so HF samples
    at temperature 1 from exactly the distribution recorded (greedy: temperature 1, the argmax is unchanged).

    At step t+1 it reads the token chosen at step t from `input_ids`; `finish(new_tokens)` adds the last step's."""

    def __init__(self, temperature: float = 1.0) -> None:
        self.temperature = temperature
        self.prev: Any = None  # (B, V) float32 log-softmax of the last step
        self.steps: list[Any] = []  # (B,) per finished step

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.prev is not None:
            self.steps.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(-1))
        scaled = scores.float() / self.temperature if self.temperature != 1.0 else scores.float()
        self.prev = torch.log_softmax(scaled, dim=-1)
        return scaled

    def finish(self, new_tokens: Any) -> Any:
        """(B, N) log-probs of `new_tokens` (the generated part of the sequences)."""
        import torch

        N = new_tokens.shape[1]
        if self.prev is not None and len(self.steps) < N:
            self.steps.append(self.prev.gather(-1, new_tokens[:, len(self.steps) : len(self.steps) + 1]).squeeze(-1))
        self.prev = None
        if not self.steps:
            return torch.zeros(new_tokens.shape, dtype=torch.float32, device=new_tokens.device)
        return torch.stack(self.steps[:N], dim=1)


class TransformersPolicy(ChatTokenizerMixin):
    """Token-id policy over a transformers causal LM (trainable: `self.model` is a torch module).

    gen_batch: rows per `model.generate` call (memory bound); the agent's lockstep batch may be larger.
    share_prefix: compute the prompt prefix shared by a whole batch (the s3 instruction) once and continue every row
        from its KV cache (searcher.policy.prefix_kv; exact). `last_shared_prefix` is its length in the last call.
    """

    supports_token_ids = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "transformers",
        max_batch: int | None = None,
        gen_batch: int = 64,
        share_prefix: bool = True,
    ) -> None:
        self.model = model
        self.share_prefix = share_prefix
        self.last_shared_prefix = 0
        self.tokenizer = tokenizer
        self.name = name
        self.max_batch = max_batch
        self.gen_batch = max(1, gen_batch)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.pad_id: int = int(tokenizer.pad_token_id)
        eos: set[int] = set()
        for src in (getattr(model, "generation_config", None), getattr(model, "config", None)):
            e = getattr(src, "eos_token_id", None) if src is not None else None
            if isinstance(e, int):
                eos.add(e)
            elif isinstance(e, list | tuple):
                eos.update(int(x) for x in e)
        if tokenizer.eos_token_id is not None:
            eos.add(int(tokenizer.eos_token_id))
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        if isinstance(im_end, int):
            eos.add(im_end)
        self.eos_ids: set[int] = eos

    # --------------------------------------------------------------------------------------------------- loading
    @classmethod
    def load(
        cls,
        spec: str,
        *,
        threads: int | None = None,
        dtype: str = "float32",
        max_batch: int | None = None,
        gen_batch: int = 64,
        device: str = "cpu",
        merge_adapter: bool = False,
    ) -> TransformersPolicy:
        """Load an offline GGUF model by name, a .gguf file, a checkpoint directory (full model, or a peft LoRA
        adapter whose adapter_config.json names its base), or a hub name, onto `device` ('cpu', 'cuda', 'cuda:N';
        s3core.devices.resolve_device turns a config's 'auto' into one).

        merge_adapter: fold a LoRA adapter into the base weights (peft's `merge_and_unload`) for inference: the same
        function, one matmul per layer instead of three (an 800-token forward of the 135M searcher: 21.1 s unmerged,
        11.6 s merged). Never when the adapter is to be trained further (the trainer loads without it)."""
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise ConfigError(f"the transformers policy needs the 'train' extra (pip install -e '.[train]'): {e}") from None
        if threads:
            torch.set_num_threads(threads)
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise ConfigError(f"unknown torch dtype {dtype!r} (use float32, bfloat16 or float16)")
        where = resolve_checkpoint(spec)
        adapter = isinstance(where, Path) and (where / "adapter_config.json").is_file()
        model: Any
        if adapter:
            assert isinstance(where, Path)
            base_spec = json.loads((where / "adapter_config.json").read_text()).get("base_model_name_or_path")
            if not base_spec:
                raise S3Error(f"{where}/adapter_config.json names no base_model_name_or_path")
            base_dir = resolve_checkpoint(str(base_spec))
            base_tokenizer = None
            if isinstance(base_dir, Path) and (base_dir / "adapter_config.json").is_file():
                # trained on top of another adapter (training.base_model was a trained LoRA searcher): that one is
                # merged into its own base first, as the trainer loaded it
                inner = cls.load(str(base_dir), dtype=dtype, merge_adapter=True)
                model, base_tokenizer = inner.model, inner.tokenizer
            else:
                model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch_dtype)
            try:
                from peft import PeftModel
            except ImportError as e:
                raise ConfigError(f"{where} is a LoRA adapter: install peft (the 'train' extra): {e}") from None
            model = PeftModel.from_pretrained(model, str(where))
            if merge_adapter:
                model = model.merge_and_unload()
            if (where / "tokenizer_config.json").is_file():
                tokenizer = AutoTokenizer.from_pretrained(str(where))
            else:  # the base's (an adapter base: the tokenizer it was loaded with)
                tokenizer = base_tokenizer or AutoTokenizer.from_pretrained(str(base_dir))
        else:
            model = AutoModelForCausalLM.from_pretrained(str(where), dtype=torch_dtype)
            tokenizer = AutoTokenizer.from_pretrained(str(where))
        model.to(device)
        model.eval()
        return cls(model, tokenizer, name=f"transformers:{spec}", max_batch=max_batch, gen_batch=gen_batch)

    def enable_lora(self, r: int = 8, alpha: int = 16, dropout: float = 0.0, target_modules: Any = "all-linear") -> None:
        """Wrap the model in a peft LoRA (only the adapter trains). Idempotent."""
        try:
            from peft import LoraConfig, PeftModel, get_peft_model
        except ImportError as e:
            raise ConfigError(f"LoRA needs peft (the 'train' extra): {e}") from None
        if isinstance(self.model, PeftModel):
            return
        cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules, task_type="CAUSAL_LM")
        with warnings.catch_warnings():
            # peft reads transformers' deprecated `is_gradient_checkpointing` alias (a FutureWarning we cannot fix)
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            self.model = get_peft_model(self.model, cfg)

    def save(self, path: str | Path) -> Path:
        """Save model (or LoRA adapter) + tokenizer so that `TransformersPolicy.load(path)` restores it."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(out), safe_serialization=True)
        self.tokenizer.save_pretrained(str(out))
        return out

    # -------------------------------------------------------------------------------------------------- generation
    def generate(self, prompts: Sequence[PolicyPrompt], *, stop: Sequence[str] = (), max_new_tokens: int = 160,
                 temperature: float = 0.0) -> list[PolicyOutput]:
        id_lists = [self._ids(p) for p in prompts]
        if not id_lists:
            return []
        # the prompt prefix every row shares (the s3 instruction) is computed once, not once per row
        P = 0
        if self.share_prefix and len(id_lists) > 1:
            P = common_prefix_len(id_lists, limit=min(len(x) for x in id_lists) - 1)
            if P < MIN_SHARED_PREFIX:
                P = 0
        cache = None
        if P:
            import torch

            with torch.no_grad():
                cache = prefix_cache(self.model, id_lists[0][:P])
        self.last_shared_prefix = P
        outs: list[PolicyOutput] = []
        for lo in range(0, len(id_lists), self.gen_batch):
            chunk = id_lists[lo : lo + self.gen_batch]
            outs.extend(self._generate_batch(chunk, list(stop), max_new_tokens, temperature, P if len(chunk) > 1 else 0, cache))
        return outs

    def _generate_batch(
        self,
        id_lists: list[list[int]],
        stop: list[str],
        max_new_tokens: int,
        temperature: float,
        prefix_len: int = 0,
        prefix: Any = None,
    ) -> list[PolicyOutput]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        if not id_lists:
            return []
        B = len(id_lists)
        # (B, L): [shared prefix][left padding][row suffix]; without a shared prefix, plain left padding
        input_ids, attention = pack_after_prefix(id_lists, prefix_len if prefix is not None else 0, self.pad_id)
        L = input_ids.shape[1]
        sample = temperature > 0
        # sampling is done by HF at temperature 1 over the scores ChosenLogprobs returns (already divided by the
        # temperature), so no warper runs after it; it keeps one step's log-softmax (B, V) on the device at a time
        recorder = ChosenLogprobs(temperature if sample else 1.0)
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": sample,
            "pad_token_id": self.pad_id,
            "eos_token_id": sorted(self.eos_ids),
            "return_dict_in_generate": True,
        }
        if sample:
            gen_kwargs.update(temperature=1.0, top_k=0, top_p=1.0)
        if stop:
            gen_kwargs["stop_strings"] = stop
        gcfg = GenerationConfig(**gen_kwargs)
        device = next(self.model.parameters()).device
        extra: dict[str, Any] = {}
        if prefix is not None and prefix_len:
            extra[cache_arg(self.model)] = expand(prefix, B)
        with torch.no_grad():
            res = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                generation_config=gcfg,
                logits_processor=LogitsProcessorList([recorder]),
                tokenizer=self.tokenizer,
                **extra,
            )
        new_dev = res.sequences[:, L:]  # (B, N) on the device
        logp = recorder.finish(new_dev).cpu()  # (B, N) float32: the chosen tokens' log-probs only
        new = new_dev.cpu()
        outs = []
        for b in range(B):
            ids, hit, finish = truncate_token_ids(new[b].tolist(), self.decode, stop, self.eos_ids, self.pad_id)
            outs.append(
                PolicyOutput(
                    text=self.decode(ids),
                    token_ids=ids,
                    logprobs=[float(x) for x in logp[b, : len(ids)].tolist()],
                    prompt_tokens=len(id_lists[b]),
                    completion_tokens=len(ids),
                    stop=hit,
                    finish_reason=finish,
                )
            )
        return outs
