"""Held-out evaluation: one function (`evaluate_heldout`) and one row type (`HeldoutScore`), used by the training
loop (training.heldout.every: heldout/* metrics, RUN_DIR/heldout.jsonl) and by `s3 train-eval` (`heldout_rewards`:
the same training reward on questions kept out of training, for a trained checkpoint and the untrained base model,
decoded greedily). `split="train"` scores the training questions instead (greedy): what RL learned where it trained,
apart from its sampling noise.

    ev = evaluate_heldout(examples, results, scored)     # greedy rollouts and their RewardBatch, in question order
    ev.score.metrics()      # {"heldout/reward": ..., "heldout/acc_s3": ...}   the loop's keys (NaN: nothing scored)
    ev.score.summary()      # {"reward_mean": ..., "acc_s3_mean": ...}         `s3 train-eval`'s keys (None)
    HeldoutScore.from_row(row)                           # either kind of row back (heldout.jsonl or train-eval's)
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator_adapters.client import run_sync
from s3core.errors import S3Error
from s3core.types import QAExample, SearchResult
from searcher.config import RetrieverConfig, SearcherConfig
from training.config import TrainSettings
from training.rewards import RewardBatch

__all__ = ["HeldoutEval", "HeldoutScore", "evaluate_heldout", "heldout_rewards"]

CHUNK = 16  # questions rolled out together: progress after each chunk, the batch the engines are sized for


def _mean(xs: list[float | None] | None) -> float | None:
    vals = [x for x in xs or [] if x is not None]
    return sum(vals) / len(vals) if vals else None


@dataclass(frozen=True)
class HeldoutScore:
    """A policy's greedy rollouts of the held-out questions, scored with the training reward: the mean reward, the
    mean Acc with the searcher's documents (acc_s3) and naive RAG's on the same questions (acc_rag; None when the
    reward has no such term), how many were scored, mean turns and documents."""

    questions: int
    scored: int
    reward: float | None
    acc_s3: float | None
    acc_rag: float | None
    turns: float
    docs: float
    # retrieval_gain's terms (the reward's counts, whatever cost weighs them): gold paragraphs added beyond naive
    # RAG's top-k and other paragraphs added, a question; None for the other rewards (their rows leave the keys out)
    gold_added: float | None = None
    other_added: float | None = None

    def metrics(self) -> dict[str, float]:
        """The training loop's keys (metrics.jsonl, heldout.jsonl): NaN where nothing was scored."""
        nan = float("nan")
        row = {"heldout/reward": nan if self.reward is None else self.reward,
               "heldout/acc_s3": nan if self.acc_s3 is None else self.acc_s3,
               "heldout/acc_rag": nan if self.acc_rag is None else self.acc_rag,
               "heldout/scored": float(self.scored), "heldout/turns": self.turns, "heldout/docs": self.docs}
        if self.gold_added is not None:
            row["heldout/gold_added"] = self.gold_added
        if self.other_added is not None:
            row["heldout/other_added"] = self.other_added
        return row

    def summary(self) -> dict[str, Any]:
        """`s3 train-eval`'s keys: None where nothing was scored."""
        out = {"questions": self.questions, "scored": self.scored, "reward_mean": self.reward,
               "acc_s3_mean": self.acc_s3, "acc_rag_mean": self.acc_rag, "turns_mean": self.turns,
               "docs_mean": self.docs}
        if self.gold_added is not None or self.other_added is not None:
            out.update(gold_added_mean=self.gold_added, other_added_mean=self.other_added)
        return out

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> HeldoutScore:
        """A row of either kind back: heldout.jsonl's (heldout/acc_s3, ...: also the committed ones under
        benchmarks/results) or `s3 train-eval`'s (acc_s3_mean, ...).

        >>> HeldoutScore.from_row({"questions": 2, "heldout/reward": 0.5, "heldout/acc_s3": float("nan"),
        ...                        "heldout/acc_rag": 0.25, "heldout/scored": 2.0, "heldout/turns": 1.0,
        ...                        "heldout/docs": 3.0}).summary()["acc_s3_mean"] is None
        True
        """
        def num(v: Any) -> float | None:
            return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

        if "heldout/reward" in row:
            get = lambda k: row.get(f"heldout/{k}")  # noqa: E731
        else:
            get = lambda k: row.get(f"{k}_mean", row.get(k))  # noqa: E731
        return cls(questions=int(row.get("questions", 0)), scored=int(get("scored") or 0), reward=num(get("reward")),
                   acc_s3=num(get("acc_s3")), acc_rag=num(get("acc_rag")), turns=float(get("turns") or 0.0),
                   docs=float(get("docs") or 0.0), gold_added=num(get("gold_added")),
                   other_added=num(get("other_added")))


@dataclass(frozen=True)
class HeldoutEval:
    """One held-out evaluation: its score and one row per question (what the searcher did and how both contexts
    scored: paired comparisons between checkpoints and against naive RAG)."""

    score: HeldoutScore
    questions: list[dict[str, Any]]


