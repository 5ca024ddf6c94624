"""experiments/rollout_temperature.py with fakes: the per-temperature aggregation (informative / task-informative /
format-only groups, the rollout measures), the loop's seeds, resume and ordering, the run identity, the refusal of a
reward that calls the generator, and the written report."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

import experiments.rollout_temperature as rt
from s3core.errors import S3Error
from s3core.types import Document, QAExample, SearchResult, SearchStep


def test_doctests() -> None:
    res = doctest.testmod(rt, raise_on_error=False)
    assert res.attempted >= 6 and res.failed == 0


def _ex(i: int) -> QAExample:
    return QAExample(id=f"q{i}", question=f"question {i}?", golden_answers=["a"], metadata={"supporting_ids": [f"g{i}"]})


def _res(q: str, added: list[str], invalid: int = 0, first_invalid: bool = False) -> SearchResult:
    """A rollout over naive RAG's top-3 (t1, t2, t3) that added `added` with one search turn per added document and
    `invalid` invalid replies after them."""
    steps = [SearchStep(turn=0, retrieved_ids=["t1", "t2", "t3"], invalid_reason="bad" if first_invalid else None)]
    steps += [SearchStep(turn=i + 1, query=f"find {d}", retrieved_ids=[d], selected_ids=[d]) for i, d in enumerate(added)]
    steps += [SearchStep(turn=len(added) + 1 + j, invalid_reason="no action") for j in range(invalid)]
    docs = [Document(id=d, text=d) for d in ["t1", "t2", "t3", *added]]
    return SearchResult(question=q, documents=docs, steps=steps)


def test_the_aggregation_counts_groups_as_grpo_sees_them() -> None:
    ex = _ex(0)
    rows = [
        # task reward differs: one rollout added the gold paragraph
        rt.group_row(0.6, 0, ex, [_res(ex.question, ["g0"]), _res(ex.question, [])], [1.0, 0.0], [0.0, 0.0], 2.0),
        # only the format term differs (a flat task reward): informative, but format-only
        rt.group_row(0.6, 1, ex, [_res(ex.question, [], invalid=1), _res(ex.question, [])], [-0.05, 0.0],
                     [-0.05, 0.0], 2.0),
        # flat: both added one non-gold paragraph
        rt.group_row(0.6, 2, ex, [_res(ex.question, ["x"]), _res(ex.question, ["y"])], [-0.25, -0.25], [0.0, 0.0], 2.0),
        # one scored rollout: no advantage at all
        rt.group_row(0.6, 3, ex, [_res(ex.question, [], first_invalid=True), _res(ex.question, [])], [None, 0.0],
                     [-0.1, 0.0], 2.0),
    ]
    s = rt.summarize_temperature(rows)
    assert (s["groups"], s["rollouts"]) == (4, 8)
    assert (s["informative"], s["task_informative"], s["format_only"], s["flat"]) == (0.5, 0.25, 0.25, 0.25)
    assert s["unscored_groups"] == 1 and s["missing_rewards"] == 1
    scored = [1.0, 0.0, -0.05, 0.0, -0.25, -0.25, 0.0]
    assert s["reward_mean"] == pytest.approx(sum(scored) / 7)
    assert s["group_std_mean"] == pytest.approx((0.5 + 0.025 + 0.0) / 3)  # groups with >= 2 scored rollouts
    assert s["added"] == pytest.approx(3 / 8) and s["gold_added"] == pytest.approx(1 / 8)
    assert s["groups_gold_added"] == 0.25
    assert s["searched"] == pytest.approx(3 / 8)
    # one rollout's only reply was invalid (no valid action at all); another had a valid reply, then an invalid one
    assert s["first_reply_valid"] == pytest.approx(7 / 8)
    assert s["valid_action"] == pytest.approx(7 / 8) and s["all_valid"] == pytest.approx(6 / 8)
    assert s["seconds"] == 8.0 and s["seconds_per_rollout"] == 1.0


def test_rows_keep_what_each_rollout_did() -> None:
    ex = _ex(3)
    row = rt.group_row(1.0, 7, ex, [_res(ex.question, ["g3", "z"])], [0.75], [0.0], 1.23456)
    assert row["temperature"] == 1.0 and row["index"] == 7 and row["id"] == "q3" and row["seconds"] == 1.235
    (o,) = row["rollouts"]
    assert o["added_ids"] == ["g3", "z"] and o["gold_added"] and o["queries"] == ["find g3", "find z"]
    assert o["searches"] == 2 and o["top_k"] and o["docs"] == 5
    json.dumps(row)  # a jsonl row
    with pytest.raises(ValueError, match="rollouts"):
        rt.group_row(1.0, 0, ex, [_res(ex.question, [])], [0.0, 0.0], [0.0], 1.0)


class FakeLoop:
    """Rollouts whose outcome depends only on (temperature, seed, position): at temperature 0 every rollout of a group
    adds nothing, above it the first of each group adds the gold paragraph."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, list[str], int]] = []

    def rollout(self, t: float, examples: list[QAExample], seed: int) -> list[SearchResult]:
        self.calls.append((t, [e.id for e in examples], seed))
        out = []
        for i, e in enumerate(examples):
            first = i == 0 or examples[i - 1].id != e.id
            out.append(_res(e.question, [e.supporting_ids[0]] if t > 0 and first else []))
        return out

    def score(self, results: list[SearchResult], examples: list[QAExample]) -> tuple[list[float | None], list[float]]:
        gold = [set(e.supporting_ids) for e in examples]
        return [float(bool({d.id for d in r.documents} & g)) for r, g in zip(results, gold, strict=True)], [0.0] * len(results)


