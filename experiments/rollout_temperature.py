"""Which rollout temperature keeps GRPO groups informative (issue 45, step 3), measured on the real s3 loop.

    .venv/bin/python benchmarks/rollout_temperature.py --config configs/transfer3.toml \
        --policy runs/transfer3/phase1/checkpoints/step_000008 --questions 16 --temperatures 0.6 0.8 1.0 1.2 \
        --out benchmarks/results/transfer3/temperature_warmed

GRPO gives a group whose rewards are all equal zero advantage: only the groups with a reward difference teach. For N
questions (the prepared training set's HELD-OUT questions by default, the trainer's own split; or `--split train`, or
a `--questions-file`) and each temperature, this rolls out a group of G (default training.rollout.group_size) per
question through the training executor's rollout path (training/rollouts/executors.py `LocalExecutor`: the config's loop,
training.rollout.engine, the learner's autocast), scores every rollout with the configured reward (`make_scorer`:
training.reward and training.invalid_penalty, as the trainer scores them) and reports per temperature:

- `informative`: the share of groups with any reward difference (two or more scored rollouts, not all equal: the
  groups training.update.drop_flat_groups keeps, training/learn/advantages.py `flat_groups`); `task_informative`: those whose
  TASK reward differs (reward - format term), `format_only`: those whose only difference is the format term
  (`format_only_groups`: the ones worth least);
- the mean and std of the reward over scored rollouts and the mean within-group std (the size of GRPO's signal);
- `valid_action`: the share of rollouts with at least one valid reply (`first_reply_valid`: the reply to naive RAG's
  top-k itself; `all_valid`: no invalid reply), `searched`: with at least one search turn;
- `added`: the mean number of documents a rollout added beyond naive RAG's top-k (the begin-with-search turn),
  `gold_added`: the share of rollouts adding a gold supporting paragraph (`groups_gold_added`: groups where one did);
- the seconds the rollouts and the scoring took.

The questions and the sampling seeds are the same at every temperature: question i's group is sampled after seeding
Python, numpy and torch with (seed, i) (`--chunk` questions share one call and its seed; a vLLM engine samples with
its own engine seed instead). A reward that calls the frozen generator (anything but training/rewards.py's
NO_GENERATOR_REWARDS) is refused unless --allow-generator.

Output in --out: rows.jsonl (one row per temperature and question: rewards, format terms, what each rollout did; a
killed run resumes there, and a later run with more temperatures or questions adds only what is missing; kept as
rows.jsonl.gz, as benchmarks/results keeps it, it is read as it is and unpacked at the first append), run.json (what the
rows were measured with: a resume with other settings is refused), results.json, report.md (the table) and
informative.png (informative share against temperature).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from s3core.errors import S3Error
from s3core.types import QAExample, SearchResult

if TYPE_CHECKING:
    from searcher.build import AgentKind

__all__ = ["group_row", "main", "measure", "rollout_stats", "summarize", "table"]

ROWS_FILE = "rows.jsonl"
RUN_FILE = "run.json"
RESULTS_FILE = "results.json"
REPORT_FILE = "report.md"
PLOT_FILE = "informative.png"

# (temperature, examples: each question repeated G times, in order, seed) -> rollouts in the same order
RolloutFn = Callable[[float, list[QAExample], int], list[SearchResult]]
# (rollouts, examples) -> (rewards: None = not scored, format terms: what the reward's format term added)
ScoreFn = Callable[[list[SearchResult], list[QAExample]], tuple[list[float | None], list[float]]]


# ------------------------------------------------------------------------------------------------ pure pieces
def rollout_stats(result: SearchResult, gold: Sequence[str]) -> dict[str, Any]:
    """What one rollout did, against naive RAG's top-k (its begin-with-search turn) and the gold supporting ids.

    >>> from s3core.types import Document, SearchStep
    >>> r = SearchResult(question="q", documents=[Document(id=d, text="") for d in ["a", "b", "g"]],
    ...                  steps=[SearchStep(turn=0, retrieved_ids=["a", "b"]), SearchStep(turn=1, query="x"),
    ...                         SearchStep(turn=2, invalid_reason="no action")])
    >>> s = rollout_stats(r, ["g", "z"])
    >>> s["added_ids"], s["gold_added"], s["replies"], s["invalid_replies"], s["first_reply_valid"], s["searches"]
    (['g'], True, 3, 1, True, 1)
    """
    from training.rewards import top_k_of

    top = top_k_of(result)
    base = set(top or [])
    added = [d.id for d in result.documents if d.id not in base]
    invalid = sum(1 for s in result.steps if s.invalid_reason)
    return {
        "top_k": top is not None,
        "docs": len(result.documents),
        "added_ids": added,
        "gold_added": bool(set(added) & set(gold)),
        "replies": len(result.steps),
        "invalid_replies": invalid,
        "first_reply_valid": bool(result.steps) and result.steps[0].invalid_reason is None,
        "turns": result.turns,
        "searches": sum(1 for s in result.steps if s.turn > 0 and s.query is not None),
        "queries": [s.query for s in result.steps if s.turn > 0 and s.query is not None],
        "first_reply": result.steps[0].policy_text[:160] if result.steps else None,
        "error": result.error,
    }


def group_row(temperature: float, index: int, example: QAExample, results: Sequence[SearchResult],
              rewards: Sequence[float | None], format_terms: Sequence[float], seconds: float) -> dict[str, Any]:
    """The rows.jsonl row of one question's group at one temperature."""
    if not len(results) == len(rewards) == len(format_terms):
        raise ValueError(f"{len(results)} rollouts, {len(rewards)} rewards, {len(format_terms)} format terms")
    return {"temperature": float(temperature), "index": index, "id": example.id,
            "rewards": [None if r is None else float(r) for r in rewards],
            "format_terms": [float(f) for f in format_terms], "seconds": round(float(seconds), 3),
            "rollouts": [rollout_stats(r, example.supporting_ids) for r in results]}


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _share(flags: Iterable[bool]) -> float | None:
    v = list(flags)
    return sum(v) / len(v) if v else None


