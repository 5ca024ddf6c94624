"""The held-out ablation of the third transfer attempt (issue 45, "Must show"): the policies that still exist, each
rolled out greedily on the same 100 held-out training questions (the natural mix of runs/transfer3/train, never
trained on) and scored with the phase-1 training reward (`retrieval_gain`, cost 0.1: +1 a gold paragraph added beyond
naive RAG's top-3, -1 a top-3 gold paragraph dropped, -0.1 each other paragraph added; no generator call) by
`s3 train-eval`, so that each lever is read as a difference on the same questions:

    additive        a policy with `searcher.additive` on and off (attempt 2's, the shipped one)
    the recipe      attempt 2's policy (GBR reward, the oracle teacher, the warm-up's optimizer carried into RL) against
                    the shipped one (the copyable teacher's warm-up, a fresh optimizer, the retrieval reward), both
                    additive; the untrained base model beside them
    several queries the phase-1f / 1g list policies (warm-ups from the shipped one; runs/transfer3/, not committed).
                    NOT held out: their warm-ups ran with training.heldout.questions = 0, so the teacher's
                    trajectories of these 100 questions were among the ones they imitated (`HELD_OUT_SEEN`); their
                    clean numbers are the dev questions'. `phase1f_heldout` is phase 1f's recipe run again with the
                    100 kept out: the lever's held-out row

The scripted bars (the heuristic control, the copyable teacher, A1) come from benchmarks/results/transfer3/
heldout_bars.json (their gold / added counts, re-weighed at the cost used here). `benchmarks/transfer3_ablation.py`
runs it and writes the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eval.stats import paired_diff_ci

COST = 0.1  # configs/transfer3.toml training.retrieval_cost (phase 1d, the shipped policy's phase)


@dataclass(frozen=True)
class AblationRow:
    name: str
    policy: str  # a policy folder (relative to the repository root), "attempt2" (from git history) or a base model name
    what: str
    sets: tuple[str, ...] = field(default=())  # --set KEY=VALUE beside configs/transfer3.toml's


ROWS = (
    AblationRow("untrained", "smollm2-135m-instruct", "the base model, additive (cap 5)"),
    AblationRow("attempt2_own_loop", "attempt2", "attempt 2's policy on its own loop (not additive, cap 9)",
                ("searcher.additive=false", "searcher.context_cap=9")),
    AblationRow("attempt2_additive", "attempt2", "attempt 2's policy made additive (cap 5): A0"),
    AblationRow("shipped", "searcher/policies/smollm2-135m-hotpotqa",
                "the shipped policy (copyable warm-up, fresh optimizer, retrieval reward), additive (cap 5)"),
    AblationRow("shipped_not_additive", "searcher/policies/smollm2-135m-hotpotqa",
                "the shipped policy, additive off (cap 5)", ("searcher.additive=false",)),
    AblationRow("phase1f_candidates", "runs/transfer3/candidates_policy",
                "phase 1f: 8 candidate queries a turn, 128 tokens (NOT held out: its warm-up saw these questions)",
                ("searcher.max_new_tokens=128",)),
    AblationRow("phase1f_heldout", "runs/transfer3/phase1f_h",
                "phase 1f's recipe again with these 100 questions kept out (training.heldout.questions = 100)",
                ("searcher.max_new_tokens=128",)),
    AblationRow("phase1g_spans", "runs/transfer3/spans_policy",
                "phase 1g: 16 spans in one turn, k = 16 (NOT held out, as 1f)", ("searcher.k=16", "searcher.max_turns=1",
                                                           "searcher.max_new_tokens=224")),
)


# rows whose policy saw the held-out questions in training (the report marks them; they are not a held-out result)
HELD_OUT_SEEN = frozenset({"phase1f_candidates", "phase1g_spans"})


def reward_at(gold: float, added: float, cost: float = COST) -> float:
    """retrieval_gain from its counts (a question's or their means) for a source that drops nothing (the scripted
    bars): gold added - cost x other added.

    >>> round(reward_at(0.49, 1.3), 3)
    0.409
    """
    return gold - cost * (added - gold)


def ablation_table(
    questions: dict[str, dict[str, dict[str, Any]]], against: Sequence[str], n_resamples: int = 2000
) -> list[dict[str, Any]]:
    """One line per policy (`questions`: name -> question id -> its train-eval row): the mean reward and its counts,
    and its paired difference in reward from each policy in `against` (bootstrap 95% interval over the questions).

    >>> q = {"a": {"1": {"reward": 1.0, "gold_added": 1.0, "other_added": 0.0, "doc_ids": ["x"]},
    ...            "2": {"reward": 0.0, "gold_added": 0.0, "other_added": 0.0, "doc_ids": []}},
    ...      "b": {"1": {"reward": -0.1, "gold_added": 0.0, "other_added": 1.0, "doc_ids": ["y"]},
    ...            "2": {"reward": 0.0, "gold_added": 0.0, "other_added": 0.0, "doc_ids": []}}}
    >>> t = ablation_table(q, ["b"], n_resamples=50)
    >>> t[0]["reward"], t[0]["vs"]["b"]["diff"], t[0]["vs"]["b"]["wins"], "b" in t[1]["vs"]
    (0.5, 0.55, 1, False)
    """
    out = []
    for name, rows in questions.items():
        scored = [r for r in rows.values() if r.get("reward") is not None]
        n = len(scored)

        def mean(key: str, rs: list[dict[str, Any]] = scored, n: int = n) -> float | None:
            return sum(float(r.get(key) or 0.0) for r in rs) / n if n else None

        line: dict[str, Any] = {"policy": name, "questions": len(rows), "scored": n, "reward": mean("reward"),
                                "gold_added": mean("gold_added"), "other_added": mean("other_added"),
                                "docs": (sum(len(r.get("doc_ids") or []) for r in scored) / n) if n else None,
                                "vs": {}}
        if n:  # the reward's other terms (-1 a top-3 gold paragraph dropped, the invalid-format penalty), from the
            # mean reward and the two counts (train-eval's rows do not count the drops apart); +0.0, not -0.0
            gold, other, reward = line["gold_added"], line["other_added"], line["reward"]
            line["dropped_or_invalid"] = round(gold - COST * other - reward, 9) + 0.0
        for base in against:
            if base == name or base not in questions:
                continue
            a = {i: r.get("reward") for i, r in rows.items()}
            b = {i: r.get("reward") for i, r in questions[base].items()}
            line["vs"][base] = paired_diff_ci(a, b, n_resamples=n_resamples)
        out.append(line)
    return out