def test_the_loop_uses_the_same_seeds_at_every_temperature_and_resumes(tmp_path: Path) -> None:
    exs = [_ex(i) for i in range(3)]
    loop, path = FakeLoop(), tmp_path / "rows.jsonl"
    ticks: list[tuple[float, int]] = []
    rows = rt.measure(exs, [0.0, 1.0], 2, rollout=loop.rollout, score=loop.score, rows_path=path, seed=5, chunk=2,
                      progress=lambda t, n: ticks.append((t, n)))
    assert len(rows) == 6 and len(path.read_text().splitlines()) == 6
    # chunks of 2 questions x G = 2, seeded by where the chunk starts, identically at both temperatures
    assert [(t, s) for t, _, s in loop.calls] == [(0.0, rt.chunk_seed(5, 0)), (0.0, rt.chunk_seed(5, 2)),
                                                  (1.0, rt.chunk_seed(5, 0)), (1.0, rt.chunk_seed(5, 2))]
    assert loop.calls[0][1] == ["q0", "q0", "q1", "q1"] and ticks == [(0.0, 2), (0.0, 1), (1.0, 2), (1.0, 1)]
    s = rt.summarize(rows)
    assert list(s) == ["0", "1"]
    assert s["0"]["informative"] == 0.0 and s["1"]["informative"] == 1.0 and s["1"]["gold_added"] == 0.5
    # a second run does nothing; a new temperature and a new question run only what is missing
    loop2 = FakeLoop()
    again = rt.measure(exs, [0.0, 1.0], 2, rollout=loop2.rollout, score=loop2.score, rows_path=path, seed=5, chunk=2)
    assert loop2.calls == [] and len(again) == 6
    more = rt.measure([*exs, _ex(3)], [0.0, 1.0, 1.5], 2, rollout=loop2.rollout, score=loop2.score, rows_path=path,
                      seed=5, chunk=2)
    assert [(t, ids, s) for t, ids, s in loop2.calls] == [
        (0.0, ["q3", "q3"], rt.chunk_seed(5, 2)), (1.0, ["q3", "q3"], rt.chunk_seed(5, 2)),
        (1.5, ["q0", "q0", "q1", "q1"], rt.chunk_seed(5, 0)), (1.5, ["q2", "q2", "q3", "q3"], rt.chunk_seed(5, 2))]
    assert len(more) == 12 and rt.done_keys(more) == {(t, f"q{i}") for t in ("0", "1", "1.5") for i in range(4)}