def summarize_temperature(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The measures of one temperature's group rows (see the module docstring).

    >>> row = lambda rw, ft: {"rewards": rw, "format_terms": ft, "seconds": 1.0, "rollouts": [
    ...     {"docs": 3, "added_ids": [], "gold_added": False, "replies": 1, "invalid_replies": 0,
    ...      "first_reply_valid": True, "searches": 0}] * len(rw)}
    >>> s = summarize_temperature([row([1.0, 0.0], [0.0, 0.0]), row([0.0, -0.1], [0.0, -0.1]),
    ...                            row([0.5, 0.5], [0.0, 0.0]), row([None, 0.5], [0.0, 0.0])])
    >>> s["groups"], s["informative"], s["task_informative"], s["format_only"], s["flat"], s["unscored_groups"]
    (4, 0.5, 0.25, 0.25, 0.25, 1)
    """
    from training.learn import advantages

    groups = len(rows)
    informative = task = fmt = flat = unscored = 0
    group_std: list[float] = []
    for r in rows:
        rewards, terms = list(r["rewards"]), list(r["format_terms"])
        g = len(rewards)
        scored = [x for x in rewards if x is not None]
        if len(scored) < 2:
            unscored += 1
            continue
        group_std.append(statistics.pstdev(scored))
        if advantages.flat_groups(rewards, g):
            flat += 1
            continue
        informative += 1
        if advantages.format_only_groups(rewards, terms, g):
            fmt += 1
        else:
            task += 1
    scored_all = [x for r in rows for x in r["rewards"] if x is not None]
    outs = [o for r in rows for o in r["rollouts"]]
    replies = sum(o["replies"] for o in outs)
    seconds = sum(float(r["seconds"]) for r in rows)

    def frac(n: int) -> float | None:
        return n / groups if groups else None

    return {
        "groups": groups,
        "rollouts": len(outs),
        "informative": frac(informative),
        "task_informative": frac(task),
        "format_only": frac(fmt),
        "flat": frac(flat),
        "unscored_groups": unscored,  # fewer than two scored rollouts: no GRPO advantage either
        "reward_mean": _mean(scored_all),
        "reward_std": statistics.pstdev(scored_all) if len(scored_all) >= 2 else None,
        "group_std_mean": _mean(group_std),
        "missing_rewards": sum(x is None for r in rows for x in r["rewards"]),
        "valid_action": _share(o["invalid_replies"] < o["replies"] for o in outs),
        "first_reply_valid": _share(bool(o["first_reply_valid"]) for o in outs),
        "all_valid": _share(o["invalid_replies"] == 0 for o in outs),
        "invalid_reply_rate": sum(o["invalid_replies"] for o in outs) / replies if replies else None,
        "searched": _share(o["searches"] > 0 for o in outs),
        "searches_mean": _mean([float(o["searches"]) for o in outs]),
        "docs_mean": _mean([float(o["docs"]) for o in outs]),
        "added": _mean([float(len(o["added_ids"])) for o in outs]),
        "gold_added": _share(bool(o["gold_added"]) for o in outs),
        "groups_gold_added": _share(any(o["gold_added"] for o in r["rollouts"]) for r in rows),
        "seconds": round(seconds, 1),
        "seconds_per_rollout": seconds / len(outs) if outs else None,
    }


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """summarize_temperature per temperature, keyed by the temperature as text ("0.6"), in temperature order."""
    by_t: dict[float, list[dict[str, Any]]] = {}
    for r in rows:
        by_t.setdefault(float(r["temperature"]), []).append(r)
    return {_tkey(t): summarize_temperature(sorted(by_t[t], key=lambda r: int(r["index"]))) for t in sorted(by_t)}


def best_temperature(summary: dict[str, dict[str, Any]]) -> str | None:
    """The temperature whose groups are most often informative in their TASK reward (ties: the lower temperature,
    which also keeps more valid replies); None when no temperature made any group informative in it.

    >>> best_temperature({"0.6": {"task_informative": 0.5}, "1.0": {"task_informative": 0.5}, "1.2": {"task_informative": 0.25}})
    '0.6'
    >>> best_temperature({"0.6": {"task_informative": 0.0}}) is None
    True
    """
    scored = [(v["task_informative"], -float(t), t) for t, v in summary.items() if v.get("task_informative")]
    return max(scored)[2] if scored else None


def _tkey(t: float) -> str:
    return f"{float(t):g}"


def _fmt(v: Any, pct: bool = False, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if pct:
        return f"{100 * v:.0f}%"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


COLUMNS = [  # (key, header, as a percentage)
    ("groups", "groups", False), ("informative", "informative", True), ("task_informative", "task-informative", True),
    ("format_only", "format-only", True), ("reward_mean", "reward mean", False), ("reward_std", "reward std", False),
    ("group_std_mean", "in-group std", False), ("valid_action", "valid action", True),
    ("first_reply_valid", "first reply valid", True), ("searched", "searched", True), ("added", "added docs", False),
    ("gold_added", "gold added", True), ("groups_gold_added", "groups w/ gold added", True),
    ("seconds", "seconds", False),
]


def table(summary: dict[str, dict[str, Any]]) -> str:
    """The markdown table of `summarize`'s output, one line per temperature.

    >>> print(table({"0.6": {"groups": 2, "informative": 0.5, "seconds": 10.0}}).splitlines()[2])
    | 0.6 | 2 | 50% | - | - | - | - | - | - | - | - | - | - | - | 10.0 |
    """
    head = "| temperature | " + " | ".join(h for _, h, _ in COLUMNS) + " |"
    sep = "| ---: | " + " | ".join("---:" for _ in COLUMNS) + " |"
    lines = [head, sep]
    for t, s in summary.items():
        cells = [_fmt(s.get(k), pct=p, digits=1 if k == "seconds" else 3) for k, _, p in COLUMNS]
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summary: dict[str, dict[str, Any]], path: Path, title: str = "") -> None:
    """informative.png: the shares of informative, task-informative groups and valid-action rollouts by temperature."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [float(t) for t in summary]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for key, label, style in (("informative", "informative groups", "o-"),
                              ("task_informative", "task-informative groups", "s--"),
                              ("valid_action", "rollouts with a valid action", "^:")):
        ys = [summary[_tkey(t)].get(key) for t in ts]
        ax.plot(ts, [math.nan if y is None else y for y in ys], style, label=label)
    ax.set_xlabel("rollout temperature")
    ax.set_ylabel("share")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ the loop
