"""The pointwise reader: a small causal LM read as a cross-encoder. Each (question, document) pair is one short prompt
(`render_pair`); the document's score is logit(" yes") - logit(" no") at the prompt's last position.

    from searcher.title_following.reader import PointwiseReader
    reader = PointwiseReader.load("runs/selection_probe/readers/smollm2-135m-instruct-pointwise")
    reader.scores("Who directed Alien?", docs)          # one float a document, higher = more useful

A reader is trained by `benchmarks/selection_probe.py run --reader pointwise --save --tag ...` (experiments/
selection_probe.py `PointwiseStudent`, which scores with these same functions). In the searcher it is one feature of
the ranker that picks the title-following script's last page (searcher.reading.reader, searcher/title_following/links.py): the 135M reader
there, with the links the script found, is +0.034 [+0.010, +0.060] GenAcc over the script on hotpotqa_dev500
(docs/transfer.md, "Reading with what the script found"); its LoRA version ships (searcher/policies/
reader-smollm2-135m-hotpotqa, read by the shipped ranker links-reader-hotpotqa). Any transformers causal LM whose
tokenizer gives " yes" and " no" one token each after `PAIR_TAIL` loads, a full checkpoint or a peft LoRA adapter
(merged for inference).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from s3core.errors import ConfigError, S3Error
from s3core.types import Document

__all__ = ["MAX_TOKENS", "PAIR_TAIL", "WORDS", "PointwiseReader", "last_token_logits", "one_token_each",
           "reader_identity", "render_pair", "yes_no_token_ids"]

WORDS = 60  # words of each document shown after its title
PAIR_TAIL = "Does this document help answer the question? Answer yes or no:"  # the prompt's end
MAX_TOKENS = 1024  # a prompt's last tokens read (a pair prompt is ~120)


def render_pair(question: str, doc: Document, words: int = WORDS) -> str:
    """The pointwise reader's prompt: one document with the question, then `PAIR_TAIL`, after which the first
    generated token is " yes" or " no".

    >>> print(render_pair("Who?", Document(id="a", title="A", text="one two three"), words=2))
    Question: Who?
    Document: A: one two
    Does this document help answer the question? Answer yes or no:
    """
    return f"Question: {question}\nDocument: {doc.title}: {' '.join(doc.text.split()[:words])}\n{PAIR_TAIL}"


def one_token_each(tokenizer: Any, tail: str, words: Sequence[str]) -> list[int]:
    """The single token id of each of `words` as it follows `tail`; a tokenizer that splits one is a ConfigError (a
    reader reads one token's logit per choice)."""
    base = tokenizer.encode(tail, add_special_tokens=False)
    out = []
    for word in words:
        ids = tokenizer.encode(tail + word, add_special_tokens=False)
        if ids[: len(base)] != base or len(ids) != len(base) + 1:
            raise ConfigError(f"the tokenizer does not give {word!r} one token after {tail!r}: {ids} (a reader, "
                              "searcher.reading.reader, reads one token's logit a choice)")
        out.append(ids[-1])
    return out


def yes_no_token_ids(tokenizer: Any) -> list[int]:
    """The single token ids of " yes" and " no" after `PAIR_TAIL` (the pointwise reader's two choices)."""
    return one_token_each(tokenizer, PAIR_TAIL, (" yes", " no"))


def last_token_logits(model: Any, ids: Sequence[Sequence[int]], pad_id: int) -> Any:
    """(B, V) next-token logits at the last position of each token-id list (left padding, each list's own positions
    from 0): one forward pass of a transformers causal LM."""
    import torch

    width = max(len(x) for x in ids)
    batch = torch.full((len(ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, x in enumerate(ids):  # left padding: every prompt ends at the last position
        batch[i, width - len(x):] = torch.tensor(list(x))
        mask[i, width - len(x):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    # logits_to_keep=1: only the last position goes through the vocabulary projection (B x V, not B x T x V)
    return model(input_ids=batch, attention_mask=mask, position_ids=positions, logits_to_keep=1).logits[:, -1, :]


class PointwiseReader:
    """A trained pointwise reader for inference: `scores(question, docs)`, `batch` pairs a forward pass, no gradient.
    `name` is what it was loaded from, for a run's identity."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "reader", batch: int = 16,
                 max_tokens: int = MAX_TOKENS, words: int = WORDS, threads: int | None = None) -> None:
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.batch, self.max_tokens, self.words = max(1, batch), max_tokens, words
        self.yes, self.no = yes_no_token_ids(tokenizer)
        self.pad_id = int(tokenizer.pad_token_id)
        self.threads = threads  # torch threads a call reads with; None = s3core.devices.auto_cpu_threads, call by call
        model.eval()

    @classmethod
    def load(cls, spec: str, *, threads: int | None = None, dtype: str = "float32") -> PointwiseReader:
        """A reader from a checkpoint directory (a full model, or a LoRA adapter whose adapter_config.json names its
        base), an offline model name or a hub name, in `dtype` (float32: the numbers it was measured with); a missing
        or broken one, or one whose tokenizer cannot answer yes / no in one token, is a ConfigError that says so.
        `threads`: torch threads for every call (None: chosen call by call from the machine's load)."""
        from safetensors import SafetensorError

        from searcher.policy.transformers_policy import TransformersPolicy

        try:
            policy = TransformersPolicy.load(spec, threads=threads, merge_adapter=True, dtype=dtype)
        except ConfigError:
            raise
        except (OSError, ValueError, RuntimeError, S3Error, SafetensorError) as e:  # missing, broken, mismatched
            raise ConfigError(f"searcher.reading.reader = {spec!r}: cannot load a transformers model there ({e}); a pointwise "
                              "reader comes from `benchmarks/selection_probe.py run --reader pointwise --save`") from None
        return cls(policy.model, policy.tokenizer, name=spec, threads=threads)

    def logits(self, prompts: Sequence[str]) -> Any:
        """(B,) logit(" yes") - logit(" no") at each pair prompt's last position (with gradient where enabled)."""
        ids = [self.tokenizer.encode(p, add_special_tokens=False)[-self.max_tokens:] for p in prompts]
        out = last_token_logits(self.model, ids, self.pad_id)
        return out[:, self.yes] - out[:, self.no]

    def scores(self, question: str, docs: Sequence[Document]) -> list[float]:
        """Each of `docs`' score for `question`, in order (higher: more likely to help answer it)."""
        import torch

        from s3core.devices import auto_cpu_threads

        out: list[float] = []
        if self.model.device.type == "cpu":  # two threads on a quiet machine, one beside another job (they would stall)
            torch.set_num_threads(self.threads or auto_cpu_threads())
        with torch.no_grad():
            for lo in range(0, len(docs), self.batch):
                out += self.logits([render_pair(question, d, self.words) for d in docs[lo:lo + self.batch]]).tolist()
        return out


def reader_identity(spec: str) -> dict[str, Any]:
    """What a run's identity records of the reader `spec`: its prompt (`WORDS`, `PAIR_TAIL`, `MAX_TOKENS`) and a
    sha256 over its checkpoint's weight files (*.safetensors, *.bin; a LoRA adapter's and its base's), so two runs that
    read with other weights or another prompt never share an identity."""
    import hashlib
    import json
    from pathlib import Path

    from s3core.io import file_sha256
    from searcher.policy.transformers_policy import resolve_checkpoint

    def weights(where: Path | str) -> list[str]:
        if not isinstance(where, Path):  # a hub name: its name is all there is here
            return [where]
        out = [f"{p.name}:{file_sha256(p)}" for p in sorted(where.iterdir())
               if p.is_file() and p.suffix in (".safetensors", ".bin")]
        adapter = where / "adapter_config.json"
        if adapter.is_file():
            base = json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path")
            out += weights(resolve_checkpoint(str(base))) if base else []
        return out

    try:
        files = weights(resolve_checkpoint(spec))
    except S3Error as e:
        raise ConfigError(f"searcher.reading.reader = {spec!r}: {e}") from None
    return {"words": WORDS, "tail": PAIR_TAIL, "max_tokens": MAX_TOKENS,
            "weights_sha256": hashlib.sha256("\n".join(files).encode()).hexdigest()}
