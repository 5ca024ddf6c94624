"""Oracle searcher replies for the format warm-up (`training.sft.steps`).

A 135M searcher writes no valid s3 action at all when it starts (0 of 16 sampled replies on the CPU training set):
every rollout of a group then gets the same context, the same reward and a zero GRPO advantage, and RL has nothing
to learn from. The warm-up first teaches the tag grammar by supervised steps on oracle trajectories: the environment
runs the real loop (real retriever, real windows, the student's own chat template and token masks) while the
replies come from this script, which knows the question's gold supporting paragraphs. Two teachers
(`oracle_script(..., teacher=...)`):

- `"gold_title"` (attempts 1-2, the default, so their warm-ups stay reproducible): select the documents of the
  current window whose title is a gold supporting title (at most max_select); stop when every gold title has been
  seen in some window (or the turn budget is spent); otherwise ask for the first gold title not seen yet. That title
  is in neither the question nor the retrieved text on 31% of hotpotqa_dev500's questions: the student cannot copy
  such a query from what it sees (issue 45, cause 4).
- `"copyable"` (issue 45, step 4): the same selection, but a missing gold title is queried only where it is VISIBLE:
  in the question, or in a document shown so far (its title and first `VISIBLE_WORDS` words as the window renders
  them; later turns see what earlier turns retrieved), whole or without a trailing parenthetical, compared after
  `norm`; a title already asked is not asked again; with nothing copyable left, stop. Every query it writes is a
  phrase of what the prompt showed (`visible_segments`, `query_is_visible`).

- `"candidates"` (for searcher.queries_per_turn > 1): the copyable teacher's query, followed in the same JSON list by
  the other title-like spans visible in the prompt (`searcher.spans.title_like_spans` of `visible_segments`: not
  asked yet, not the title of a document already shown), up to `queries_per_turn`; its selection is the gold
  documents of the window those queries bring back. The student learns to list the visible candidates rather than to
  pick the one right span, the scripted heuristic control's breadth (docs/transfer.md); with nothing copyable left it
  stops, as the copyable teacher does.
- `"spans"`: the same list in the order the prompt shows the spans, the copyable title in its place among them (last
  when the span finder misses it): the heuristic control's list, which the student can copy without knowing the gold.

The oracle never sees the answer, only which paragraphs support it (HotpotQA / MuSiQue training metadata).
The title helpers (`norm`, `title_variants`, `contains_phrase`, `first_words`) are the ones experiments/transfer_checks.py
uses for A1's copyable gold (it imports them from here: training may not import experiments).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal

from s3core.types import Document, QAExample
from searcher.protocol import parse_queries
from searcher.titles import (  # the one definition (re-exported)
    _title_forms,
    contains_phrase,
    norm,
    title_variants,
)

__all__ = [
    "TEACHERS",
    "VISIBLE_WORDS",
    "Teacher",
    "candidate_queries",
    "contains_phrase",
    "copyable_gold",
    "document_segments",
    "first_words",
    "gold_titles",
    "norm",
    "oracle_script",
    "query_is_visible",
    "title_variants",
    "visible_segments",
]

Teacher = Literal["gold_title", "copyable", "candidates", "spans"]
TEACHERS: tuple[Teacher, ...] = ("gold_title", "copyable", "candidates", "spans")
VISIBLE_WORDS = 70  # words of a shown document (after its title) a copyable teacher may read: ~ the 96-token view

_DOC_LINE = re.compile(r"^Doc (\d+) ?\(Title: ", re.M)
_QUERY = re.compile(r"<query>(.*?)</query>", re.S)


# ------------------------------------------------------------------------------------------------ titles in text


def first_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


# ------------------------------------------------------------------------------------------------ copyable gold


def document_segments(question: str, top: Sequence[Document], words: int = VISIBLE_WORDS) -> list[str]:
    """What a searcher sees before its first query, as raw text: the question, then each top document's title and
    its first `words` words (in rank order). `visible_segments` is the same read from a rendered prompt."""
    return [question, *(f"{d.title}. {first_words(d.text, words)}" for d in top)]


def copyable_gold(
    question: str, top: Sequence[Document], gold: Sequence[Document], words: int = VISIBLE_WORDS
) -> list[Document]:
    """The gold paragraphs missing from `top` that the copyable teacher could ask for at its first query: those whose
    title (a variant) is visible in the question or in a top document's title and first `words` words. Gold order is
    kept. A1's added paragraphs (experiments/transfer_checks.py) and training.data.keep_copyable's filter."""
    have = {d.id for d in top}
    seen = [norm(s) for s in document_segments(question, top, words)]
    return [g for g in gold if g.id not in have
            and any(contains_phrase(s, v) for v in title_variants(g.title) for s in seen)]


# where a searcher could read the title of the gold naive RAG's top lacks (the question first)
GOLD_PLACES = ("none missing", "question", "documents", "unseen")


def missing_gold_place(
    question: str, top: Sequence[Document], gold: Sequence[Document], words: int = VISIBLE_WORDS
) -> str:
    """Where a searcher that reads the question and the top documents could find the title of a gold paragraph the
    top lacks: "none missing"; "question" (a missing gold title is in the question); "documents" (only in a top
    document's title and first `words` words: in HotpotQA, mostly the bridge to the second hop); "unseen" (neither:
    the copyable teacher has nothing to copy). The transfer report's diagnosis (experiments/transfer_checks.py
    `place_rows`) and training.data.copyable_places.

    >>> top = [Document(id="t", title="Kiss and Tell (1945 film)", text="It stars Shirley Temple as Corliss.")]
    >>> gold = [Document(id="t", title="Kiss and Tell (1945 film)", text=""),
    ...         Document(id="g", title="Shirley Temple", text="")]
    >>> missing_gold_place("Who starred in Kiss and Tell?", top, gold)
    'documents'
    >>> missing_gold_place("Where was Shirley Temple born?", top, gold), missing_gold_place("Who?", top, gold[:1])
    ('question', 'none missing')
    """
    have = {d.id for d in top}
    if all(g.id in have for g in gold):
        return "none missing"
    copyable = copyable_gold(question, top, gold, words)
    if not copyable:
        return "unseen"
    q = norm(question)
    return "question" if any(contains_phrase(q, v) for g in copyable for v in title_variants(g.title)) else "documents"


# ------------------------------------------------------------------------------------------------ reading the prompt


def _question(prompt: str) -> str:
    return prompt.rsplit("<question>", 1)[-1].split("</question>", 1)[0].strip()


def _windows(prompt: str) -> list[str]:
    """The <information> windows shown after the (last) <question>: D0 first, then one per search turn."""
    body = prompt.rsplit("</question>", 1)[-1]
    return [w.split("</information>", 1)[0] for w in body.split("<information>")[1:]]


def _doc_lines(window: str) -> list[tuple[int, str, str]]:
    """(1-based position, title, text) of each rendered document line `Doc i (Title: T) text` of a window. A title
    holding ") " is cut at its first one: the visible text then starts earlier, never later."""
    out = []
    for line in window.splitlines():
        m = _DOC_LINE.match(line)
        if m:
            rest = line[m.end() :]
            title, sep, text = rest.partition(") ")
            out.append((int(m.group(1)), title if sep else title.removesuffix(")"), text))  # "(Title: T)" and no text
    return out


def _asked(prompt: str) -> list[str]:
    """The queries the replies so far wrote (after the last <question>), read as the loop reads them
    (`searcher.protocol.parse_queries`): each query of a list (`{"query": ["A", "B"]}`) on its own.

    >>> _asked('<question>Q?</question><query>{"query": ["A b", "C"]}</query> <query>{"query": "D"}</query>')
    ['A b', 'C', 'D']
    """
    return [q for raw in _QUERY.findall(prompt.rsplit("</question>", 1)[-1]) for q in parse_queries(raw)]


def visible_segments(prompt: str, words: int = VISIBLE_WORDS) -> list[str]:
    """What a searcher has seen at this prompt, as raw text: the question, then each shown document's title and its
    first `words` words as the window rendered them (the windows in order: D0, then each search's)."""
    segs = [_question(prompt)]
    for w in _windows(prompt):
        segs += [f"{title}. {first_words(text, words)}" for _, title, text in _doc_lines(w)]
    return segs


def query_is_visible(query: str, prompt: str, words: int = VISIBLE_WORDS) -> bool:
    """Whether `query` (normalised) is a phrase of one segment the prompt showed (`visible_segments`): a copy of what
    the searcher saw, not knowledge it lacks."""
    q = norm(query)
    return bool(q) and any(contains_phrase(norm(s), q) for s in visible_segments(prompt, words))


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


def _copyable_query(prompt: str, missing: list[str], words: int) -> str | None:
    """The first missing gold title visible in the prompt and not asked yet, in the form the prompt shows (whole, else
    without its trailing parenthetical); None: nothing copyable is left."""
    seen = [norm(s) for s in visible_segments(prompt, words)]
    asked = {norm(q) for q in _asked(prompt)}
    for title in missing:
        for form in _title_forms(title):
            key = norm(form)
            if key and key not in asked and any(contains_phrase(s, key) for s in seen):
                return form
    return None


# ------------------------------------------------------------------------------------------------ the teachers


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


def candidate_queries(prompt: str, first: str, n: int, words: int = VISIBLE_WORDS, in_place: bool = False) -> list[str]:
    """`first`, then the title-like spans visible in the prompt (question, then each shown document's title and first
    `words` words), each once by `norm`, none asked before nor a shown document's own title: at most `n` in all.
    `in_place`: the spans in the order the prompt shows them, `first` among them where it shows (the last place when
    the span finder does not find it there): a list the student can copy without knowing which one is gold.

    >>> from searcher.protocol import build_s3_prompt
    >>> p = build_s3_prompt("Who directed Kiss and Tell?", "Doc 1 (Title: Kiss and Tell (1945 film)) It stars "
    ...                     "Shirley Temple and was directed by Richard Wallace.")
    >>> candidate_queries(p, "Richard Wallace", 3)  # not "Kiss and Tell": a shown document's own title
    ['Richard Wallace', 'Shirley Temple']
    >>> candidate_queries(p, "Richard Wallace", 3, in_place=True), candidate_queries(p, "Richard Wallace", 1, in_place=True)
    (['Shirley Temple', 'Richard Wallace'], ['Richard Wallace'])
    """
    from searcher.spans import title_like_spans  # spans reads oracle's norm: imported here, not at the top

    skip = {norm(q) for q in _asked(prompt)}
    for w in _windows(prompt):
        skip |= {v for _, title, _ in _doc_lines(w) for v in title_variants(title)}
    if not in_place:
        skip.add(norm(first))
    spans: list[str] = []
    for seg in visible_segments(prompt, words):
        for span in title_like_spans(seg):
            key = norm(span)
            if key and key not in skip:
                skip.add(key)
                spans.append(span)
    if not in_place:
        return [first, *spans][:n]
    keys = [norm(x) for x in spans[:n]]
    return spans[:n] if norm(first) in keys else [*spans[: n - 1], first]


def oracle_script(gold: dict[str, list[str]], max_select: int, max_turns: int, teacher: Teacher = "gold_title",
                  visible_words: int = VISIBLE_WORDS, queries_per_turn: int = 1) -> Callable[[str, int], str]:
    """A `ScriptedPolicy` script: the oracle reply to an s3 searcher prompt (see the module docstring for the
    teachers; `visible_words` is what the copyable ones read of a shown document; `queries_per_turn` how many the
    candidates teacher lists)."""
    if teacher not in TEACHERS:
        raise ValueError(f"unknown teacher {teacher!r}; choose one of {', '.join(TEACHERS)}")
    if teacher in ("candidates", "spans") and queries_per_turn < 2:
        raise ValueError("the candidates teacher lists several queries a turn: it needs searcher.queries_per_turn >= 2")

    def script(prompt: str, _index: int) -> str:
        titles = gold.get(_question(prompt), [])
        windows = _windows(prompt)
        seen: set[str] = set()
        for w in windows:
            seen |= _titles_in(w, titles)[1]
        picked = _titles_in(windows[-1], titles)[0][:max_select] if windows else []
        reply = f"<important_info>[{', '.join(map(str, picked))}]</important_info>\n"
        missing = [t for t in titles if t not in seen]
        searches_done = max(len(windows) - 1, 0)  # the first window is begin-with-search's D0
        stop = reply + "<search_complete>True</search_complete>"
        if not missing or searches_done >= max_turns:
            return stop
        ask = missing[0] if teacher == "gold_title" else _copyable_query(prompt, missing, visible_words)
        if ask is None:
            return stop
        asks: str | list[str] = ask
        if teacher in ("candidates", "spans"):
            asks = candidate_queries(prompt, ask, queries_per_turn, visible_words, in_place=teacher == "spans")
        query = json.dumps({"query": asks}, ensure_ascii=False)
        return reply + f"<search_complete>False</search_complete>\n<query>{query}</query>"

    return script
