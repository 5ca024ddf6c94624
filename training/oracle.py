"""Oracle searcher replies for the format warm-up (`training.sft.steps`).

A 135M searcher writes no valid s3 action at all when it starts (0 of 16 sampled replies on the CPU training set):
every rollout of a group then gets the same context, the same reward and a zero GRPO advantage, and RL has nothing
to learn from. The warm-up first teaches the tag grammar by supervised steps on oracle trajectories: the environment
runs the real loop (real retriever, real windows, the student's own chat template and token masks) while the
replies come from this script, which knows the question's gold supporting paragraphs:

- select the documents of the current window whose title is a gold supporting title (at most max_select);
- stop when every gold title has been seen in some window (or the turn budget is spent);
- otherwise ask for the first gold title not seen yet.

The oracle never sees the answer, only which paragraphs support it (HotpotQA / MuSiQue training metadata).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from s3core.types import QAExample

__all__ = ["gold_titles", "oracle_script"]

_DOC_LINE = re.compile(r"^Doc (\d+) ?\(Title: ", re.M)


def gold_titles(examples: Iterable[QAExample], corpus: Path) -> dict[str, list[str]]:
    """question text -> its gold supporting titles (metadata.supporting_titles, else the corpus titles of
    metadata.supporting_ids), in the order the metadata gives them, deduplicated."""
    wanted = {i for e in examples for i in e.supporting_ids}
    title_of: dict[str, str] = {}
    if wanted and corpus.is_file():
        with corpus.open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                if row.get("id") in wanted:
                    title_of[row["id"]] = str(row.get("title", ""))
    out: dict[str, list[str]] = {}
    for e in examples:
        titles = list(e.metadata.get("supporting_titles") or []) or [title_of[i] for i in e.supporting_ids if i in title_of]
        out[e.question.strip()] = list(dict.fromkeys(t.strip() for t in titles if t and t.strip()))
    return out


def _windows(prompt: str) -> list[str]:
    """The <information> windows shown after the (last) <question>: D0 first, then one per search turn."""
    body = prompt.rsplit("</question>", 1)[-1]
    return [w.split("</information>", 1)[0] for w in body.split("<information>")[1:]]


def _titles_in(window: str, gold: list[str]) -> tuple[list[int], set[str]]:
    """(1-based positions of gold documents in the window, gold titles present)."""
    picked: list[int] = []
    seen: set[str] = set()
    for line in window.splitlines():
        m = _DOC_LINE.match(line)
        if not m:
            continue
        rest = line[m.end() :]
        for t in gold:
            if rest.startswith(t + ")"):
                picked.append(int(m.group(1)))
                seen.add(t)
                break
    return picked, seen


def oracle_script(gold: dict[str, list[str]], max_select: int, max_turns: int) -> Callable[[str, int], str]:
    """A `ScriptedPolicy` script: the oracle reply to an s3 searcher prompt (see the module docstring)."""

    def script(prompt: str, _index: int) -> str:
        question = prompt.rsplit("<question>", 1)[-1].split("</question>", 1)[0].strip()
        titles = gold.get(question, [])
        windows = _windows(prompt)
        seen: set[str] = set()
        for w in windows:
            seen |= _titles_in(w, titles)[1]
        picked = _titles_in(windows[-1], titles)[0][:max_select] if windows else []
        reply = f"<important_info>[{', '.join(map(str, picked))}]</important_info>\n"
        missing = [t for t in titles if t not in seen]
        searches_done = max(len(windows) - 1, 0)  # the first window is begin-with-search's D0
        if not missing or searches_done >= max_turns:
            return reply + "<search_complete>True</search_complete>"
        query = json.dumps({"query": missing[0]}, ensure_ascii=False)
        return reply + f"<search_complete>False</search_complete>\n<query>{query}</query>"

    return script
