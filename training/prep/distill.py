"""Distillation by rejection sampling (training.sft.keep = 'gbr_positive'): which oracle trajectories the warm-up learns.

The format warm-up (training/prep/oracle.py) imitates an oracle that knows each question's gold supporting titles. Not every
oracle trajectory earns the reward: the generator may still fail from the gold paragraphs, or from the ones the oracle
could reach in three searches. Imitating those teaches the format and nothing about what helps the generator. Here
every candidate question's oracle trajectory is scored once with the frozen generator (Acc of its documents, the RL
reward's Acc), and only the ones whose documents beat naive RAG (GBR = Acc(D_oracle) - Acc(D_RAG) > 0) are kept:
the warm-up steps then draw their batches from those questions only (DGPO's distillation on what succeeds; s3's
GBR as the acceptance test).

    pool = rejection_sample(cfg, examples, oracle, data, run_dir)     # indices into `examples`

It is part of a run's preparation stage (training/run/build.py's prepare_run: before anything is built, logged), never a
side effect of building; `s3 train --dry-run` does not run it.

The scores are cached in RUN_DIR/distill.jsonl (one row per question: acc, acc_rag, gbr, the oracle's documents, the
cache key), so a resumed run makes no generator call; a change of generator, prompt, metric or loop recomputes.

The retrieval check (issue 45, step 4; no generator call) accepts an oracle trajectory where its documents hold a
gold supporting paragraph that naive RAG's top-k (the begin-with-search turn) lacked (`gold_added`):

    pool = retrieval_sample(cfg, examples, oracle, run_dir)          # indices into `examples`; distill_summary.json

With the copyable teacher (training/prep/oracle.py) that is a trajectory whose every query the student could have copied
from what it saw, and which found a gold paragraph beyond naive RAG.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from generator_adapters.client import run_sync
from s3core.errors import S3Error
from s3core.io import append_jsonl, read_jsonl, repair_tail, text_sha256, write_json_atomic
from s3core.types import QAExample, SearchResult
from training.config import TrainSettings
from training.prep.data import TrainingSet

if TYPE_CHECKING:
    from searcher.agent import S3Searcher

__all__ = ["DISTILL_FILE", "gold_added", "rejection_sample", "retrieval_sample"]

DISTILL_FILE = "distill.jsonl"
Log = Callable[[str], object]


def _key(cfg: TrainSettings, baseline_key: dict[str, Any]) -> str:
    """What a cached score depends on: the baseline's key (generator, prompt, retriever, k, metric) and the loop."""
    s = cfg.searcher
    loop: dict[str, Any] = {"k": s.k, "max_turns": s.max_turns, "max_select": s.max_select, "doc_token_budget": s.doc_token_budget,
            "context_cap": s.context_cap}
    if s.additive:  # only when set: the keys of caches written before the setting existed stay what they were
        loop["additive"] = True
    teacher = cfg.training.sft.teacher
    if teacher != "gold_title":  # the same: attempts 1-2's keys unchanged
        loop["teacher"] = teacher
    key = {"baseline": baseline_key, "loop": loop}
    return text_sha256(json.dumps(key, sort_keys=True, default=str))[:16]


def candidate_order(n: int, seed: int) -> list[int]:
    """The seeded order the candidates are tried in (a prefix of it with training.sft.candidates)."""
    order = list(range(n))
    random.Random(seed * 7919 + 17).shuffle(order)
    return order