def test_rows_kept_as_rows_jsonl_gz_are_read_as_they_are_and_a_resume_extends_them(tmp_path: Path) -> None:
    """benchmarks/results keeps a finished probe's rows as rows.jsonl.gz: a rerun of what it holds measures nothing,
    and one that asks for more unpacks the rows first and appends to them (one copy, every row kept)."""
    import gzip

    exs, path = [_ex(0), _ex(1)], tmp_path / "rows.jsonl"
    rows = rt.measure(exs, [1.0], 2, rollout=FakeLoop().rollout, score=FakeLoop().score, rows_path=path)
    gz = tmp_path / "rows.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    loop = FakeLoop()
    assert rt.measure(exs, [1.0], 2, rollout=loop.rollout, score=loop.score, rows_path=path) == json.loads(json.dumps(rows))
    assert loop.calls == [] and gz.is_file() and not path.exists()  # reading never unpacks
    more = rt.measure([*exs, _ex(2)], [1.0], 2, rollout=loop.rollout, score=loop.score, rows_path=path)
    assert [ids for _, ids, _ in loop.calls] == [["q2", "q2"]] and not gz.exists()
    assert len(more) == 3 and len(path.read_text().splitlines()) == 3


def test_a_short_rollout_list_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(S3Error, match="rollouts"):
        rt.measure([_ex(0)], [1.0], 2, rollout=lambda t, e, s: [], score=FakeLoop().score,
                   rows_path=tmp_path / "rows.jsonl")


def test_the_report_files(tmp_path: Path) -> None:
    loop = FakeLoop()
    rows = rt.measure([_ex(0), _ex(1)], [0.5, 1.0], 2, rollout=loop.rollout, score=loop.score,
                      rows_path=tmp_path / "rows.jsonl")
    summary = rt.write_results(tmp_path, rows, {"policy": "fake", "questions": 2, "group_size": 2, "command": "x"})
    data = json.loads((tmp_path / rt.RESULTS_FILE).read_text())
    assert data["by_temperature"] == json.loads(json.dumps(summary)) and data["best_task_informative"] == "0.5"
    md = (tmp_path / rt.REPORT_FILE).read_text()
    assert "| 0.5 | 2 | 100% |" in md and "Most task-informative: 0.5." in md
    assert (tmp_path / rt.PLOT_FILE).read_bytes()[:4] == b"\x89PNG"


def test_the_run_identity_refuses_a_resume_with_other_settings(tmp_path: Path) -> None:
    ident = {"policy": "/p", "group_size": 8, "seed": 0}
    rt.check_identity(tmp_path, ident, ["q0", "q1"])
    rt.check_identity(tmp_path, ident, ["q0"])  # fewer questions: a prefix
    rt.check_identity(tmp_path, ident, ["q0", "q1", "q2"])  # more: extends
    assert json.loads((tmp_path / rt.RUN_FILE).read_text())["question_ids"] == ["q0", "q1", "q2"]
    with pytest.raises(S3Error, match="group_size"):
        rt.check_identity(tmp_path, {**ident, "group_size": 4}, ["q0"])
    with pytest.raises(S3Error, match="other questions"):
        rt.check_identity(tmp_path, ident, ["q9"])


def test_a_reward_that_calls_the_generator_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    smoke = Path(__file__).resolve().parents[2] / "configs" / "smoke.toml"  # reward = acc_plus_gbr
    rc = rt.main(["--config", str(smoke), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--allow-generator" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()  # refused before anything was loaded or written
    from s3.config import load_config

    assert rt.needs_generator(load_config(smoke, [])) and not rt.needs_generator(
        load_config(smoke, ["training.reward=retrieval_gain"]))


def test_best_temperature_prefers_the_task_reward_and_the_lower_temperature() -> None:
    assert rt.best_temperature({}) is None
    s = {"0.6": {"task_informative": 0.25, "informative": 0.9}, "1": {"task_informative": 0.5}, "1.2": {"task_informative": 0.5}}
    assert rt.best_temperature(s) == "1"
