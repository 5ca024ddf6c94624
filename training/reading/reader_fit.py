"""The reader taught by the frozen generator's credit (REPLUG-LSR's loss, on the reading searcher's own reader).

    fit = ReaderFit("smollm2-135m-instruct", lora_r=16, lr=2e-4)
    loss = fit.step([(question, candidates, gains), ...])   # one optimizer step over a few questions
    fit.save(run_dir / "checkpoints" / "reader-step-20")   # adapter + optimizer state: `ReaderFit.resume` reads it

Per question, the reader scores each candidate page (searcher/title_following/reader.py: logit(" yes") - logit(" no")
of its pair prompt, the very scores the searcher ranks with); the loss is KL(q || p) between the credit's distribution
over the question's candidates, q = softmax(gain / temperature), and the reader's, p = softmax(score). The reader is
pulled to rank pages as the generator's own gain does, with no gold paragraph anywhere (`labels = "gold"`: q uniform over
the gold candidates instead, where the data has them). LoRA on the small base (the shipped reader's shape: rank 16 on
every linear layer).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from s3core.errors import ConfigError
from s3core.types import Document

__all__ = ["ReaderFit", "credit_target", "gold_target", "kl_to_target"]


def credit_target(gains: Sequence[float], temperature: float) -> list[float]:
    """softmax(gain / temperature) over a question's candidates.

    >>> [round(x, 3) for x in credit_target([0.0, math.log(3)], 1.0)]
    [0.25, 0.75]
    """
    if temperature <= 0:
        raise ConfigError(f"training.reading.temperature must be > 0, got {temperature}")
    z = [g / temperature for g in gains]
    m = max(z)
    e = [math.exp(x - m) for x in z]
    s = sum(e)
    return [x / s for x in e]


def gold_target(gold: Sequence[bool]) -> list[float] | None:
    """Uniform over the gold candidates; None where there is none.

    >>> gold_target([True, False, True]), gold_target([False])
    ([0.5, 0.0, 0.5], None)
    """
    n = sum(gold)
    return [float(g) / n for g in gold] if n else None


def kl_to_target(logits: Any, target: Sequence[float]) -> Any:
    """KL(target || softmax(logits)) for one question (a torch scalar with gradient).

    >>> import torch
    >>> round(float(kl_to_target(torch.tensor([0.0, 0.0]), [0.5, 0.5])), 6)
    0.0
    """
    import torch

    t = torch.tensor(list(target), dtype=logits.dtype)
    logp = torch.log_softmax(logits, dim=-1)
    keep = t > 0
    return (t[keep] * (torch.log(t[keep]) - logp[keep])).sum()


class ReaderFit:
    """A LoRA pointwise reader being trained. `threads`: torch threads (None = the runtime's choice)."""

    def __init__(self, base: str, *, lora_r: int = 16, lora_alpha: int = 32, lr: float = 2e-4, seed: int = 0,
                 threads: int | None = None, resume: Path | None = None) -> None:
        import torch

        from searcher.policy.transformers_policy import TransformersPolicy
        from searcher.title_following.reader import PointwiseReader

        torch.manual_seed(seed)
        if threads:
            torch.set_num_threads(threads)
        self.base = base
        self.policy = TransformersPolicy.load(base, merge_adapter=True)
        if resume is not None:
            from peft import PeftModel

            self.policy.model = PeftModel.from_pretrained(self.policy.model, str(resume), is_trainable=True)
        else:
            self.policy.enable_lora(r=lora_r, alpha=lora_alpha)
        self.reader = PointwiseReader(self.policy.model, self.policy.tokenizer, name="reader", threads=threads)
        params = [p for p in self.policy.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=lr)
        self.steps = 0
        if resume is not None and (resume / "optimizer.pt").is_file():
            state = torch.load(resume / "optimizer.pt", weights_only=True)
            self.opt.load_state_dict(state["optimizer"])
            self.steps = int(state["steps"])
        self.rng = random.Random(seed)

    def step(self, items: Sequence[tuple[str, Sequence[Document], Sequence[float]]]) -> float:
        """One optimizer step: the mean KL over `items` (question, candidates, target distribution)."""
        from searcher.title_following.reader import render_pair

        self.policy.model.train()
        self.opt.zero_grad()
        total = 0.0
        for question, docs, target in items:
            logits = self.reader.logits([render_pair(question, d, self.reader.words) for d in docs])
            loss = kl_to_target(logits, target) / len(items)
            loss.backward()
            total += float(loss.detach())
        self.opt.step()
        self.policy.model.eval()
        self.steps += 1
        return total

    def scores(self, question: str, docs: Sequence[Document]) -> list[float]:
        return self.reader.scores(question, docs) if docs else []

    def save(self, where: Path, *, optimizer: bool = True) -> Path:
        """The adapter (loadable by `PointwiseReader.load`, its base named as given) and, for a checkpoint, the
        optimizer state."""
        import torch

        self.policy.save(where)
        cfg_path = where / "adapter_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        cfg["base_model_name_or_path"] = self.base  # the offline name, not the folder it was converted into
        cfg_path.write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
        if optimizer:
            torch.save({"optimizer": self.opt.state_dict(), "steps": self.steps}, where / "optimizer.pt")
        return where
