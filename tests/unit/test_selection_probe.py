"""The selection probe (experiments/selection_probe.py): windows from a real bm25 index (shuffled, ranks kept, gold
labels), the baselines (position, bm25 order), gold recall per kind and rank, the listwise loss, and a student that
learns: a tiny random causal LM trained on windows whose gold documents say so reads them better than position."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from experiments import selection_probe as sp
from s3core.corpus import write_corpus
from s3core.errors import ConfigError
from s3core.types import Document, QAExample
from searcher.config import RetrieverConfig
from searcher.retrieval import build_index, load_retriever
from searcher.title_following.reader import yes_no_token_ids


def q(i: str, text: str, gold: list[str]) -> QAExample:
    return QAExample(id=i, question=text, golden_answers=["x"], metadata={"supporting_ids": gold})


def test_windows_from_a_real_bm25_index_keep_ranks_and_gold_and_are_shuffled(tmp_path: Path) -> None:
    docs = [Document(id=f"d{i}", title=f"Page {i}", text=f"river castle town {'castle ' * i}") for i in range(10)]
    docs.append(Document(id="g", title="Ostmark castle", text="Ostmark is a castle town on the river Sarn."))
    write_corpus(tmp_path / "c.jsonl", docs)
    bm25 = load_retriever(RetrieverConfig(), build_index(tmp_path / "c.jsonl", "bm25", tmp_path / "i"))
    qs = [q("q1", "Which castle town lies on the river Sarn?", ["g"]), q("q2", "castle", ["zz"])]
    ws = sp.build_windows(qs, bm25.search, {"g": "Ostmark castle"}, window=4, seed=1)
    assert [(w.question_id, w.kind) for w in ws] == [("q1", "question"), ("q1", "title")]  # q2: no gold in reach
    own = [d.id for d in bm25.search([qs[0].question], 4)[0]]
    w = ws[0]
    assert sorted(w.ranks) == [1, 2, 3, 4] and [own[r - 1] for r in w.ranks] == [d.id for d in w.docs]
    assert w.gold == [d.id == "g" for d in w.docs]
    assert sp.gold_recall(w, sp.select_by_bm25(w, 1)) == float(own[0] == "g")
    prompt = sp.render(w)
    assert prompt.startswith("Question: Which castle") and prompt.endswith(sp.PROMPT_TAIL) and "[4] " in prompt


def test_a_leftover_window_on_a_real_bm25_index_is_what_the_script_leaves(tmp_path: Path) -> None:
    """The reader started where the script ends chooses among the question's own ranks 4-16 that the title-following
    script did not add: the page the script follows (its title is in a top-3 document) is not in it."""
    from experiments.transfer import checks as tc

    docs = [Document(id=f"d{i}", title=f"Page {i}", text=f"river castle town {'castle ' * i}") for i in range(12)]
    docs += [Document(id="b", title="Sarn Bridge", text="Sarn Bridge is an old bridge over the river castle town."),
             Document(id="m", title="Ostmark", text="Ostmark castle town river. See Sarn Bridge."),
             Document(id="g", title="Old mill", text="A mill by the castle town on the river.")]
    write_corpus(tmp_path / "c.jsonl", docs)
    bm25 = load_retriever(RetrieverConfig(), build_index(tmp_path / "c.jsonl", "bm25", tmp_path / "i"))
    question = q("q1", "Which Ostmark castle town lies on the river?", ["b", "g"])
    ranked = bm25.search([question.question], sp.LEFTOVER_LAST)[0]
    h = tc.title_following_documents(question.question, ranked[:3], bm25.search, tc.TitleIndex.of(d.title for d in docs))
    assert "m" in [d.id for d in ranked[:3]] and "b" in h.added_by  # the script follows "Sarn Bridge" from Ostmark
    w = sp.leftover_window(question, h.documents, ranked, random.Random(0))
    assert w is not None and w.kind == "leftover"
    assert not {d.id for d in w.docs} & {d.id for d in h.documents} and min(w.ranks) >= sp.TAIL_FROM
    assert [ranked[r - 1].id for r in w.ranks] == [d.id for d in w.docs] and w.gold == [d.id == "g" for d in w.docs]


def test_the_table_splits_by_kind_and_rank_and_the_loss_is_the_gold_mass() -> None:
    import torch

    mk = sp.Window
    ws = [mk("a", "?", "question", [Document(id=i) for i in "xyz"], [1, 2, 3], [True, False, False]),
          mk("b", "?", "title", [Document(id=i) for i in "xyz"], [5, 4, 1], [True, False, False])]
    t = sp.selection_table(ws, [[0.0, 1.0, 0.5], [1.0, 0.0, 0.0]], m=1)
    assert t["all"] == {"windows": 2, "position": 1.0, "bm25": 0.5, "student": 0.5}
    assert t["title"]["bm25"] == 0.0 and t["gold rank 4-8"]["windows"] == 1 and t["gold rank 1-3"]["student"] == 0.0
    logits = torch.tensor([[2.0, 0.0, float("-inf")], [0.0, 0.0, 0.0]])
    gold = torch.tensor([[False, True, False], [True, True, False]])
    want = -(torch.log_softmax(logits[0], -1)[1] + torch.log(torch.tensor(2 / 3))) / 2
    assert float(sp.listwise_loss(logits, gold)) == pytest.approx(float(want))


def tiny_llama(words: list[str], marks: str) -> tuple[object, Callable[[str], list[int]], dict[str, int]]:
    """A tiny random Llama (seeded) over `words`, and its encoder: `marks` split off as their own words, unknown
    words are id 0. Skips the test without torch and transformers."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    vocab = {w: i for i, w in enumerate(words)}

    def encode(text: str) -> list[int]:
        for ch in marks:
            text = text.replace(ch, f" {ch} ")
        return [vocab.get(t, 0) for t in text.split()]

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)
    return transformers.LlamaForCausalLM(cfg), encode, vocab