def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's generators (each CUDA device's too) from one seed: what a transformers
    policy samples with."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch
    except ImportError:  # a fake rollout in a unit test needs no torch
        return
    torch.manual_seed(seed)


def chunk_seed(seed: int, index: int) -> int:
    """The sampling seed of the chunk that starts at question `index`: the same at every temperature.

    >>> chunk_seed(0, 3) == chunk_seed(0, 3) != chunk_seed(1, 3)
    True
    """
    return seed * 1_000_003 + index


def done_keys(rows: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(_tkey(r["temperature"]), str(r["id"])) for r in rows}


def measure(examples: Sequence[QAExample], temperatures: Sequence[float], group_size: int, *, rollout: RolloutFn,
            score: ScoreFn, rows_path: Path, seed: int = 0, chunk: int = 1,
            progress: Callable[[float, int], None] | None = None,
            on_temperature: Callable[[float], None] | None = None) -> list[dict[str, Any]]:
    """Roll out and score every (temperature, question) not yet in rows_path, appending each chunk's rows as it is
    done; returns all rows (those found and the new ones). `progress(temperature, questions_done)` after each chunk;
    `on_temperature(t)` after each temperature."""
    from s3core.io import append_jsonl, read_log_jsonl, repair_tail

    if group_size < 1 or chunk < 1:
        raise S3Error(f"group size and chunk must be >= 1 (got {group_size}, {chunk})")
    rows = [dict(r) for r in read_log_jsonl(rows_path)]  # or rows.jsonl.gz, as benchmarks/results keeps it
    done = done_keys(rows)
    for t in temperatures:
        for lo in range(0, len(examples), chunk):
            part = [(lo + j, e) for j, e in enumerate(examples[lo : lo + chunk]) if (_tkey(t), e.id) not in done]
            if not part:
                continue
            batch = [e for _, e in part for _ in range(group_size)]
            t0 = time.perf_counter()
            results = rollout(float(t), batch, chunk_seed(seed, lo))
            if len(results) != len(batch):
                raise S3Error(f"{len(results)} rollouts for {len(batch)} requested")
            rewards, terms = score(results, batch)
            per_q = (time.perf_counter() - t0) / len(part)
            new = [group_row(t, i, e, results[k * group_size : (k + 1) * group_size],
                             rewards[k * group_size : (k + 1) * group_size], terms[k * group_size : (k + 1) * group_size],
                             per_q)
                   for k, (i, e) in enumerate(part)]
            repair_tail(rows_path)  # a torn last line cut; rows kept as rows.jsonl.gz unpacked first
            append_jsonl(rows_path, new)
            rows += new
            done |= done_keys(new)
            if progress is not None:
                progress(float(t), len(part))
        if on_temperature is not None:
            on_temperature(float(t))
    return rows


