"""Each candidate page's credit from the frozen generator: the gain in log p(gold answer) when the page is added to
the start's documents (generator_adapters/likelihood.py), cached a question a line so a long scoring run resumes.

    store = CreditStore(run_dir / "credit.jsonl", fingerprint=lik_fingerprint)
    for q, c in zip(questions, candidates):
        if q.id not in store:
            store.add(q, c, lik.credit(q.question, c.start, c.candidates, q.golden_answers), seconds)
    store[q.id]["gains"]

A row records the question's id, its start and candidate ids (a row whose candidates differ from the ones asked is
stale: scored again), log p(answer | start), each candidate's gain, and the tokens and seconds it took. The file's
first line is the scorer's fingerprint (generator model and weights, prompt, answer rule); a store opened with another
fingerprint is refused, naming both, so credit from one generator never trains a reader for another unnoticed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from s3core.errors import ConfigError
from s3core.io import append_jsonl, iter_jsonl, repair_tail
from s3core.types import QAExample
from training.reading.candidates import Candidates

__all__ = ["CreditStore"]


class CreditStore:
    """Scored questions, one jsonl line each, after a header line holding the scorer's fingerprint."""

    def __init__(self, path: str | Path, fingerprint: dict[str, Any]) -> None:
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.rows: dict[str, dict[str, Any]] = {}
        if self.path.exists() and self.path.stat().st_size:
            repair_tail(self.path)
            first = True
            for _, row in iter_jsonl(self.path):
                if first:
                    first = False
                    have = row.get("fingerprint")
                    if have != json.loads(json.dumps(fingerprint)):
                        raise ConfigError(
                            f"{self.path} holds credit scored by {json.dumps(have, sort_keys=True)}; this run scores "
                            f"with {json.dumps(fingerprint, sort_keys=True)}: use another run directory, or remove "
                            "the file to score again")
                    continue
                self.rows[str(row["id"])] = row
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            append_jsonl(self.path, [{"fingerprint": fingerprint}])

    def __contains__(self, qid: object) -> bool:
        return qid in self.rows

    def __getitem__(self, qid: str) -> dict[str, Any]:
        return self.rows[qid]

    def __len__(self) -> int:
        return len(self.rows)

    def fresh(self, q: QAExample, c: Candidates) -> bool:
        """Whether `q` is scored, on these very start and candidate pages."""
        row = self.rows.get(q.id)
        return (row is not None and row["start"] == [d.id for d in c.start]
                and row["candidates"] == [d.id for d in c.candidates])

    def add(self, q: QAExample, c: Candidates, credit: Any, seconds: float) -> dict[str, Any]:
        row = {"id": q.id, "answer": q.golden_answers[0] if q.golden_answers else None,
               "start": [d.id for d in c.start], "candidates": [d.id for d in c.candidates], "ranks": c.ranks,
               "gold": c.gold, "base": round(credit.base, 5), "gains": [round(g, 5) for g in credit.gains],
               "answer_tokens": credit.answer_tokens, "computed_tokens": credit.computed_tokens,
               "prompt_tokens": credit.prompt_tokens, "seconds": round(seconds, 3)}
        append_jsonl(self.path, [row])
        self.rows[q.id] = row
        return row