def evaluate_heldout(examples: list[QAExample], results: list[SearchResult], scored: RewardBatch) -> HeldoutEval:
    """The held-out evaluation of rollouts `results` of `examples` (one each, in order) scored as `scored`."""
    n = len(results)
    score = HeldoutScore(questions=len(examples), scored=sum(r is not None for r in scored.rewards),
                         reward=_mean(list(scored.rewards)), acc_s3=_mean(scored.acc_s3), acc_rag=_mean(scored.acc_rag),
                         turns=sum(r.turns for r in results) / n, docs=sum(len(r.documents) for r in results) / n,
                         gold_added=_mean(scored.gold_added), other_added=_mean(scored.other_added))
    rows = [{"id": ex.id, "reward": scored.rewards[i],
             "acc_s3": scored.acc_s3[i] if scored.acc_s3 is not None else None,
             "acc_rag": scored.acc_rag[i] if scored.acc_rag is not None else None, "turns": r.turns,
             **({"gold_added": scored.gold_added[i]} if scored.gold_added is not None else {}),
             **({"other_added": scored.other_added[i]} if scored.other_added is not None else {}),
             "doc_ids": [d.id for d in r.documents], "queries": [st.query for st in r.steps if st.turn > 0]}
            for i, (ex, r) in enumerate(zip(examples, results, strict=True))]
    return HeldoutEval(score=score, questions=rows)


def _policy_loop(scfg: SearcherConfig, policy: str, explicit: Collection[str], index: Path) -> SearcherConfig:
    """The loop to roll `policy` out on: a trained policy's own (its searcher.json's loop keys: queries_per_turn,
    the cap, ...) except the keys the config files or --set give, as `s3 eval` / `s3 search --policy` run it; a run's
    own checkpoints record the run's loop, so they roll out as before. The retriever and index stay the run's (naive
    RAG's top-k is the reward's baseline); the engine and greedy decoding stay `scfg`'s."""
    from searcher.trained import apply_record, find_record

    found = find_record(Path(policy)) if Path(policy).exists() else None
    if found is None:
        return scfg
    loop, _, _ = apply_record(found[0], found[1], scfg, RetrieverConfig(), explicit=explicit, index=index)
    return loop


def heldout_rewards(
    cfg: TrainSettings, policies: list[str], limit: int | None = None, split: str = "heldout",
    questions_out: Path | None = None,
) -> Iterator[dict[str, Any]]:
    """For each policy (a run dir, a checkpoint, or the base model name), as soon as it is done: its HeldoutScore's
    summary (mean reward, Acc(s3), naive RAG's Acc on the same questions, turns, documents) over the held-out
    questions (the last training.heldout.questions of the prepared set; `split="train"`: the questions before them),
    greedy decoding. Every policy is resolved before any runs, so a wrong path fails at once. A trained policy rolls
    out on the loop its searcher.json records (`_policy_loop`). `questions_out`: a jsonl file each policy's
    per-question rows are appended to ({"policy", "split", "id", "reward", "gold_added", "doc_ids", "queries", ...}:
    paired comparisons between policies on the same questions)."""
    from tqdm import tqdm

    from searcher.build import build_policy, build_retriever, build_searcher
    from searcher.policy.base import TokenPolicy
    from searcher.policy.transformers_policy import resolve_checkpoint
    from training.prep.data import load_training_set
    from training.rollouts.executors import make_scorer
    from training.run.build import split_heldout

    if split not in ("heldout", "train"):
        raise S3Error(f"split must be 'heldout' or 'train', got {split!r}")
    for name in policies:
        resolve_checkpoint(name)
    tc = cfg.training
    data = load_training_set(cfg)
    n = tc.heldout.questions
    if n <= 0:
        raise S3Error("set training.heldout.questions > 0 (the questions kept out of training) for train-eval")
    train_qs, held = split_heldout(cfg, data.examples)  # the trainer's own split (training/run/build.py)
    pool = held if split == "heldout" else train_qs
    examples = pool[: limit or len(pool)]
    retriever = build_retriever(cfg.retriever, data.index_dir)
    # the engine: vLLM when searcher.policy says so (the same greedy trajectories, several times the questions/s:
    # benchmarks/results/rollout_engines/), else the transformers policy; an API searcher is not a checkpoint
    engine = "vllm" if cfg.searcher.policy == "vllm" else "transformers"
    scfg = cfg.searcher.model_copy(update={"temperature": 0.0, "policy": engine})
    end_to_end = tc.mode == "search_r1"
    for name in policies:
        pcfg = _policy_loop(scfg, name, cfg.explicit_keys, data.index_dir)
        pol = build_policy(pcfg.model_copy(update={"policy_path": name}))
        agent = build_searcher(pcfg, retriever, pol, k0=cfg.retriever.k, agent="search_r1" if end_to_end else "s3")
        results: list[SearchResult] = []
        with tqdm(total=len(examples), desc=f"{split} rollouts ({engine}) {name}", unit="q", file=sys.stderr,
                  leave=False) as bar:
            for lo in range(0, len(examples), CHUNK):
                chunk = examples[lo : lo + CHUNK]
                results += agent.search([e.question for e in chunk])
                bar.update(len(chunk))
        # the trainer's own scorer (training/rollouts/executors.py): the same reward, generator, EM / F1 and query tags
        scorer = make_scorer(cfg, data.baseline, end_to_end=end_to_end,
                             decode=pol.decode if isinstance(pol, TokenPolicy) else None)
        ev = evaluate_heldout(examples, results, run_sync(scorer.score(results, examples)))
        if questions_out is not None:
            questions_out.parent.mkdir(parents=True, exist_ok=True)
            with questions_out.open("a", encoding="utf-8") as f:
                f.writelines(json.dumps({"policy": name, "split": split, **row}) + "\n" for row in ev.questions)
        yield {"policy": name, "split": split, **ev.score.summary()}