# ------------------------------------------------------------------------------------------------ real components
def needs_generator(cfg: Any) -> bool:
    """Whether the configured reward calls the frozen generator for a rollout (training/rollouts/executors.py make_scorer)."""
    from training.rewards import NO_GENERATOR_REWARDS

    return cfg.training.mode != "search_r1" and cfg.training.reward not in NO_GENERATOR_REWARDS


def choose_questions(cfg: Any, n: int, *, split: str = "heldout", questions_file: Path | None = None
                     ) -> tuple[list[QAExample], Any]:
    """(the first n questions, the prepared training set): the held-out questions of the trainer's own split
    (training/run/build.py `split_heldout`), the training questions before them (`split="train"`), or a questions file's."""
    from s3core.corpus import read_questions
    from training.prep.data import load_training_set
    from training.run.build import split_heldout

    data = load_training_set(cfg)
    if questions_file is not None:
        pool = read_questions(questions_file)
    else:
        train, held = split_heldout(cfg, data.examples)
        if split == "heldout" and not held:
            raise S3Error("training.heldout.questions = 0: no held-out question to measure on (use --split train, "
                          "--questions-file, or --set training.heldout.questions=N)")
        pool = held if split == "heldout" else train
    if n < 1:
        raise S3Error(f"--questions must be >= 1, got {n}")
    chosen = pool[:n]
    ids = [e.id for e in chosen]
    if len(set(ids)) != len(ids):
        raise S3Error("the questions have duplicate ids (rows are kept by id)")
    return chosen, data


