"""Held-out comparison of policies (`s3 train-eval`): the same training reward on questions kept out of training,
for a trained checkpoint and the untrained base model, decoded greedily (temperature 0). `split="train"` scores the
training questions instead (greedy): what RL learned where it trained, apart from its sampling noise."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from generator_adapters.client import run_sync
from s3core.errors import S3Error
from training.config import TrainSettings

__all__ = ["heldout_rewards"]

CHUNK = 16  # questions rolled out together: progress after each chunk, the batch the engines are sized for


def heldout_rewards(
    cfg: TrainSettings, policies: list[str], limit: int | None = None, split: str = "heldout"
) -> Iterator[dict[str, Any]]:
    """For each policy (a run dir, a checkpoint, or the base model name), as soon as it is done: mean reward, mean
    Acc(s3), the naive-RAG baseline's mean Acc on the same questions, turns and documents over the held-out questions
    (the last training.heldout.questions of the prepared set; `split="train"`: the questions before them), greedy
    decoding. Every policy is resolved before any runs, so a wrong path fails at once."""
    from tqdm import tqdm

    from searcher.build import build_policy, build_retriever, build_searcher
    from searcher.policy.base import TokenPolicy
    from searcher.policy.transformers_policy import resolve_checkpoint
    from training.build import split_heldout
    from training.data import load_training_set
    from training.executors import make_scorer

    if split not in ("heldout", "train"):
        raise S3Error(f"split must be 'heldout' or 'train', got {split!r}")
    for name in policies:
        resolve_checkpoint(name)
    tc = cfg.training
    data = load_training_set(cfg)
    n = tc.heldout.questions
    if n <= 0:
        raise S3Error("set training.heldout.questions > 0 (the questions kept out of training) for train-eval")
    train_qs, held = split_heldout(cfg, data.examples)  # the trainer's own split (training/build.py)
    pool = held if split == "heldout" else train_qs
    examples = pool[: limit or len(pool)]
    retriever = build_retriever(cfg.retriever, data.index_dir)
    # the engine: vLLM when searcher.policy says so (the same greedy trajectories, several times the questions/s:
    # benchmarks/results/rollout_engines/), else the transformers policy; an API searcher is not a checkpoint
    engine = "vllm" if cfg.searcher.policy == "vllm" else "transformers"
    scfg = cfg.searcher.model_copy(update={"temperature": 0.0, "policy": engine})
    end_to_end = tc.mode == "search_r1"
    for name in policies:
        pol = build_policy(scfg.model_copy(update={"policy_path": name}))
        agent = build_searcher(scfg, retriever, pol, k0=cfg.retriever.k, agent="search_r1" if end_to_end else "s3")
        results = []
        with tqdm(total=len(examples), desc=f"{split} rollouts ({engine}) {name}", unit="q", file=sys.stderr,
                  leave=False) as bar:
            for lo in range(0, len(examples), CHUNK):
                chunk = examples[lo : lo + CHUNK]
                results += agent.search([e.question for e in chunk])
                bar.update(len(chunk))
        # the trainer's own scorer (training/executors.py): the same reward, generator, EM / F1 and query tags
        scorer = make_scorer(cfg, data.baseline, end_to_end=end_to_end,
                             decode=pol.decode if isinstance(pol, TokenPolicy) else None)
        scored = run_sync(scorer.score(results, examples))
        r = [x for x in scored.rewards if x is not None]
        acc = [x for x in (scored.acc_s3 or []) if x is not None]
        rag = [x for x in (scored.acc_rag or []) if x is not None]
        yield {
            "policy": name, "split": split, "questions": len(examples), "scored": len(r),
            "reward_mean": sum(r) / len(r) if r else None,
            "acc_s3_mean": sum(acc) / len(acc) if acc else None,
            "acc_rag_mean": sum(rag) / len(rag) if rag else None,
            "turns_mean": sum(x.turns for x in results) / len(results),
            "docs_mean": sum(len(x.documents) for x in results) / len(results),
        }
