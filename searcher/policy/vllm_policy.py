"""vLLM policy (GPU only): the same token-id interface as the transformers policy, for fast rollouts.

`vllm` is imported only when the policy is built; on a machine without it the error says so. Replies are cut by the
same shared stop rule as every other backend (searcher.policy.stopping), so all backends agree token for token on
where a reply ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from s3core.errors import ConfigError
from searcher.policy.base import ChatTokenizerMixin, PolicyOutput, PolicyPrompt
from searcher.policy.stopping import truncate_token_ids

__all__ = ["VLLMPolicy"]


class VLLMPolicy(ChatTokenizerMixin):
    """A `TokenPolicy` over `vllm.LLM` (pass `llm=` to reuse an engine, e.g. one shared with a trainer)."""

    supports_token_ids = True

    def __init__(
        self,
        model: str,
        *,
        llm: Any = None,
        max_batch: int | None = None,
        gpu_memory_utilization: float = 0.8,
        seed: int = 0,
    ) -> None:
        try:
            import vllm
        except ImportError:
            raise ConfigError(
                "searcher.policy='vllm' needs the vllm package and a GPU; on CPU use policy='transformers' or 'litellm'"
            ) from None
        self._vllm = vllm
        self.name = f"vllm:{model}"
        self.max_batch = max_batch
        self.llm = llm if llm is not None else vllm.LLM(model=model, gpu_memory_utilization=gpu_memory_utilization, seed=seed)
        self.tokenizer = self.llm.get_tokenizer()
        eos = self.tokenizer.eos_token_id
        self.eos_ids: set[int] = {int(eos)} if eos is not None else set()
        vocab = self.tokenizer.get_vocab()
        if "<|im_end|>" in vocab:
            self.eos_ids.add(int(vocab["<|im_end|>"]))

    def generate(
        self,
        prompts: Sequence[PolicyPrompt],
        *,
        stop: Sequence[str] = (),
        max_new_tokens: int = 160,
        temperature: float = 0.0,
    ) -> list[PolicyOutput]:
        id_lists = [self._ids(p) for p in prompts]
        params = self._vllm.SamplingParams(
            temperature=temperature,
            max_tokens=max_new_tokens,
            stop=list(stop) or None,
            include_stop_str_in_output=True,
            logprobs=0,
        )
        results = self.llm.generate([{"prompt_token_ids": ids} for ids in id_lists], params, use_tqdm=False)
        outs = []
        for ids_in, r in zip(id_lists, results, strict=True):
            comp = r.outputs[0]
            sampled = [int(t) for t in comp.token_ids]
            ids, hit, finish = truncate_token_ids(sampled, self.decode, list(stop), self.eos_ids)
            lps: list[float] = []
            for pos, tok in enumerate(ids):
                entry = comp.logprobs[pos] if comp.logprobs is not None and pos < len(comp.logprobs) else None
                lp = entry.get(tok) if entry is not None else None
                lps.append(float(getattr(lp, "logprob", 0.0)) if lp is not None else 0.0)
            outs.append(
                PolicyOutput(
                    text=self.decode(ids),
                    token_ids=ids,
                    logprobs=lps,
                    prompt_tokens=len(ids_in),
                    completion_tokens=len(ids),
                    stop=hit,
                    finish_reason=finish,
                )
            )
        return outs