class RealRollouts:
    """The training executor's rollout and scoring path, at any temperature: the policy loaded once (a checkpoint, a
    run directory's newest, or training.base_model), one LocalExecutor per temperature over the config's loop
    (training/run/build.py `loop_config`), the configured reward (`make_scorer`)."""

    def __init__(self, cfg: Any, data: Any, policy: str | None, log: Callable[[str], None] = print) -> None:
        import torch

        from s3core.devices import auto_cpu_threads, resolve_device
        from searcher.build import build_retriever
        from searcher.policy.base import TokenPolicy
        from training.rollouts.executors import make_scorer

        self.cfg, tc = cfg, cfg.training
        self.device = resolve_device(tc.learner.device)
        if self.device == "cpu":
            torch.set_num_threads(tc.learner.torch_threads or auto_cpu_threads())
        self.spec = policy or tc.base_model
        t0 = time.perf_counter()
        self.policy = self._load(self.spec)
        log(f"policy {self.spec} ({tc.rollout.engine}, {self.device}) loaded in {time.perf_counter() - t0:.1f}s")
        self.retriever = build_retriever(cfg.retriever, data.index_dir)
        self.agent_kind: AgentKind = "search_r1" if tc.mode == "search_r1" else "s3"
        decode = self.policy.decode if isinstance(self.policy, TokenPolicy) else None
        self.scorer = make_scorer(cfg, data.baseline, end_to_end=self.agent_kind == "search_r1", decode=decode)
        self._executors: dict[float, Any] = {}

    def _load(self, spec: str) -> Any:
        """The rollout engine over `spec`: the transformers policy in the learner's dtype (a LoRA adapter merged, as
        `s3 search --policy` serves it: the same function, faster), or a vLLM engine (searcher.vllm)."""
        from searcher.build import build_policy
        from searcher.policy.transformers_policy import TransformersPolicy

        cfg, tc = self.cfg, self.cfg.training
        if tc.rollout.engine == "vllm":
            vllm = cfg.searcher.vllm.model_copy(update={"seed": tc.seed, **(
                {"dtype": tc.learner.dtype} if cfg.searcher.vllm.dtype == "auto" else {})})
            return build_policy(cfg.searcher.model_copy(update={"policy": "vllm", "policy_path": spec, "vllm": vllm}))
        return TransformersPolicy.load(spec, device=self.device, dtype=tc.learner.dtype,
                                       gen_batch=cfg.searcher.generate_batch, merge_adapter=True)

    def executor(self, temperature: float) -> Any:
        from searcher.build import build_searcher
        from training.rollouts.executors import LocalExecutor
        from training.run.build import loop_config

        if temperature not in self._executors:
            cfg = self.cfg
            loop = loop_config(cfg).model_copy(update={"temperature": float(temperature)})
            agent = build_searcher(loop, self.retriever, self.policy, k0=cfg.retriever.k, agent=self.agent_kind)
            vllm = cfg.training.rollout.engine == "vllm"
            self._executors[temperature] = LocalExecutor(
                agent=agent, greedy_agent=agent, scorer=self.scorer, model=None if vllm else self.policy.model,
                engine=self.policy if vllm else None, autocast=cfg.training.learner.autocast)
        return self._executors[temperature]

    def rollout(self, temperature: float, examples: list[QAExample], seed: int) -> list[SearchResult]:
        seed_everything(seed)
        return self.executor(temperature).rollout(examples, step=0)

    def score(self, results: list[SearchResult], examples: list[QAExample]) -> tuple[list[float | None], list[float]]:
        from training.rewards import format_terms

        batch = next(iter(self._executors.values())).score(results, examples)
        return list(batch.rewards), format_terms(results, self.cfg.training.invalid_penalty)


