"""The reading searcher's trainer, its logic on fakes: candidates (the start's pages left out, ranks kept), the credit
store (resume, stale rows, another scorer refused), the reader's targets and loss, the ranker's stop choice, and a
ranker that adds several pages or none."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from generator_adapters.likelihood import Credit
from s3core.errors import ConfigError
from s3core.types import Document, QAExample
from training.reading.candidates import Candidates
from training.reading.credit import CreditStore
from training.reading.ranker_fit import choose_stop
from training.reading.reader_fit import credit_target, gold_target, kl_to_target


def _d(i: str, title: str = "") -> Document:
    return Document(id=i, title=title, text=f"text of {i}")


class _Ranked:
    """A retriever whose every list is the same ten pages, d1..d10."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int]] = []

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        self.calls.append((list(queries), k))
        return [[_d(f"d{n}") for n in range(1, k + 1)] for _ in queries]


def test_untitled_candidates_are_the_ranks_past_the_start() -> None:
    r = _Ranked()
    [c] = Candidates.build(r, ["q?"], k0=3, read_last=6, titled=False)
    assert [d.id for d in c.start] == ["d1", "d2", "d3"]
    assert [d.id for d in c.candidates] == ["d4", "d5", "d6"] and c.ranks == [4, 5, 6]
    assert not c.titled


def test_no_questions_no_retrieval() -> None:
    r = _Ranked()
    assert Candidates.build(r, [], titled=False) == [] and r.calls == []


def _q(i: str) -> QAExample:
    return QAExample(id=i, question=f"question {i}?", golden_answers=["Paris"])


def _cands() -> Candidates:
    return Candidates(question="q?", start=[_d("a")], candidates=[_d("b"), _d("c")], ranks=[4, 5], titled=False,
                      gold=[True, False])


def test_credit_store_resumes_and_knows_stale_rows(tmp_path: Path) -> None:
    path = tmp_path / "credit.jsonl"
    fp = {"generator": "g1"}
    store = CreditStore(path, fp)
    q, c = _q("1"), _cands()
    assert not store.fresh(q, c)
    store.add(q, c, Credit(base=-2.0, gains=[1.5, -0.25], answer_tokens=1, computed_tokens=10, prompt_tokens=30), 0.5)
    again = CreditStore(path, fp)
    assert again.fresh(q, c) and again["1"]["gains"] == [1.5, -0.25] and again["1"]["gold"] == [True, False]
    other = Candidates(question="q?", start=[_d("a")], candidates=[_d("b"), _d("x")], ranks=[4, 5], titled=False)
    assert not again.fresh(q, other)  # another candidate list: scored again


def test_credit_store_refuses_another_scorer(tmp_path: Path) -> None:
    path = tmp_path / "credit.jsonl"
    CreditStore(path, {"generator": "g1"})
    with pytest.raises(ConfigError, match="g1"):
        CreditStore(path, {"generator": "g2"})


def test_credit_store_survives_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "credit.jsonl"
    store = CreditStore(path, {"g": 1})
    store.add(_q("1"), _cands(), Credit(-1.0, [0.0, 1.0], 1, 1, 1), 0.1)
    with path.open("a") as fh:
        fh.write('{"id": "2", "gai')  # a kill mid-write
    assert len(CreditStore(path, {"g": 1})) == 1


def test_targets() -> None:
    t = credit_target([0.0, 2.0, -1.0], 1.0)
    assert math.isclose(sum(t), 1.0) and t[1] > t[0] > t[2]
    sharp = credit_target([0.0, 2.0, -1.0], 0.1)
    assert sharp[1] > 0.99
    with pytest.raises(ConfigError):
        credit_target([1.0], 0.0)
    assert gold_target([False, False]) is None


def test_kl_is_zero_at_the_target_and_pulls_toward_it() -> None:
    torch = pytest.importorskip("torch")
    target = credit_target([0.0, 1.0], 1.0)
    at = torch.tensor([0.0, 1.0])
    assert float(kl_to_target(at, target)) == pytest.approx(0.0, abs=1e-6)
    logits = torch.tensor([1.0, 0.0], requires_grad=True)
    loss = kl_to_target(logits, target)
    loss.backward()
    assert float(loss.detach()) > 0 and logits.grad[1] < 0 < logits.grad[0]  # raise the page the credit prefers


