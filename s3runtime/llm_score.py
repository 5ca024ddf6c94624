"""Teacher-forced answer log-probabilities on an offline model (llama.cpp): log p(answer | prompt), for many prompts
that share a prefix, the shared prefix computed once.

    scorer = LocalScorer("qwen2.5-coder-1.5b-instruct")
    rows = scorer.score([messages_base, messages_with_doc_1, ...], "Paris")
    rows[0].logprob, rows[0].tokens      # sum of the answer tokens' log-probabilities, and how many

Each prompt is the chat the generator would be sent (its messages through the GGUF's own chat template, exactly as
`create_chat_completion` renders and tokenizes them), followed by the answer's tokens. The model's KV cache keeps the
longest token prefix the prompts share (for credit scoring: the instruction and the start's documents); each prompt
then pays only its own tokens and the answer's, and logits are computed only at the positions that predict an answer
token (not the 150k-wide vocabulary projection of every prompt token).

This is exact: every answer token is scored with the full prompt before it, the same tokens the generator would see;
only the computation of the shared prefix is reused (tests/integration/test_credit_real.py compares it with scoring
every prompt from scratch).
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from s3core.errors import S3Error
from s3runtime.local_models import gguf_path, resolve_name

__all__ = ["AnswerScore", "LocalScorer", "common_prefix"]


@dataclass(frozen=True)
class AnswerScore:
    """log p(answer | prompt) summed over the answer's tokens, the token count, and what the prompt cost."""

    logprob: float
    tokens: int
    prompt_tokens: int
    computed_tokens: int  # tokens actually run through the model for this prompt (the rest came from the cache)

    @property
    def mean(self) -> float:
        return self.logprob / max(self.tokens, 1)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _log_softmax_at(row: np.ndarray, token: int) -> float:
    m = float(row.max())
    return float(row[token]) - m - math.log(float(np.exp(row - m).sum()))


class LocalScorer:
    """Scores answers under offline model `name` with its own llama.cpp context (not the generator's shared one, so
    scoring never disturbs a running generator's cache). One call at a time (a lock); `threads` None = the runtime's
    default (S3_LLAMA_THREADS, else chosen by load)."""

    def __init__(self, name: str, *, threads: int | None = None, n_ctx: int = 4096, n_batch: int = 512) -> None:
        try:
            import llama_cpp
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise S3Error(f'scoring with local model {name!r} needs llama-cpp-python: pip install -e ".[local]"') from None
        from s3runtime.llm_local import default_threads

        self.model = resolve_name(name)
        self.name = self.model.name
        n = threads or default_threads()
        self._llama = Llama(model_path=str(gguf_path(self.name)), n_ctx=n_ctx, n_batch=n_batch, n_threads=n,
                            n_threads_batch=n, verbose=False)
        self._lib = llama_cpp
        self._lock = threading.Lock()
        self.n_batch = n_batch
        self.n_ctx = n_ctx
        self.n_vocab = self._llama.n_vocab()
        template = self._llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise S3Error(f"local model {self.name!r} has no chat template in its GGUF: its chat prompts cannot be scored")
        m = self._llama._model
        eos, bos = self._llama.token_eos(), self._llama.token_bos()
        self._format = Jinja2ChatFormatter(template=template, eos_token=m.token_get_text(eos) if eos != -1 else "",
                                           bos_token=m.token_get_text(bos) if bos != -1 else "")
        self._cached: list[int] = []  # the tokens whose KV sits in the context (sequence 0, positions 0..)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self.stats = {"prompts": 0, "computed_tokens": 0, "prompt_tokens": 0}

    def close(self) -> None:
        with self._lock:
            if self._batch is not None:
                self._lib.llama_batch_free(self._batch)
                self._batch = None
            self._llama.close()

    def __enter__(self) -> LocalScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def prompt_tokens(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """The chat's tokens as `create_chat_completion` would send them (its generation prompt included)."""
        out = self._format(messages=list(messages))  # type: ignore[arg-type]
        return list(self._llama.tokenize(out.prompt.encode("utf-8"), add_bos=not out.added_special, special=True))

    def answer_tokens(self, answer: str) -> list[int]:
        return list(self._llama.tokenize(answer.encode("utf-8"), add_bos=False, special=False))

    def score(self, prompts: Sequence[Sequence[dict[str, Any]]], answer: str) -> list[AnswerScore]:
        """log p(answer | chat) for each chat in `prompts`, in order. Chats that share a prefix should be given
        together (the first one's tokens stay cached for the next)."""
        ans = self.answer_tokens(answer)
        if not ans:
            raise S3Error("cannot score an empty answer")
        with self._lock:
            return [self._score_one(self.prompt_tokens(p), ans) for p in prompts]

    def score_tokens(self, prompt: Sequence[int], answer: Sequence[int]) -> AnswerScore:
        with self._lock:
            return self._score_one(list(prompt), list(answer))

    def _score_one(self, prompt: list[int], ans: list[int]) -> AnswerScore:
        seq = prompt + ans
        if len(seq) > self.n_ctx:
            raise S3Error(f"a scoring prompt of {len(seq)} tokens exceeds the scorer's context of {self.n_ctx}")
        keep = common_prefix(self._cached, seq)
        keep = min(keep, len(prompt) - 1)  # the token before the answer must be run: its logits predict answer[0]
        mem = self._lib.llama_get_memory(self._llama.ctx)
        if not self._lib.llama_memory_seq_rm(mem, 0, keep, -1):  # pragma: no cover - a full-sequence cache
            self._lib.llama_memory_clear(mem, True)
            keep = 0
        self._cached = seq[:keep]
        first_logit = len(prompt) - 1  # positions len(prompt)-1 .. len(seq)-2 predict the answer's tokens
        logprob = 0.0
        pos = keep
        while pos < len(seq) - 1:
            end = min(pos + self.n_batch, len(seq) - 1)
            b = self._batch
            n = end - pos
            for j in range(n):
                p = pos + j
                b.token[j] = seq[p]
                b.pos[j] = p
                b.n_seq_id[j] = 1
                b.seq_id[j][0] = 0
                b.logits[j] = 1 if p >= first_logit else 0
            b.n_tokens = n
            rc = self._lib.llama_decode(self._llama.ctx, b)
            if rc != 0:
                self._cached = []
                self._lib.llama_memory_clear(mem, True)
                raise S3Error(f"llama.cpp decode failed (code {rc}) scoring {len(seq)} tokens")
            for j in range(n):
                p = pos + j
                if p >= first_logit:
                    ptr = self._lib.llama_get_logits_ith(self._llama.ctx, j)
                    row = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(self.n_vocab,))
                    logprob += _log_softmax_at(row, seq[p + 1])
            self._cached = seq[:end]
            pos = end
        computed = len(seq) - 1 - keep
        self.stats["prompts"] += 1
        self.stats["computed_tokens"] += computed
        self.stats["prompt_tokens"] += len(seq)
        return AnswerScore(logprob=logprob, tokens=len(ans), prompt_tokens=len(prompt), computed_tokens=computed)