def identity(cfg: Any, policy: str | None, questions: Sequence[QAExample], group_size: int, seed: int, chunk: int
             ) -> dict[str, Any]:
    """What the rows of an --out folder were measured with: a resume with anything else is refused (more questions or
    temperatures are fine: the questions are a prefix)."""
    from searcher.policy.transformers_policy import resolve_checkpoint
    from training.run.build import loop_config

    tc = cfg.training
    spec = policy or tc.base_model
    where = resolve_checkpoint(spec)
    loop = loop_config(cfg).model_dump(mode="json")
    loop.pop("temperature", None)
    return {"policy": str(where), "engine": tc.rollout.engine, "group_size": group_size, "seed": seed, "chunk": chunk,
            "reward": tc.reward, "retrieval_cost": tc.retrieval_cost, "invalid_penalty": tc.invalid_penalty,
            "mode": tc.mode, "retriever": {"backend": cfg.retriever.backend, "k": cfg.retriever.k},
            "dtype": tc.learner.dtype, "autocast": tc.learner.autocast, "loop": loop}


def check_identity(out: Path, ident: dict[str, Any], question_ids: list[str]) -> None:
    """Write run.json, or check the one there: same settings, and the questions measured so far a prefix of these
    (or these a prefix of them)."""
    from s3core.io import write_json_atomic

    path = out / RUN_FILE
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        diff = sorted(k for k in set(ident) | set(old.get("settings", {})) if old.get("settings", {}).get(k) != ident.get(k))
        if diff:
            raise S3Error(f"{out} holds rows measured with other settings ({', '.join(diff)}): choose another --out, "
                          f"or delete {out / ROWS_FILE} and {path}")
        had = list(old.get("question_ids", []))
        n = min(len(had), len(question_ids))
        if had[:n] != question_ids[:n]:
            raise S3Error(f"{out} holds rows of other questions: choose another --out")
        if len(question_ids) <= len(had):
            return
    write_json_atomic(path, {"settings": ident, "question_ids": question_ids})


# ------------------------------------------------------------------------------------------------ the command
def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmarks/rollout_temperature.py",
        description="Share of informative GRPO groups per rollout temperature, on the real s3 loop (issue 45, step 3).",
        epilog="Module docstring of experiments/rollout_temperature.py: what is measured and written.")
    p.add_argument("--config", required=True, action="append",
                   help="the training config (e.g. configs/transfer3.toml; repeatable: layered in order, as `s3 train`)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override, as `s3 train --set` (repeatable)")
    p.add_argument("--policy", default=None,
                   help="a checkpoint (step_N), a run directory (its newest checkpoint) or a policy folder; default "
                        "training.base_model (untrained)")
    p.add_argument("--questions", type=int, default=16, help="how many questions (the first N of the split)")
    p.add_argument("--split", choices=["heldout", "train"], default="heldout",
                   help="the prepared set's held-out questions (default) or the training questions before them")
    p.add_argument("--questions-file", type=Path, default=None,
                   help="questions (FlashRAG jsonl, with metadata.supporting_ids) instead of the prepared set's")
    p.add_argument("--group-size", type=int, default=None, help="rollouts per question (default training.rollout.group_size)")
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.6, 0.8, 1.0, 1.2])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk", type=int, default=1,
                   help="questions rolled out in one batched call (their rows are written together)")
    p.add_argument("--allow-generator", action="store_true",
                   help="measure with a reward that calls the frozen generator for every rollout")
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args(argv)