def test_choose_stop_adds_pages_only_where_the_held_out_credit_says_they_help() -> None:
    # two good pages a question: two pages are worth more than one
    pages, cut, tried = choose_stop([[3.0, 2.0, -1.0]] * 3, [[1.0, 0.5, -2.0]] * 3)
    assert pages == 2 and cut is None and tried["pages=2"] > tried["pages=1"] > 0
    # only the pages the ranker scores high help: a threshold keeps them
    pages, cut, _ = choose_stop([[2.0], [-1.0]], [[1.0], [-3.0]])
    assert pages == 1 and cut is not None and -1.0 < cut <= 2.0
    # nothing helps: add nothing
    assert choose_stop([[1.0, 0.0]], [[-1.0, -0.5]])[:2] == (0, None)


def test_a_ranker_picks_up_to_pages_above_its_threshold(tmp_path: Path) -> None:
    import json

    from searcher.title_following.links import LinkRanker

    path = tmp_path / "r.json"
    path.write_text(json.dumps({"weights": {"log_rank": -1.0, "bias": 2.0}}))
    r = LinkRanker.load(str(path))
    docs = [_d("p", "P"), _d("q", "Q"), _d("r", "R")]
    # scores 2 - log(rank): 4 -> 0.61, 5 -> 0.39, 9 -> -0.20
    assert r.pick("x?", [], docs, [5, 4, 9], pages=2) == [1, 0]
    assert r.pick("x?", [], docs, [5, 4, 9], pages=3, min_score=0.0) == [1, 0]
    assert r.pick("x?", [], docs, [5, 4, 9], pages=0) == []
    assert r.best("x?", [], docs, [5, 4, 9]) == 1


def test_the_probe_table_counts_first_picks_that_are_gold() -> None:
    from experiments.credit_probe import summarize

    rows = [
        {"id": "1", "gains": [0.1, 5.0, -1.0], "gold": [False, True, False], "ranks": [4, 5, 6],
         "computed_tokens": 100, "prompt_tokens": 300, "seconds": 2.0},
        {"id": "2", "gains": [2.0, 0.5], "gold": [False, True], "ranks": [4, 9],
         "computed_tokens": 80, "prompt_tokens": 200, "seconds": 1.0},
        {"id": "3", "gains": [0.2, 0.1], "gold": [False, False], "ranks": [4, 5],
         "computed_tokens": 80, "prompt_tokens": 200, "seconds": 1.0},
    ]
    s = summarize(rows, {"1": [0.0, 1.0, 2.0], "2": [0.0, 3.0]})
    t = s["choosers"]
    assert s["questions_with_gold_and_other"] == 2 and s["questions_without_gold_candidate"] == 1
    assert t["credit (generator's gain)"]["best_is_gold"] == 0.5  # right on 1, wrong on 2
    assert t["bm25 order"]["best_is_gold"] == 0.0  # rank 4 is never the gold one here
    assert t["gold-trained reader (shipped)"]["best_is_gold"] == 0.5
    assert s["gain_gold"]["n"] == 2 and s["gain_gold"]["positive"] == 1.0


# ------------------------------------------------------------------------------------------- 'genacc' credit


class _FakeAccuracy:
    """Acc(G(Q, D)) on a script: 1.0 where the documents hold a page named in `right`, a failed call (None) for the
    questions in `fail`; every answer projected at `usd` and spending it."""

    def __init__(self, right: set[str], fail: set[str] = frozenset(), usd: float = 0.0) -> None:  # type: ignore[assignment]
        self.right, self.fail, self.usd = right, fail, usd
        self.asked: list[int] = []
        self.spent = 0.0
        self.closed = False

    async def __call__(self, questions: list[str], documents: list[list[Document]],
                       golden: list[list[str]]) -> list[float | None]:
        self.asked.append(len(questions))
        self.spent += self.usd * len(questions)
        return [None if q in self.fail else float(any(d.id in self.right for d in docs))
                for q, docs in zip(questions, documents, strict=True)]

    def project(self, questions: list[str], documents: object, golden: object) -> list[float]:
        return [self.usd] * len(questions)

    def usage(self) -> dict[str, float]:
        return {"cost_usd": self.spent}

    def clients(self) -> dict[str, object]:
        return {}

    def close(self) -> None:
        self.closed = True