def rejection_sample(cfg: TrainSettings, examples: list[QAExample], oracle: S3Searcher, data: TrainingSet,
                     run_dir: Path, log: Log = print, batch: int = 16) -> list[int]:
    """Indices of `examples` whose oracle trajectory beats naive RAG with the frozen generator (GBR > 0). Candidates:
    the first training.sft.candidates questions of a seeded order (all when None). Scored in batches, each appended
    to RUN_DIR/distill.jsonl (resumable); a failed generator call is retried on the next run, never counted as 0."""
    from tqdm import tqdm

    from training.prep.data import make_accuracy

    sft, baseline = cfg.training.sft, data.baseline
    order = candidate_order(len(examples), cfg.training.seed)
    if sft.candidates is not None:
        order = order[: sft.candidates]
    missing = [examples[i].id for i in order if examples[i].id not in baseline]
    if missing:
        raise S3Error(f"training.sft.keep = 'gbr_positive' needs the naive-RAG baseline of every candidate ({len(missing)} "
                      f"have none, e.g. {missing[0]!r}): use reward 'gbr' or 'acc_plus_gbr' (s3 mode)")
    if data.baseline_key is None:
        raise S3Error("training.sft.keep = 'gbr_positive' needs a training set loaded with its naive-RAG baseline "
                      "(training/prep/data.py `load_training_set`)")
    key = _key(cfg, data.baseline_key)
    path = run_dir / DISTILL_FILE
    repair_tail(path)
    done: dict[str, dict[str, Any]] = {}
    if path.is_file():
        done = {r["id"]: r for r in read_jsonl(path, torn_tail="skip") if r.get("key") == key and r.get("acc") is not None}
    todo = [i for i in order if examples[i].id not in done]
    if todo:
        log(f"train: distillation: scoring the oracle's trajectories of {len(todo)} of {len(order)} candidate questions "
            f"with the generator (GBR > 0 is kept; cached in {path})")
        accuracy = make_accuracy(cfg)
        try:
            with tqdm(total=len(todo), desc="distill: oracle GBR", unit="q") as bar:
                for start in range(0, len(todo), batch):
                    part = [examples[i] for i in todo[start : start + batch]]
                    results = oracle.search([e.question for e in part])
                    docs = [list(r.documents) for r in results]
                    acc = run_sync(accuracy([e.question for e in part], docs, [e.golden_answers for e in part]))
                    rows = []
                    for e, r, d, a in zip(part, results, docs, acc, strict=True):
                        row = {"id": e.id, "key": key, "acc": a, "acc_rag": baseline[e.id],
                               "gbr": None if a is None else a - baseline[e.id], "turns": r.turns,
                               "doc_ids": [x.id for x in d]}
                        rows.append(row)
                        if a is not None:
                            done[e.id] = row
                    append_jsonl(path, rows)
                    bar.update(len(part))
        finally:
            accuracy.close()
    pool = [i for i in order if examples[i].id in done and float(done[examples[i].id]["gbr"]) > 0]
    scored = [done[examples[i].id] for i in order if examples[i].id in done]
    summary = {
        "candidates": len(order), "scored": len(scored), "failed_calls": len(order) - len(scored), "kept": len(pool),
        "kept_share": len(pool) / max(1, len(scored)),
        "acc_oracle": sum(float(r["acc"]) for r in scored) / max(1, len(scored)),
        "acc_rag": sum(float(r["acc_rag"]) for r in scored) / max(1, len(scored)),
        "gbr_negative": sum(1 for r in scored if float(r["gbr"]) < 0),
    }
    write_json_atomic(run_dir / "distill_summary.json", summary)
    log(f"train: distillation: {len(pool)} of {len(scored)} oracle trajectories beat naive RAG (GBR > 0; oracle Acc "
        f"{summary['acc_oracle']:.3f} vs naive RAG {summary['acc_rag']:.3f}); the warm-up learns from those")
    if not pool:
        raise S3Error("training.sft.keep = 'gbr_positive': no oracle trajectory beat naive RAG on the candidates "
                      f"({len(scored)} scored; {run_dir / 'distill_summary.json'}); use keep = 'all' or more candidates")
    return pool


def gold_added(result: SearchResult, gold_ids: list[str]) -> bool | None:
    """Whether a trajectory's documents hold a gold supporting paragraph that naive RAG's top-k (its begin-with-search
    turn, `training.rewards.top_k_of`) lacked; None where it cannot tell (no supporting ids, no begin-with-search).

    >>> from s3core.types import Document, SearchStep
    >>> r = SearchResult(question="q", documents=[Document(id=i, text="") for i in ("a", "b", "g2")],
    ...                  steps=[SearchStep(turn=0, retrieved_ids=["a", "b"])])
    >>> gold_added(r, ["g1", "g2"]), gold_added(r, ["a"]), gold_added(r, [])
    (True, False, None)
    """
    from training.rewards import top_k_of

    top = top_k_of(result)
    if top is None or not gold_ids:
        return None
    return bool(({d.id for d in result.documents} - set(top)) & set(gold_ids))


def retrieval_sample(cfg: TrainSettings, examples: list[QAExample], oracle: S3Searcher, run_dir: Path,
                     log: Log = print, batch: int = 64) -> list[int]:
    """Indices of `examples` whose oracle trajectory adds gold beyond naive RAG's top-k (`gold_added`): the retrieval
    check, no generator call. Candidates as in `rejection_sample` (the first training.sft.candidates of the seeded
    order, all when None). Writes RUN_DIR/distill_summary.json (candidates, kept, the trajectories that stopped without
    a query, queries per question); nothing to cache: the oracle and the retriever are cheap and deterministic."""
    sft = cfg.training.sft
    order = candidate_order(len(examples), cfg.training.seed)
    if sft.candidates is not None:
        order = order[: sft.candidates]
    log(f"train: distillation: the retrieval check on the oracle's trajectories of {len(order)} candidate questions "
        "(kept where they add a gold paragraph naive RAG's top-k lacked; no generator call)")
    verdicts: dict[int, bool | None] = {}
    stopped = queries = 0
    for start in range(0, len(order), batch):
        part = order[start : start + batch]
        for i, r in zip(part, oracle.search([examples[i] for i in part]), strict=True):
            verdicts[i] = gold_added(r, examples[i].supporting_ids)
            asked = sum(1 for s in r.steps if s.turn > 0 and s.query)
            queries += asked
            stopped += asked == 0
    pool = [i for i in order if verdicts.get(i)]
    checked = sum(v is not None for v in verdicts.values())
    summary = {"check": "gold_added", "candidates": len(order), "checked": checked, "kept": len(pool),
               "kept_share": len(pool) / max(1, checked), "stopped_without_query": stopped,
               "queries_per_question": queries / max(1, len(order))}
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "distill_summary.json", summary)
    log(f"train: distillation: {len(pool)} of {checked} oracle trajectories add gold beyond naive RAG's top-k; the "
        f"warm-up learns from those ({stopped} stopped without a query)")
    if not pool:
        raise S3Error("the retrieval check kept no oracle trajectory (none added a gold paragraph beyond naive RAG's "
                      f"top-k on {checked} candidates; {run_dir / 'distill_summary.json'}): use keep = 'all' or more "
                      "candidates")
    return pool