def write_results(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """results.json, report.md and informative.png from the rows so far."""
    from s3core.io import write_json_atomic, write_text_atomic

    summary = summarize(rows)
    best = best_temperature(summary)
    write_json_atomic(out / RESULTS_FILE, {**meta, "best_task_informative": best, "by_temperature": summary})
    head = [f"# Rollout temperature: informative GRPO groups ({meta.get('policy')})", "",
            f"`{meta.get('command')}`", "",
            f"{meta.get('questions')} {meta.get('split')} questions x {meta.get('group_size')} rollouts per temperature; "
            f"reward `{meta.get('reward')}` (invalid_penalty {meta.get('invalid_penalty')}); "
            f"{meta.get('cpus')} CPUs, load {meta.get('load')}.", ""]
    notes = ["", "informative = any reward difference in the group (kept by drop_flat_groups); task-informative = the "
             "task reward differs (not only the format term); format-only = only the format term differs.",
             f"Most task-informative: {best}." if best is not None else "No group was task-informative."]
    write_text_atomic(out / REPORT_FILE, "\n".join([*head, table(summary), *notes]) + "\n")
    if summary:
        plot(summary, out / PLOT_FILE, title=f"{meta.get('policy')}: G = {meta.get('group_size')}, "
                                             f"{meta.get('questions')} questions")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    try:
        return _main(args, list(sys.argv[1:] if argv is None else argv))
    except S3Error as e:
        print(f"rollout_temperature: {e}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace, argv: list[str]) -> int:
    from tqdm import tqdm

    from s3.config import load_config

    cfg = load_config(args.config, args.sets)
    tc = cfg.training
    if needs_generator(cfg) and not args.allow_generator:
        raise S3Error(f"training.reward = {tc.reward!r} calls the frozen generator for every rollout: pass "
                      "--allow-generator to pay for that, or measure with --set training.reward=retrieval_gain")
    if args.policy is not None:
        from searcher.policy.transformers_policy import resolve_checkpoint

        resolve_checkpoint(args.policy)  # a wrong path fails before anything loads
    group = args.group_size or tc.rollout.group_size
    examples, data = choose_questions(cfg, args.questions, split=args.split, questions_file=args.questions_file)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    check_identity(out, identity(cfg, args.policy, examples, group, args.seed, args.chunk), [e.id for e in examples])
    temps = list(dict.fromkeys(float(t) for t in args.temperatures))
    if any(t < 0 for t in temps):
        raise S3Error("temperatures must be >= 0")
    meta = {"method": "experiments/rollout_temperature.py (module docstring)",
            "command": "benchmarks/rollout_temperature.py " + " ".join(argv), "config": " ".join(args.config),
            "overrides": args.sets, "policy": args.policy or tc.base_model, "engine": tc.rollout.engine,
            "split": "file" if args.questions_file else args.split, "questions": len(examples), "group_size": group,
            "seed": args.seed, "reward": tc.reward, "retrieval_cost": tc.retrieval_cost,
            "invalid_penalty": tc.invalid_penalty, "cpus": os.cpu_count(),
            "load": [round(x, 2) for x in os.getloadavg()]}
    rows_path = out / ROWS_FILE
    from s3core.io import read_log_jsonl

    have = done_keys(read_log_jsonl(rows_path))  # or rows.jsonl.gz
    todo = sum((_tkey(t), e.id) not in have for t in temps for e in examples)
    real = RealRollouts(cfg, data, args.policy, log=lambda s: print(s, file=sys.stderr)) if todo else None
    bar = tqdm(total=todo, desc="groups", unit="group", file=sys.stderr)
    t_start = time.perf_counter()

    def progress(t: float, n: int) -> None:
        bar.set_postfix_str(f"T={t:g}")
        bar.update(n)

    rows: list[dict[str, Any]] = []

    def done_temperature(t: float) -> None:
        from s3core.io import read_log_jsonl

        want = {e.id for e in examples}
        now = [r for r in read_log_jsonl(rows_path) if r["id"] in want and _tkey(r["temperature"]) in map(_tkey, temps)]
        s = write_results(out, now, {**meta, "wall_seconds": round(time.perf_counter() - t_start, 1)})
        if _tkey(t) in s:
            v = s[_tkey(t)]
            bar.write(f"T={t:g}: informative {_fmt(v['informative'], True)}, task-informative "
                      f"{_fmt(v['task_informative'], True)}, valid action {_fmt(v['valid_action'], True)}, "
                      f"gold added {_fmt(v['gold_added'], True)}, {v['seconds']:.0f}s")

    try:
        if real is None:  # everything asked for is measured: the report again, no model loaded
            rows = [dict(r) for r in read_log_jsonl(rows_path)]
        else:
            rows = measure(examples, temps, group, rollout=real.rollout, score=real.score, rows_path=rows_path,
                           seed=args.seed, chunk=args.chunk, progress=progress, on_temperature=done_temperature)
    finally:
        bar.close()
    want = {e.id for e in examples}
    keep = [r for r in rows if r["id"] in want and _tkey(r["temperature"]) in {_tkey(t) for t in temps}]
    summary = write_results(out, keep, {**meta, "wall_seconds": round(time.perf_counter() - t_start, 1)})
    print(table(summary))
    print(f"written: {out / RESULTS_FILE}, {out / REPORT_FILE}, {out / PLOT_FILE}")
    return 0