def _genacc_run(tmp_path: Path, *sets: str, max_cost_usd: float | None = None) -> object:
    from s3.config import load_config
    from training.reading.trainer import ReadingRun

    cfg = load_config(None, ["searcher.kind=reading", "training.reading.credit=genacc",
                             "generator.model=hosted_vllm/my-generator", "generator.api_base=http://127.0.0.1:9/v1",
                             f"training.output_dir={tmp_path / 'run'}", *sets])
    return ReadingRun(cfg, log=lambda m: None, max_cost_usd=max_cost_usd)


def test_genacc_credit_is_each_pages_gain_in_accuracy_and_a_failed_call_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import eval.build

    fake = _FakeAccuracy(right={"c"}, fail={"question q2?"})
    monkeypatch.setattr(eval.build, "build_accuracy", lambda *a, **k: fake)
    run = _genacc_run(tmp_path)
    qs = [_q("q1"), _q("q2"), _q("q3")]
    cands = {q.id: _cands() for q in qs}
    store = run.credit(qs, cands)  # type: ignore[attr-defined]
    assert "q2" not in store and len(store) == 2  # missing, not 0: asked again on the next run
    assert store["q1"]["base"] == 0.0 and store["q1"]["gains"] == [0.0, 1.0]  # c turns the answer right
    assert fake.closed and sum(fake.asked) == 3 * 3  # the start and each of the 2 pages, per question
    fake.fail = set()
    again = run.credit(qs, cands)  # type: ignore[attr-defined]
    assert "q2" in again and fake.asked[-1] == 3  # only the missing question is asked


def test_genacc_credit_stops_before_a_batch_that_would_pass_the_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import eval.build
    from generator_adapters.budget import BudgetReached

    fake = _FakeAccuracy(right={"b"}, usd=0.001)
    monkeypatch.setattr(eval.build, "build_accuracy", lambda *a, **k: fake)
    qs = [_q(f"q{i}") for i in range(6)]  # 2 batches of 4 and 2 questions, 3 answers each: $0.012 then $0.006
    cands = {q.id: _cands() for q in qs}
    run = _genacc_run(tmp_path, max_cost_usd=0.015)
    with pytest.raises(BudgetReached, match=r"--max-cost-usd"):
        run.credit(qs, cands)  # type: ignore[attr-defined]
    assert fake.asked == [12]  # the first batch ran, the second was never started
    spend = json.loads((tmp_path / "run" / "credit.spend.json").read_text())
    assert spend["spent_usd"] == pytest.approx(0.012)
    resumed = _genacc_run(tmp_path, max_cost_usd=0.02)  # a higher cap resumes, counting what was spent
    store = resumed.credit(qs, cands)  # type: ignore[attr-defined]
    assert len(store) == 6 and fake.asked == [12, 6]


def test_genacc_credit_refuses_a_paid_generator_without_its_key_before_anything(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"generator\.api_key_env"):
        _genacc_run(tmp_path, "generator.model=openai/gpt-4o-mini", "generator.api_base=")


def test_logprob_credit_on_a_served_generator_points_to_genacc(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"training\.reading\.credit = 'genacc'"):
        _genacc_run(tmp_path, "training.reading.credit=logprob")


def test_a_run_with_questions_missing_their_credit_stops_before_the_reader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader is trained once on the credit: a question left unscored by a failed call stops the run before it
    (asked again by the next run), instead of a reader that never sees it."""
    import eval.build

    fake = _FakeAccuracy(right={"c"}, fail={"question q2?"})
    monkeypatch.setattr(eval.build, "build_accuracy", lambda *a, **k: fake)
    run = _genacc_run(tmp_path)
    qs = [_q("q1"), _q("q2")]
    monkeypatch.setattr(run, "_data", lambda: (qs, [], None, False))
    monkeypatch.setattr(run, "_candidates", lambda r, q, t: {x.id: _cands() for x in q})
    monkeypatch.setattr(run, "reader", lambda *a: pytest.fail("the reader ran on incomplete credit"))
    out = run.run()  # type: ignore[attr-defined]
    assert out["stopped"] == "credit missing" and out["missing"] == 1
