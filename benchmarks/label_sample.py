"""Print a seeded sample of Search-R1 steps (25 search steps with a verdict, 25 answer steps) from `s3 analyze`'s
steps_*.jsonl (and the run's results.jsonl for the gold answers), for labelling by hand:

    .venv/bin/python benchmarks/label_sample.py OUT/steps_NAME.jsonl RUN_DIR/results.jsonl

benchmarks/results/analysis/hand_labels_*.jsonl hold the labels ({"key", "label", "note"}), written by a person
reading each step (the label answers the judge's question: search step = do the memory
and context answers agree; answer step = is the answer correct for the gold answers)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path


def _balanced(steps: list[dict], verdict: str, rng: random.Random, n: int = 25) -> list[dict]:
    """`n` steps, up to half of them with a true verdict and the rest false (topped up from the other side)."""
    yes = [s for s in steps if s[verdict]]
    no = [s for s in steps if not s[verdict]]
    k_yes = min(len(yes), max(n // 2, n - len(no)))
    return rng.sample(yes, k_yes) + rng.sample(no, min(len(no), n - k_yes))


def main() -> int:
    steps = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line.strip()]
    rows = {}
    if len(sys.argv) > 2:
        rows = {r["id"]: r for r in map(json.loads, Path(sys.argv[2]).read_text().splitlines())}
    search = [s for s in steps if s["kind"] == "search" and s["over_search"] is not None]
    answer = [s for s in steps if s["kind"] == "answer" and s["correct"] is not None]
    # one seeded draw per kind: the answer steps' sample does not depend on how many search steps were judged, so
    # they can be labelled from the evaluation run before the (slow) over-search analysis has finished; each draw is
    # balanced over the verdict (half the steps judged one way where there are enough), so a sample of a weak policy
    # is not all "wrong" (hand_labels_smollm2 / _qwen05 were drawn at random with one generator for both kinds)
    picked = (_balanced(search, "over_search", random.Random(34))
              + _balanced(answer, "correct", random.Random(35)))
    for s in picked:
        gold = rows.get(s["qid"], {}).get("golden_answers")
        if s["kind"] == "search":
            print(f"{s['key']} SEARCH q={s['query']!r} memory={s['memory_answer']!r} context={s['context_answer']!r} "
                  f"judge_same={s['over_search']}")
        else:
            print(f"{s['key']} ANSWER a={s['answer']!r} gold={gold} genacc={s['correct']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
