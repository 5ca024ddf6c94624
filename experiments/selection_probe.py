"""Can a searcher this size read? (issue 60, build step 2): train SELECTION ALONE with supervised gold labels and
measure held-out gold recall against selecting by position and by bm25 order.

A window is what a searcher's selection sees: the question and up to `WINDOW` retrieved documents, numbered [1]..[n]
in a SHUFFLED order (so the number carries no rank: a selector that reads must beat one that takes [1], [2]), each with
its bm25 rank kept aside. Two kinds (`build_windows`): the question's own bm25 top-n ("question") and a title query's
top-n ("title": the query is the title of one of the question's gold paragraphs, as a searcher that asked for the page
would see it). Only windows holding at least one gold and one other paragraph are kept.

The student scores every document in ONE forward pass, from the logits of the first id token after the prompt
(`render`: "... The most useful document is [" -> the logits of "1".."n"; FIRST's listwise reading), and is trained
with a listwise loss: minus the log of the probability mass its softmax puts on the gold documents (`listwise_loss`).
Held-out selection quality (`selection_table`): gold recall at the selection size m (the share of the window's gold
documents among the m selected), per window kind and per the gold's bm25 rank (1-3, 4-8), for the student, for
selecting by position ([1]..[m] as shown) and by bm25 order (the m best ranks), with the time per training example.

The pointwise reader (`PointwiseStudent`, `render_pair`) shows ONE document a prompt and scores it logit(" yes") -
logit(" no"), a cross-encoder made of the causal LM, trained with the same listwise loss over a window's scores: the
135M does not learn the listwise reading (held-out recall at 2 0.30) and does learn this one (0.83, above bm25 order's
0.80; docs/transfer.md). `tail_table` scores the choice a searcher started where the script ends must make: the gold
among a question window's bm25 ranks 4-8.

Pure functions and a small trainer over any causal LM whose tokenizer has single tokens for the ids; the command line
is benchmarks/selection_probe.py.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from experiments.transfer.checks import READ_LAST, read_candidates
from s3core.types import Document, QAExample
from searcher.title_following.reader import MAX_TOKENS, WORDS, last_token_logits, one_token_each, render_pair

WINDOW = 8  # documents a window shows (the searcher's k)
SELECT = 2  # documents selected from a window (what a searcher keeps of one window, the trained ones' [1, 2])
PROMPT_TAIL = "The most useful document is ["
TAIL_FROM = 4  # the window's ranks from here on are what naive RAG's top-3 (and the script's start) leave unread
RANK_BUCKETS = ((1, 3), (4, 8))  # bm25 ranks: naive RAG's top-3, the rest of the window


@dataclass
class Window:
    question_id: str
    question: str
    kind: str  # "question" | "title"
    docs: list[Document]  # in the order shown
    ranks: list[int]  # bm25 rank (1 = best) of each shown document
    gold: list[bool]  # whether each shown document is a gold paragraph

    @property
    def n(self) -> int:
        return len(self.docs)


SearchFn = Callable[[list[str], int], list[list[Document]]]


def split_questions(questions: Sequence[QAExample], heldout: int, train: int, seed: int
                    ) -> tuple[list[QAExample], list[QAExample]]:
    """(held-out, training) questions: those with gold paragraphs, shuffled by `seed`, the first `heldout` held out and
    the next `train` trained on (the probe's split; a reader's threshold is chosen on its held-out questions).

    >>> qs = [QAExample(id=str(i), question="?", golden_answers=["a"], metadata={"supporting_ids": ["g"] * (i > 0)})
    ...       for i in range(5)]
    >>> held, train = split_questions(qs, 2, 1, seed=0)
    >>> len(held), len(train), "0" in {q.id for q in held + train}, set(q.id for q in held) & set(q.id for q in train)
    (2, 1, False, set())
    """
    qs = [q for q in questions if q.supporting_ids]
    random.Random(seed).shuffle(qs)
    return qs[:heldout], qs[heldout:heldout + train]


def make_window(q: QAExample, kind: str, ranked: Sequence[Document], rng: random.Random) -> Window | None:
    """A window of `ranked` (best first) shown in a shuffled order; None when it lacks a gold or a non-gold document.

    >>> d = lambda i: Document(id=i, title=i, text="")
    >>> q = QAExample(id="q", question="?", golden_answers=["a"], metadata={"supporting_ids": ["g"]})
    >>> w = make_window(q, "question", [d("x"), d("g"), d("y")], random.Random(0))
    >>> sorted(zip(w.ranks, [x.id for x in w.docs], w.gold))
    [(1, 'x', False), (2, 'g', True), (3, 'y', False)]
    >>> make_window(q, "question", [d("x"), d("y")], random.Random(0)) is None
    True
    """
    gold_ids = set(q.supporting_ids)
    gold = [d.id in gold_ids for d in ranked]
    if not any(gold) or all(gold):
        return None
    order = list(range(len(ranked)))
    rng.shuffle(order)
    return Window(q.id, q.question, kind, [ranked[i] for i in order], [i + 1 for i in order], [gold[i] for i in order])


LEFTOVER_LAST = READ_LAST  # a leftover window: what transfer_checks.py read reads (`read_candidates`, one definition)


def leftover_window(q: QAExample, script: Sequence[Document], ranked: Sequence[Document], rng: random.Random, *,
                    first: int = TAIL_FROM, last: int = LEFTOVER_LAST, any_gold: bool = False) -> Window | None:
    """What a reader started where the script ends chooses from ("leftover"): the question's own bm25 list (`ranked`,
    best first) at ranks `first`..`last` less the script's documents, shown shuffled with their true ranks; None
    unless it holds a gold and a non-gold document (`any_gold`: or only non-gold ones, for the pointwise loss, which
    must also learn where there is nothing to add).

    >>> d = lambda i: Document(id=i, title=i, text="")
    >>> q = QAExample(id="q", question="?", golden_answers=["a"], metadata={"supporting_ids": ["g", "s"]})
    >>> ranked = [d(i) for i in ("t1", "t2", "t3", "s", "x", "g", "y")]
    >>> w = leftover_window(q, ranked[:4], ranked, random.Random(0), last=6)
    >>> sorted(zip(w.ranks, [x.id for x in w.docs], w.gold)), w.kind
    ([(5, 'x', False), (6, 'g', True)], 'leftover')
    >>> leftover_window(q, ranked[:4], ranked, random.Random(0), last=5) is None  # no gold left
    True
    >>> leftover_window(q, ranked[:4], ranked, random.Random(0), last=5, any_gold=True).gold
    [False]
    """
    gold_ids, rank = set(q.supporting_ids), {d.id: i + 1 for i, d in enumerate(ranked)}
    cands = [(rank[d.id], d) for d in read_candidates(script, ranked, first=first, last=last)]
    gold = [d.id in gold_ids for _, d in cands]
    if not cands or all(gold) or not (any(gold) or any_gold):
        return None
    order = list(range(len(cands)))
    rng.shuffle(order)
    return Window(q.id, q.question, "leftover", [cands[i][1] for i in order], [cands[i][0] for i in order],
                  [gold[i] for i in order])


def build_windows(questions: Sequence[QAExample], search: SearchFn, titles: Mapping[str, str], *,
                  window: int = WINDOW, seed: int = 0) -> list[Window]:
    """Every question's windows: its own bm25 top-`window` ("question") and one gold title's ("title": the first gold
    paragraph, by `supporting_ids` order, whose title `titles` knows), in question order; two batched searches (none
    for no question: `run --train 0`, the zero-shot row).

    >>> build_windows([], lambda qs, k: 1 / 0, {})
    []
    """
    if not questions:
        return []
    rng = random.Random(seed)
    own = search([q.question for q in questions], window)
    asks = [(i, titles[g]) for i, q in enumerate(questions) for g in q.supporting_ids[:1] if titles.get(g)]
    by_title = dict(zip((i for i, _ in asks), search([t for _, t in asks], window), strict=True)) if asks else {}
    out: list[Window] = []
    for i, q in enumerate(questions):
        for kind, ranked in (("question", own[i]), ("title", by_title.get(i))):
            if ranked:
                w = make_window(q, kind, ranked, rng)
                if w is not None:
                    out.append(w)
    return out


def render(w: Window, words: int = WORDS) -> str:
    """The student's prompt: the question, the numbered documents (title and first `words` words), then
    `PROMPT_TAIL`, after which the first generated token is the number of the document it rates most useful.

    >>> w = Window("q", "Who?", "question", [Document(id="a", title="A", text="one two three")], [1], [True])
    >>> print(render(w, words=2))
    Question: Who?
    [1] A: one two
    The most useful document is [
    """
    lines = [f"Question: {w.question}"]
    lines += [f"[{i}] {d.title}: {' '.join(d.text.split()[:words])}" for i, d in enumerate(w.docs, start=1)]
    return "\n".join([*lines, PROMPT_TAIL])


# ------------------------------------------------------------------------------------------------ selection rules


def select_by_position(w: Window, m: int = SELECT) -> list[int]:
    """The first `m` documents as shown (what a searcher that always answers [1, 2] keeps)."""
    return list(range(min(m, w.n)))


def select_by_bm25(w: Window, m: int = SELECT) -> list[int]:
    """The `m` documents of the best bm25 ranks."""
    return sorted(range(w.n), key=lambda i: w.ranks[i])[:m]


def select_by_scores(scores: Sequence[float], m: int = SELECT) -> list[int]:
    """The `m` best-scored documents (ties: the earlier shown).

    >>> select_by_scores([0.1, 0.9, 0.5])
    [1, 2]
    """
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:m]


def gold_recall(w: Window, chosen: Sequence[int]) -> float:
    """The share of the window's gold documents among `chosen`.

    >>> w = Window("q", "?", "question", [Document(id=i) for i in "abc"], [1, 2, 3], [True, False, True])
    >>> gold_recall(w, [0, 1])
    0.5
    """
    return sum(w.gold[i] for i in chosen) / sum(w.gold)


def _bucket(rank: int) -> str:
    return next((f"{a}-{b}" for a, b in RANK_BUCKETS if a <= rank <= b), f">{RANK_BUCKETS[-1][1]}")


def selection_table(windows: Sequence[Window], scores: Sequence[Sequence[float]] | None, m: int = SELECT
                    ) -> dict[str, dict[str, Any]]:
    """Held-out gold recall at `m` per group (all, each window kind, each best gold bm25 rank bucket) for `position`,
    `bm25` and (with `scores`, one list per window) `student`.

    >>> ws = [Window("q", "?", "question", [Document(id=i) for i in "abc"], [3, 1, 2], [True, False, False])]
    >>> t = selection_table(ws, [[0.9, 0.0, 0.1]], m=1)
    >>> t["all"]["position"], t["all"]["bm25"], t["all"]["student"], t["all"]["windows"], list(t)
    (1.0, 0.0, 1.0, 1, ['all', 'question', 'gold rank 1-3'])
    """
    rows: dict[str, dict[str, list[float]]] = {}
    for j, w in enumerate(windows):
        best = min(r for r, g in zip(w.ranks, w.gold, strict=True) if g)
        got = {"position": gold_recall(w, select_by_position(w, m)), "bm25": gold_recall(w, select_by_bm25(w, m))}
        if scores is not None:
            got["student"] = gold_recall(w, select_by_scores(scores[j], m))
        for group in ("all", w.kind, f"gold rank {_bucket(best)}"):
            for k, v in got.items():
                rows.setdefault(group, {}).setdefault(k, []).append(v)
    return {g: {"windows": len(next(iter(v.values()))), **{k: sum(x) / len(x) for k, x in v.items()}}
            for g, v in rows.items()}


def tail_table(windows: Sequence[Window], scores: Sequence[Sequence[float]] | None) -> dict[str, Any]:
    """The headroom case: in each question window, only the documents of bm25 rank >= `TAIL_FROM` (what the script's
    start leaves unread), kept when they hold a gold and a non-gold document; gold recall at 1 there for `position`
    (the first shown), `bm25` (the best rank: what adding the next document does) and `student` (its best score):
    the choice a searcher started from the script must make to add a gold page.

    >>> d = [Document(id=i) for i in "abcde"]
    >>> w = Window("q", "?", "question", d, [5, 1, 4, 2, 6], [True, False, False, False, False])
    >>> tail_table([w], [[0.9, 0.0, 0.1, 0.0, 0.5]])
    {'windows': 1, 'position': 1.0, 'bm25': 0.0, 'student': 1.0}
    >>> tail_table([w], None)["windows"], tail_table([], None)
    (1, {'windows': 0})
    """
    got: dict[str, list[float]] = {}
    for j, w in enumerate(windows):
        idx = [i for i in range(w.n) if w.ranks[i] >= TAIL_FROM]
        if w.kind != "question" or not any(w.gold[i] for i in idx) or all(w.gold[i] for i in idx):
            continue
        picks = {"position": idx[0], "bm25": min(idx, key=lambda i: w.ranks[i])}
        if scores is not None:
            picks["student"] = max(idx, key=lambda i: (scores[j][i], -i))
        for k, i in picks.items():
            got.setdefault(k, []).append(float(w.gold[i]))
    n = len(next(iter(got.values()))) if got else 0
    return {"windows": n, **{k: sum(v) / len(v) for k, v in got.items()}}


def reuse_untrained(report: dict[str, Any], model: str, seed: int, windows: Sequence[Window],
                    reader: str = "listwise") -> tuple[dict[str, Any], float]:
    """An earlier run's untrained table and seconds per held-out window, for a run of the same model, seed and
    held-out windows (a LoRA starts as its base model, so a `--train 0` run scored exactly these windows). ValueError
    unless it is of this model, reader, seed and selection size, and its window counts, position and bm25 columns are
    these windows' own, group for group.

    >>> ws = [Window("q", "?", "question", [Document(id=i) for i in "abc"], [3, 1, 2], [True, False, False])]
    >>> old = {"model": "m", "seed": 0, "select": 2, "s_per_heldout_window": 8.0,
    ...        "untrained": {g: {**v, "student": 1.0} for g, v in selection_table(ws, None).items()}}
    >>> reuse_untrained(old, "m", 0, ws)[0]["all"]["student"], reuse_untrained(old, "m", 0, ws)[1]
    (1.0, 8.0)
    >>> reuse_untrained(old, "m", 1, ws)
    Traceback (most recent call last):
    ValueError: that report is of model 'm', seed 0, select 2; this run is of model 'm', seed 1, select 2
    >>> reuse_untrained({**old, "select": 1}, "m", 0, ws)  # scored at another selection size
    Traceback (most recent call last):
    ValueError: that report is of model 'm', seed 0, select 1; this run is of model 'm', seed 0, select 2
    >>> reuse_untrained(old, "m", 0, ws, reader="pointwise")  # the untrained column of another way of reading
    Traceback (most recent call last):
    ValueError: that report is of the listwise reader; this run is of the pointwise reader
    >>> reuse_untrained(old, "m", 0, ws + ws)
    Traceback (most recent call last):
    ValueError: that report scored other held-out windows (the counts, position or bm25 columns differ)
    """
    if (report.get("model"), report.get("seed"), report.get("select", SELECT)) != (model, seed, SELECT):
        raise ValueError(f"that report is of model {report.get('model')!r}, seed {report.get('seed')}, select "
                         f"{report.get('select', SELECT)}; this run is of model {model!r}, seed {seed}, select {SELECT}")
    if report.get("reader", "listwise") != reader:
        raise ValueError(f"that report is of the {report.get('reader', 'listwise')} reader; this run is of the "
                         f"{reader} reader")
    old = report.get("untrained") or {}
    mine = selection_table(windows, None)
    if set(old) != set(mine) or any(old[g].get(k) != v[k] for g, v in mine.items()
                                    for k in ("windows", "position", "bm25")):
        raise ValueError("that report scored other held-out windows (the counts, position or bm25 columns differ)")
    return dict(old), float(report["s_per_heldout_window"])


# ------------------------------------------------------------------------------------------------ the student


def listwise_loss(logits: Any, gold: Any) -> Any:
    """Minus the log of the softmax mass on the gold documents, averaged over windows. logits: (B, n) scores of the
    ids 1..n; gold: (B, n) booleans (each row has a gold document). Rows may be padded with logits = -inf.

    >>> import torch
    >>> round(float(listwise_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[True, False]]))), 4)  # log 2
    0.6931
    """
    import torch

    logp = torch.log_softmax(logits, dim=-1)  # (B, n)
    gold_logp = torch.logsumexp(logp.masked_fill(~gold, float("-inf")), dim=-1)  # (B,)
    return -gold_logp.mean()


def pointwise_loss(logits: Any, gold: Any) -> Any:
    """Binary cross-entropy of each document's score (as the logit of "this one is gold") against its label, over the
    real documents (padding is -inf and left out): a score that means the same in every window, so one threshold can
    say "nothing here is worth adding". Windows without a gold document are allowed.

    >>> import torch
    >>> round(float(pointwise_loss(torch.tensor([[0.0, float("-inf")]]), torch.tensor([[False, False]]))), 4)  # log 2
    0.6931
    """
    import torch

    real = torch.isfinite(logits)
    return torch.nn.functional.binary_cross_entropy_with_logits(logits[real], gold[real].float())


LOSSES = {"listwise": listwise_loss, "bce": pointwise_loss}


@dataclass
class Student:
    """A causal LM read at its first generated token: `scores(prompts, n)` -> (B, n) logits of the ids "1".."n".

    model: a transformers causal LM; encode: text -> token ids (no special tokens added beyond the model's own);
    id_tokens: the token id of "1", "2", ... (one token each)."""

    model: Any
    encode: Callable[[str], list[int]]
    id_tokens: list[int]
    pad_id: int = 0
    max_tokens: int = MAX_TOKENS  # the product reader's (searcher/title_following/reader.py), as WORDS
    loss: str = "listwise"  # LOSSES: "bce" for the pointwise reader whose scores must mean the same across windows
    times: list[float] = field(default_factory=list)

    def last_logits(self, prompts: Sequence[str]) -> Any:
        """(B, V) next-token logits at each prompt's last position (left padding, each prompt's own positions)."""
        return last_token_logits(self.model, [self.encode(p)[-self.max_tokens:] for p in prompts], self.pad_id)

    def logits(self, prompts: Sequence[str], n: Sequence[int]) -> Any:
        """(B, max n) logits of the id tokens at each prompt's last position; ids past a window's n are -inf."""
        import torch

        out = self.last_logits(prompts)  # (B, V)
        top = max(n)
        scores = out[:, self.id_tokens[:top]]  # (B, top)
        keep = torch.arange(top)[None, :] < torch.tensor(list(n))[:, None]
        return scores.masked_fill(~keep, float("-inf"))

    def window_logits(self, windows: Sequence[Window], words: int = WORDS) -> Any:
        """(B, max n) scores of each window's documents, -inf past a window's n: one prompt a window."""
        return self.logits([render(w, words) for w in windows], [w.n for w in windows])

    def scores(self, windows: Sequence[Window], words: int = WORDS, batch: int = 4) -> list[list[float]]:
        import torch

        out: list[list[float]] = []
        with torch.no_grad():
            for lo in range(0, len(windows), batch):
                part = windows[lo:lo + batch]
                got = self.window_logits(part, words)
                out += [row[: w.n].tolist() for row, w in zip(got, part, strict=True)]
        return out

    def train(self, windows: Sequence[Window], *, epochs: int = 1, lr: float = 2e-5, batch: int = 4,
              words: int = WORDS, seed: int = 0, log: Callable[[dict[str, float]], None] | None = None) -> list[float]:
        """Listwise training on `windows` (shuffled per epoch): the loss per step; `times`: seconds per example."""
        import torch

        params = [p for p in self.model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=lr)
        rng = random.Random(seed)
        losses: list[float] = []
        self.model.train()
        for _ in range(epochs):
            order = list(windows)
            rng.shuffle(order)
            for lo in range(0, len(order), batch):
                part = order[lo:lo + batch]
                t0 = time.perf_counter()
                logits = self.window_logits(part, words)
                top = logits.shape[1]
                gold = torch.tensor([[*w.gold, *[False] * (top - w.n)] for w in part])
                loss = LOSSES[self.loss](logits, gold)
                opt.zero_grad()
                loss.backward()
                opt.step()
                self.times.append((time.perf_counter() - t0) / len(part))
                losses.append(float(loss.detach()))
                if log is not None:
                    log({"step": len(losses), "loss": losses[-1], "s_per_example": self.times[-1]})
        self.model.eval()
        return losses


@dataclass
class PointwiseStudent(Student):
    """The causal LM as a cross-encoder: each (question, document) pair is its own short prompt (`render_pair`), read
    at its first generated token; a document's score is logit(" yes") - logit(" no"). `id_tokens` is [yes, no]
    (`yes_no_token_ids`). Trained with the same listwise loss over a window's pointwise scores, so the scores rank
    documents within a window as a selection must, and no document's number or place can carry the answer."""

    def window_logits(self, windows: Sequence[Window], words: int = WORDS) -> Any:
        import torch

        flat = self.pair_logits([render_pair(w.question, d, words) for w in windows for d in w.docs])  # (sum n,)
        top = max(w.n for w in windows)
        rows, lo = [], 0
        for w in windows:
            rows.append(torch.cat([flat[lo:lo + w.n], flat.new_full((top - w.n,), float("-inf"))]))
            lo += w.n
        return torch.stack(rows)

    def pair_logits(self, prompts: Sequence[str]) -> Any:
        """(B,) logit(" yes") - logit(" no") at each pair prompt's last position: a document's score."""
        out = self.last_logits(prompts)
        return out[:, self.id_tokens[0]] - out[:, self.id_tokens[1]]

    def pair_scores(self, question: str, docs: Sequence[Document], words: int = WORDS, batch: int = 16
                    ) -> list[float]:
        """Each of `docs`' score for `question` (logit yes - no), `batch` prompts a forward pass, no gradient: what a
        searcher that selects with a trained reader calls."""
        import torch

        out: list[float] = []
        with torch.no_grad():
            for lo in range(0, len(docs), batch):
                out += self.pair_logits([render_pair(question, d, words) for d in docs[lo:lo + batch]]).tolist()
        return out