def test_a_tiny_student_learns_to_read_the_gold_marker() -> None:
    net, encode, vocab = tiny_llama(["<pad>", "[", "]", ":", "gold", "other", "Question", "?", "The", "most",
                                     "useful", "document", "is", "T", *[str(i) for i in range(1, 9)]], "[]:?")
    student = sp.Student(net, encode, [vocab[str(i)] for i in range(1, 5)])
    rng = random.Random(0)

    def window(i: int) -> sp.Window:
        g = rng.randrange(4)
        docs = [Document(id=f"{i}-{j}", title="T", text="gold" if j == g else "other") for j in range(4)]
        return sp.Window(str(i), "?", "question", docs, [1, 2, 3, 4], [j == g for j in range(4)])

    train, held = [window(i) for i in range(48)], [window(100 + i) for i in range(24)]
    before = sp.selection_table(held, student.scores(held), m=1)["all"]
    losses = student.train(train, epochs=40, lr=3e-3, batch=8)  # ~2 s
    after = sp.selection_table(held, student.scores(held), m=1)["all"]
    assert sum(losses[-6:]) / 6 < sum(losses[:6]) / 6  # it learns
    assert after["student"] >= 0.9 > after["position"] and after["student"] > before["student"]
    assert len(student.times) == len(losses) and all(t > 0 for t in student.times)


def test_a_tiny_pointwise_student_learns_to_read_the_gold_marker_one_document_a_prompt() -> None:
    torch = pytest.importorskip("torch")
    net, encode, vocab = tiny_llama(["<pad>", ":", "gold", "other", "Question", "?", "Document", "T", "yes", "no",
                                     "Does", "this", "help"], ":?")
    student = sp.PointwiseStudent(net, encode, [vocab["yes"], vocab["no"]])
    rng = random.Random(0)

    def window(i: int) -> sp.Window:
        g, n = rng.randrange(4), 3 + i % 2  # windows of 3 and 4 documents: a batch pads the shorter
        g = min(g, n - 1)
        docs = [Document(id=f"{i}-{j}", title="T", text="gold" if j == g else "other") for j in range(n)]
        return sp.Window(str(i), "?", "question", docs, list(range(1, n + 1)), [j == g for j in range(n)])

    train, held = [window(i) for i in range(32)], [window(100 + i) for i in range(16)]
    got = student.window_logits(held[:2])
    assert got.shape == (2, 4) and torch.isinf(got[0, 3]) and bool(torch.isfinite(got[1]).all())  # 3 docs, then 4
    losses = student.train(train, epochs=25, lr=3e-3, batch=8)
    after = sp.selection_table(held, student.scores(held), m=1)["all"]
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4
    assert after["student"] >= 0.9 > after["position"]
    # a searcher scores one question's documents in batches, and gets the window's own scores
    w = held[1]
    assert student.pair_scores(w.question, w.docs, batch=3) == pytest.approx(student.scores([w])[0], abs=1e-4)


def test_a_tiny_pointwise_student_trained_with_bce_abstains_where_no_document_is_gold() -> None:
    """The pointwise loss learns a score that means the same in every window: windows with no gold at all are
    trainable, and one threshold (0: logit yes = no) keeps the gold and drops everything else."""
    net, encode, vocab = tiny_llama(["<pad>", ":", "gold", "other", "Question", "?", "Document", "T", "yes", "no",
                                     "Does", "this", "help"], ":?")
    student = sp.PointwiseStudent(net, encode, [vocab["yes"], vocab["no"]], loss="bce")
    rng = random.Random(1)

    def window(i: int) -> sp.Window:
        g = rng.randrange(3) if i % 2 else None  # every other window holds no gold document
        docs = [Document(id=f"{i}-{j}", title="T", text="gold" if j == g else "other") for j in range(3)]
        return sp.Window(str(i), "?", "leftover", docs, [4, 5, 6], [j == g for j in range(3)])

    train, held = [window(i) for i in range(32)], [window(100 + i) for i in range(16)]
    losses = student.train(train, epochs=25, lr=3e-3, batch=8)
    scores = student.scores(held)
    kept = [w.gold[i] for w, sc in zip(held, scores, strict=True) for i in range(w.n) if sc[i] > 0]
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4
    assert kept and all(kept) and len(kept) >= 0.9 * sum(sum(w.gold) for w in held)


def test_the_tokenizers_give_yes_and_no_one_token_each_after_the_pointwise_prompt() -> None:
    class Chars:  # a tokenizer of single characters: " yes" is four tokens
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [ord(c) for c in text]

    class Words(Chars):
        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [sum(map(ord, w)) for w in re.findall(r" ?\S+", text)]  # a word with the space before it

    assert len(yes_no_token_ids(Words())) == 2
    with pytest.raises(ConfigError, match="does not give ' yes' one token"):
        yes_no_token_ids(Chars())


def test_the_module_doctests() -> None:
    import doctest

    res = doctest.testmod(sp, raise_on_error=False)
    assert res.failed == 0 and res.attempted > 0