def id_token_ids(tokenizer: Any, n: int = WINDOW) -> list[int]:
    """The single token id of each of "1".."n" as it follows "[" in `PROMPT_TAIL` (the listwise reader's choices)."""
    return one_token_each(tokenizer, PROMPT_TAIL, [str(i) for i in range(1, n + 1)])


def report_lines(r: dict[str, Any]) -> list[str]:
    """The report's lines; a run without training (`--train 0`) has no trained column.

    >>> g = {"windows": 2, "position": 0.25, "bm25": 0.75, "student": 0.5}
    >>> r = {"model": "m", "lora_r": None, "train_windows": 0, "heldout_windows": 2, "select": 2, "load_s": 1.0,
    ...      "untrained": {"all": g}, "trained": None}
    >>> report_lines(r)[2:], report_lines(r)[-1]  # doctest: +ELLIPSIS
    (['Generated by ... 2 held-out windows (other questions); no training (the untrained student only)...', ...
    >>> r |= {"from_reader": "m-pointwise", "windows": "leftover", "loss": "bce", "train_windows_without_gold": 3}
    >>> report_lines(r)[2]  # doctest: +ELLIPSIS
    '... Started from the saved reader m-pointwise (...). Windows: leftover; loss: bce, with 3 training windows that hold no gold.'
    """
    trained = r["trained"] is not None
    how = (f"{r['train_windows']} training windows, {r['heldout_windows']} held-out windows (other questions), "
           f"{r['epochs']} epoch(s), lr {r['lr']}, batch {r['batch']}; {r['s_per_example']:.2f} s per training "
           f"example (median), model load {r['load_s']} s; loss {r['loss_first_50']:.3f} (first 50 steps) -> "
           f"{r['loss_last_50']:.3f} (last 50)." if trained else
           f"{r['heldout_windows']} held-out windows (other questions); no training (the untrained student only), "
           f"model load {r['load_s']} s, "
           f"{r.get('s_per_heldout_window', float('nan')):.1f} s to score a held-out window.")
    if r.get("untrained_from"):
        how += f" The untrained column is {r['untrained_from']}'s (the same held-out windows, scored before)."
    if r.get("from_reader"):
        how += f" Started from the saved reader {r['from_reader']} (the untrained column is it, before this training)."
    if r.get("windows", "window") != "window" or r.get("loss", "listwise") != "listwise":
        how += (f" Windows: {r.get('windows', 'window')}; loss: {r.get('loss', 'listwise')}"
                + (f", with {r['train_windows_without_gold']} training windows that hold no gold"
                   if r.get("train_windows_without_gold") else "") + ".")
    reader = r.get("reader", "listwise")
    lines = [f"# Selection probe: {r['model']}" + (f" (LoRA r = {r['lora_r']})" if r["lora_r"] else "")
             + (", pointwise reader (one document a prompt, yes / no)" if reader == "pointwise" else ""), "",
             f"Generated by `benchmarks/selection_probe.py run`: {how}",
             "", f"Held-out gold recall at {r['select']} (windows shown shuffled):", "",
             "| windows | n | position [1, 2] | bm25 order | student untrained |" + (" student trained |" if trained else ""),
             "| --- | ---: | ---: | ---: | ---: |" + (" ---: |" if trained else "")]
    for group, u in r["untrained"].items():
        t = r["trained"][group] if trained else u
        lines.append(f"| {group} | {t['windows']} | {t['position']:.3f} | {t['bm25']:.3f} | {u['student']:.3f} |"
                     + (f" {t['student']:.3f} |" if trained else ""))
    at1_u, at1_t = r.get("untrained_at1"), r.get("trained_at1")
    if at1_u:
        lines += ["", "Held-out gold recall at 1 (the reader's best document):", "",
                  "| windows | n | position | bm25 order | student untrained |" + (" student trained |" if at1_t else ""),
                  "| --- | ---: | ---: | ---: | ---: |" + (" ---: |" if at1_t else "")]
        for group, u in at1_u.items():
            t = at1_t[group] if at1_t else u
            lines.append(f"| {group} | {t['windows']} | {t['position']:.3f} | {t['bm25']:.3f} | {u['student']:.3f} |"
                         + (f" {t['student']:.3f} |" if at1_t else ""))
    tail_u, tail_t = r.get("tail_untrained"), r.get("tail_trained")
    if (tail_u or tail_t or {}).get("windows"):
        t = tail_t or tail_u or {}
        untrained = f"{tail_u['student']:.3f}" if tail_u else "-"
        lines += ["", f"The headroom case: question windows' bm25 ranks {TAIL_FROM}-{WINDOW} only (what the script's "
                  "start leaves unread), those holding a gold and a non-gold document; gold recall at 1:", "",
                  "| n | position | bm25 order (the next document) | student untrained |"
                  + (" student trained |" if tail_t else ""), "| ---: | ---: | ---: | ---: |" + (" ---: |" if tail_t else ""),
                  f"| {t['windows']} | {t['position']:.3f} | {t['bm25']:.3f} | {untrained} |"
                  + (f" {tail_t['student']:.3f} |" if tail_t else "")]
    return lines
