"""The evaluation harness's own logic, with a fake generator and scorer: resume, kill-midway, failed-row retries,
option validation, summary math. The real generator / index / metrics are driven in tests/integration/test_eval*.py.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import pytest

from eval.accuracy import Prediction, Scores
from eval.contexts import ContextOut, read_contexts_file
from eval.harness import Components, EvalOptions, load_dataset, run_eval, validate_options
from eval.rundir import RunDirError, read_results, run_lock
from eval.summary import summarize
from s3core.errors import ConfigError, DataFormatError
from s3core.io import append_jsonl, repair_tail, stored
from s3core.types import Document, QAExample

GOLD = {f"q{i}": f"answer{i}" for i in range(7)}


def make_dataset(root: Path, n: int = 7) -> Path:
    d = root / "ds"
    d.mkdir()
    with (d / "questions.jsonl").open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"q{i}", "question": f"question {i}?", "golden_answers": [f"answer{i}"],
                                 "metadata": {"supporting_ids": [f"d{i}", f"d{i + 1}"]}}) + "\n")
    with (d / "corpus.jsonl").open("w") as fh:
        for i in range(n + 1):
            fh.write(json.dumps({"id": f"d{i}", "contents": f'"T{i}"\ntext about answer{i}'}) + "\n")
    (d / "manifest.json").write_text(json.dumps({"name": "toy", "format": "hotpotqa", "corpus_file": "corpus.jsonl",
                                                 "questions_file": "questions.jsonl"}))
    return d


class FakeGen:
    """Answers 'answer<i>' for even i and 'wrong' for odd i; fails the ids in `fail` (once each, or always)."""

    def __init__(self, fail: set[str] | None = None, always: bool = False) -> None:
        self.fail = set(fail or ())
        self.always = always
        self.calls: list[str] = []

    async def __call__(self, qs: list[QAExample], ctxs: list[list[Document]]) -> list[Prediction]:
        out = []
        for q in qs:
            self.calls.append(q.id)
            if q.id in self.fail:
                if not self.always:
                    self.fail.discard(q.id)
                out.append(Prediction(text=None, error="ServerError: 500"))
                continue
            i = int(q.id[1:])
            out.append(Prediction(text=GOLD[q.id] if i % 2 == 0 else "wrong", latency_s=0.5,
                                  prompt_tokens=10, completion_tokens=2, cost_usd=0.001))
        return out


async def fake_score(qs: list[QAExample], answers: list[str]) -> list[Scores]:
    out = []
    for q, a in zip(qs, answers, strict=True):
        ok = float(a in q.golden_answers)
        out.append(Scores(genacc=ok, span=ok, em=ok, f1=ok))
    return out


async def rag_contexts(qs: list[QAExample]) -> list[ContextOut]:
    return [ContextOut(documents=[Document(id=f"d{int(q.id[1:])}", text="x")], latency_s=0.1) for q in qs]


def opts_for(ds: Path, out: Path, **kw: object) -> EvalOptions:
    return EvalOptions(dataset=ds, method=str(kw.pop("method", "naive_rag")), out=out, progress=False,
                       batch_size=int(kw.pop("batch_size", 3)), **kw)  # type: ignore[arg-type]


CONFIG = {"dataset": {"name": "toy", "questions_sha256": "x"}, "method": "naive_rag", "generator": {"model": "fake"}}


def test_full_run_then_resume_skips_finished(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path)
    out = tmp_path / "run"
    gen = FakeGen()
    s = run_eval(opts_for(ds, out), load_dataset(ds), Components(rag_contexts, gen, fake_score), CONFIG)
    assert s["n_scored"] == 7 and s["n_failed"] == 0
    assert s["metrics"]["genacc"]["mean"] == pytest.approx(4 / 7)  # q0, q2, q4, q6
    assert s["metrics"]["support_recall"]["mean"] == pytest.approx(0.5)
    assert len(gen.calls) == 7
    gen2 = FakeGen()
    s2 = run_eval(opts_for(ds, out), load_dataset(ds), Components(rag_contexts, gen2, fake_score), CONFIG)
    assert gen2.calls == []
    assert s2["invocation"]["skipped_finished"] == 7 and s2["invocation"]["rows_written"] == 0
    assert (out / "results.jsonl").read_text().count("\n") == 7
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_scored"] == 7 and summary["config"] == CONFIG


def test_failed_rows_are_missing_counted_and_only_they_are_retried(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path)
    out = tmp_path / "run"
    gen = FakeGen(fail={"q0", "q3"})
    s = run_eval(opts_for(ds, out), load_dataset(ds), Components(rag_contexts, gen, fake_score), CONFIG)
    assert s["n_failed"] == 2 and s["n_scored"] == 5
    # means over scored rows only: of q1,q2,q4,q5,q6 the even ones are right -> 3/5, not 3/7
    assert s["metrics"]["genacc"]["mean"] == pytest.approx(3 / 5)
    rows = read_results(out / "results.jsonl")
    assert rows["q0"]["metrics"]["genacc"] is None and rows["q0"]["error"].startswith("ServerError")
    gen2 = FakeGen()
    s2 = run_eval(opts_for(ds, out), load_dataset(ds), Components(rag_contexts, gen2, fake_score), CONFIG)
    assert sorted(gen2.calls) == ["q0", "q3"]
    assert s2["n_failed"] == 0 and s2["n_scored"] == 7
    assert s2["metrics"]["genacc"]["mean"] == pytest.approx(4 / 7)
    assert s2["invocation"]["retried_failed"] == 2
    final = read_results(out / "results.jsonl")
    assert final["q0"]["attempt"] == 2 and final["q1"]["attempt"] == 1
    # the raw file holds 9 lines (7 + 2 retries); the final view has exactly one row per id
    assert (out / "results.jsonl").read_text().count("\n") == 9
    assert sorted(final) == sorted(GOLD)


def test_kill_midway_truncated_line_is_rerun_without_duplicates(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path)
    out = tmp_path / "run"
    run_eval(opts_for(ds, out, limit=4), load_dataset(ds, limit=4), Components(rag_contexts, FakeGen(), fake_score),
             CONFIG)
    res = out / "results.jsonl"
    lines = res.read_bytes().splitlines(keepends=True)
    # simulate a kill in the middle of writing the 4th row
    res.write_bytes(b"".join(lines[:3]) + lines[3][: len(lines[3]) // 2])
    assert sorted(read_results(res)) == ["q0", "q1", "q2"]
    gen = FakeGen()
    s = run_eval(opts_for(ds, out), load_dataset(ds), Components(rag_contexts, gen, fake_score), CONFIG)
    assert gen.calls == ["q3", "q4", "q5", "q6"]
    assert s["n_scored"] == 7
    text = res.read_text()
    assert text.endswith("\n") and text.count("\n") == 7
    assert [json.loads(x)["id"] for x in text.splitlines()] == [f"q{i}" for i in range(7)]


def test_a_run_archived_as_results_jsonl_gz_is_read_as_it_was_and_a_resume_extends_it(tmp_path: Path) -> None:
    """benchmarks/results keeps finished runs' rows as results.jsonl.gz: the readers see the same rows, and `s3 eval`
    on that folder unpacks them and runs only the questions it lacks (one copy of the rows afterwards)."""
    ds = make_dataset(tmp_path)
    out = tmp_path / "run"
    run_eval(opts_for(ds, out, limit=4), load_dataset(ds, limit=4), Components(rag_contexts, FakeGen(), fake_score),
             CONFIG)
    res = out / "results.jsonl"
    rows = read_results(res)
    gz = out / "results.jsonl.gz"
    gz.write_bytes(gzip.compress(res.read_bytes()))
    res.unlink()
    assert stored(res) == gz and read_results(res) == rows
    gen = FakeGen()
    s = run_eval(opts_for(ds, out), load_dataset(ds), Components(rag_contexts, gen, fake_score), CONFIG)
    assert gen.calls == ["q4", "q5", "q6"] and s["n_scored"] == 7
    assert not gz.exists() and res.read_text().count("\n") == 7
    # a damaged archive is an error that names it, not rows silently lost
    res.unlink()
    gz.write_bytes(gzip.compress(b'{"id": "q0"}\n')[:-6])
    with pytest.raises(DataFormatError, match=r"results.jsonl.gz: not a complete gzip file"):
        read_results(res)
    with pytest.raises(DataFormatError, match=r"results.jsonl.gz: not a complete gzip file"):
        repair_tail(res)
    assert gz.exists() and not res.exists() and not list(out.glob(".results.jsonl.*"))
    # damage inside the stream (a byte flipped: zlib's error, a CRC mismatch, or text that no longer parses) is a
    # DataFormatError naming the archive wherever it is, and unpacking it leaves nothing behind
    text = b"".join(b'{"id": "q%d", "pad": "%s"}\n' % (i, b"x" * (i % 50)) for i in range(300))
    for at in (0.3, 0.5, 0.7):
        packed = bytearray(gzip.compress(text))
        packed[int(len(packed) * at)] ^= 0xFF
        gz.write_bytes(bytes(packed))
        for read in (read_results, repair_tail):
            with pytest.raises(DataFormatError, match=r"results.jsonl.gz(:\d+)?: not (a complete gzip file|valid JSON)"):
                read(res)
        assert gz.exists() and not res.exists() and not list(out.glob(".results.jsonl.*"))


def test_repair_tail_and_corrupt_middle_line(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    p.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "met')
    assert repair_tail(p) == len('{"id": "c", "met')
    assert p.read_text() == '{"id": "a"}\n{"id": "b"}\n'
    assert repair_tail(p) == 0
    p.write_text('{"id": "a"}\nnot json\n{"id": "b"}\n')
    with pytest.raises(DataFormatError, match=r"r.jsonl:2"):
        read_results(p)
    # complete but unparseable last line (killed after a partial multi-byte write + newline) is tolerated
    p.write_text('{"id": "a"}\n{"id": "b", "x\n')
    assert sorted(read_results(p)) == ["a"]


def test_append_jsonl_is_one_fsynced_write_per_batch(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    append_jsonl(p, [{"id": "a"}, {"id": "b"}])
    append_jsonl(p, [{"id": "a", "v": 2}])
    assert read_results(p) == {"a": {"id": "a", "v": 2}, "b": {"id": "b"}}


def test_judge_failure_is_missing_not_zero(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, n=3)

    async def flaky_judge_score(qs: list[QAExample], answers: list[str]) -> list[Scores]:
        return [Scores(genacc=None, span=0.0, em=0.0, f1=0.2, error="judge: Timeout") if q.id == "q1"
                else Scores(genacc=1.0, span=1.0, em=1.0, f1=1.0) for q in qs]

    s = run_eval(opts_for(ds, tmp_path / "run"), load_dataset(ds),
                 Components(rag_contexts, FakeGen(), flaky_judge_score), CONFIG)
    assert s["n_failed"] == 1 and s["metrics"]["genacc"]["mean"] == 1.0
    assert s["failed_by_kind"] == {"judge": 1}
    row = read_results(tmp_path / "run" / "results.jsonl")["q1"]
    assert row["metrics"]["genacc"] is None and row["metrics"]["f1"] == 0.2


def test_agent_answers_without_generator(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, n=3)

    async def agent(qs: list[QAExample]) -> list[ContextOut]:
        return [ContextOut(documents=[], answer=Prediction(text=q.golden_answers[0]), turns=2) if q.id != "q2"
                else ContextOut(error="agent: policy call failed") for q in qs]

    s = run_eval(opts_for(ds, tmp_path / "run", method="search_r1"), load_dataset(ds),
                 Components(agent, None, fake_score), {**CONFIG, "method": "search_r1"})
    assert s["n_scored"] == 2 and s["n_failed"] == 1 and s["metrics"]["em"]["mean"] == 1.0


def test_resume_refuses_a_different_run(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, n=2)
    out = tmp_path / "run"
    run_eval(opts_for(ds, out), load_dataset(ds), Components(rag_contexts, FakeGen(), fake_score), CONFIG)
    other = {**CONFIG, "generator": {"model": "other/model"}}
    with pytest.raises(RunDirError, match=r"generator.model: 'fake' != 'other/model'"):
        run_eval(opts_for(ds, out), load_dataset(ds), Components(rag_contexts, FakeGen(), fake_score), other)


def test_run_dir_lock(tmp_path: Path) -> None:
    with run_lock(tmp_path), pytest.raises(RunDirError, match="in use"), run_lock(tmp_path):
        pass


@pytest.mark.parametrize(
    ("method", "given", "message"),
    [
        ("no_retrieval", {"index"}, "--method no_retrieval does not use --index"),
        ("no_retrieval", {"contexts"}, "does not use --contexts"),
        ("naive_rag", {"contexts"}, "--method naive_rag does not use --contexts"),
        ("search_r1", {"generator"}, "--method search_r1 does not use --generator"),
        ("search_r1_ret", {"contexts"}, "does not use --contexts"),
    ],
)
def test_unused_options_are_errors(tmp_path: Path, method: str, given: set[str], message: str) -> None:
    ds = make_dataset(tmp_path, n=1)
    with pytest.raises(ConfigError, match=message):
        validate_options(EvalOptions(dataset=ds, method=method, out=tmp_path / "o", given=given))


def test_bad_values_are_errors(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path, n=1)
    with pytest.raises(ConfigError, match="--limit must be >= 1"):
        validate_options(EvalOptions(dataset=ds, method="naive_rag", out=tmp_path / "o", limit=0))
    with pytest.raises(DataFormatError, match=r"no questions\.jsonl"):
        load_dataset(tmp_path)
    with pytest.raises(DataFormatError, match="not a directory"):
        validate_options(EvalOptions(dataset=tmp_path / "nope", method="naive_rag", out=tmp_path / "o"))
    with pytest.raises(DataFormatError, match=r"--contexts .*not found"):
        validate_options(EvalOptions(dataset=ds, method="searcher", out=tmp_path / "o",
                                     contexts=tmp_path / "nope.jsonl", given={"contexts"}))
    with pytest.raises(ConfigError, match="unknown method"):
        validate_options(EvalOptions(dataset=ds, method="magic", out=tmp_path / "o"))


def test_contexts_file_must_cover_every_question(tmp_path: Path) -> None:
    f = tmp_path / "ctx.jsonl"
    f.write_text(json.dumps({"id": "q0", "documents": [{"id": "d0"}]}) + "\n")
    assert read_contexts_file(f, ["q0"]) == {"q0": [{"id": "d0"}]}
    with pytest.raises(DataFormatError, match=r"no contexts for 1 of 2 questions \(first: q1\)"):
        read_contexts_file(f, ["q0", "q1"])
    f.write_text(json.dumps({"id": "q0", "documents": [{"title": "no id"}]}) + "\n")
    with pytest.raises(DataFormatError, match=r"ctx\.jsonl:1: every document needs an .id."):
        read_contexts_file(f, ["q0"])


def test_a_contexts_file_kept_compressed_is_read_and_identified_as_written(tmp_path: Path) -> None:
    """`s3 eval --contexts` of FILE.jsonl.gz, or of FILE.jsonl where only its `gzip -9 -n` copy is kept (how
    benchmarks/results keeps rows): the same rows, and run.json's contexts.sha256 is the plain bytes' (the hash a run
    made from the plain file recorded), so that run resumes; the file stays compressed."""
    from eval.build import build_run
    from eval.contexts import contexts_sha256
    from s3.config import load_config
    from s3core.io import file_sha256

    ds = make_dataset(tmp_path, n=2)
    plain = tmp_path / "ctx.jsonl"
    plain.write_text("".join(json.dumps({"id": f"q{i}", "documents": [{"id": f"d{i + 1}"}, {"id": f"d{i}"}]}) + "\n"
                             for i in range(2)))
    rows, sha = read_contexts_file(plain, ["q0", "q1"]), file_sha256(plain)
    gz = tmp_path / "ctx.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    plain.unlink()
    for given in (plain, gz):
        opts = EvalOptions(dataset=ds, method="searcher", out=tmp_path / "o", contexts=given, given={"contexts"},
                           progress=False)
        validate_options(opts)
        assert read_contexts_file(given, ["q0", "q1"]) == rows and contexts_sha256(given) == sha
        _, comp, config = build_run(load_config(None, []), opts)
        if comp.close is not None:
            comp.close()
        assert config["contexts"]["sha256"] == sha
        got = asyncio.run(comp.contexts([QAExample(id="q1", question="?", golden_answers=[])]))
        assert [d.id for d in got[0].documents] == ["d2", "d1"]
    assert not plain.exists() and gz.is_file()
    with pytest.raises(DataFormatError, match=r"--contexts .*nope\.jsonl: file not found"):
        validate_options(EvalOptions(dataset=ds, method="searcher", out=tmp_path / "o",
                                     contexts=tmp_path / "nope.jsonl", given={"contexts"}))


def test_summarize_math() -> None:
    rows = [
        {"id": "a", "metrics": {"genacc": 1.0, "span": 1.0, "em": 1.0, "f1": 1.0}, "cost_usd": 0.5, "latency_s": 1.0,
         "error": None},
        {"id": "b", "metrics": {"genacc": 0.0, "span": 0.0, "em": 0.0, "f1": 0.5}, "cost_usd": 0.25, "latency_s": 3.0,
         "error": None},
        {"id": "c", "metrics": {"genacc": None}, "cost_usd": 0.0, "error": "ServerError: 500"},
    ]
    s = summarize(rows, {"k": 1}, n_expected=4, n_resamples=500)
    assert s["n_scored"] == 2 and s["n_failed"] == 1 and s["n_missing"] == 1
    assert s["metrics"]["genacc"]["mean"] == 0.5 and s["metrics"]["f1"]["mean"] == 0.75
    lo, hi = s["metrics"]["genacc"]["ci95"]
    assert 0.0 <= lo <= 0.5 <= hi <= 1.0
    assert s["totals"]["cost_usd"] == 0.75 and s["totals"]["mean_latency_s"] == 2.0
    assert s["failed_by_kind"] == {"ServerError": 1}
    assert "judge" not in s["metrics"]


def test_load_dataset_rejects_duplicate_ids(tmp_path: Path) -> None:
    d = tmp_path / "dup"
    d.mkdir()
    (d / "questions.jsonl").write_text('{"id": "1", "question": "a?"}\n{"id": "1", "question": "b?"}\n')
    with pytest.raises(DataFormatError, match="duplicate question id '1'"):
        load_dataset(d)


def test_cli_rejects_unused_option_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from s3.cli import main

    ds = make_dataset(tmp_path, n=1)
    rc = main(["eval", "--dataset", str(ds), "--method", "no_retrieval", "--index", str(tmp_path),
               "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0
    assert err == "error: --method no_retrieval does not use --index; it uses: --generator"
    assert not (tmp_path / "run").exists()


def test_scorer_asks_the_judge_only_when_the_span_check_fails() -> None:
    import asyncio

    from eval.accuracy import Accuracy
    from eval.build import scorer

    class Judge:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def check(self, responses: list[str], golden_answers: list[list[str]]) -> list[bool | None]:
            self.asked += responses
            return [None if r == "timeout" else "twenty-five" in r for r in responses]

    judge = Judge()
    qs = [QAExample(id=str(i), question="q?", golden_answers=[g]) for i, g in enumerate(["Barack Obama", "25", "Paris", "x"])]
    got = asyncio.run(scorer(Accuracy(None, judge))(qs, ["Barack Obama.", "twenty-five", "Marseille", "timeout"]))
    assert judge.asked == ["twenty-five", "Marseille", "timeout"]
    assert [s.genacc for s in got] == [1.0, 1.0, 0.0, None]
    assert [s.judge for s in got] == [None, 1.0, 0.0, None]
    assert got[3].error is not None and got[3].error.startswith("judge")
    assert [s.em for s in got] == [1.0, 0.0, 0.0, 0.0]
    judge.asked.clear()
    mc = [QAExample(id="m", question="Which? A. x B. y", golden_answers=["B", "B. y", "y"],
                    metadata={"multiple_choice": True})]
    got = asyncio.run(scorer(Accuracy(None, judge))(mc, ["B"]))
    assert judge.asked == ["B"] and got[0].genacc == 0.0  # judge-only item: the span match on "B" is not enough


def test_searcher_contexts_file_looked_up_in_the_corpus(tmp_path: Path) -> None:
    import asyncio

    from eval.contexts import fixed_contexts, lookup_documents

    ds = make_dataset(tmp_path, n=2)
    found = lookup_documents({"d1", "d2"}, ds / "corpus.jsonl", None)
    assert found["d1"].title == "T1" and found["d1"].text == "text about answer1"
    with pytest.raises(DataFormatError, match=r"1 context document ids are not in .*corpus\.jsonl \(first: zz\)"):
        lookup_documents({"d1", "zz"}, ds / "corpus.jsonl", None)
    ctx = asyncio.run(fixed_contexts({"q0": [found["d2"], found["d1"]]})([QAExample(id="q0", question="?",
                                                                                    golden_answers=[])]))
    assert [d.id for d in ctx[0].documents] == ["d2", "d1"]


def test_manifest_paths_are_relative_to_their_folder() -> None:
    import doctest

    import s3core.io as io

    assert doctest.testmod(io).failed == 0
    assert io.path_from("/a/b/prepared", "/a/b/prepared/index") == "index"
    assert io.path_from("/a/b", "/c/d.json") == "../../c/d.json"


def test_run_json_records_local_paths_relative_to_the_run() -> None:
    """A policy folder (searcher.policy_path) is recorded relative to the run directory, as the data and index are:
    a committed run.json carries no path of the machine that made it (eval/build.py `_rel_local`, its doctest)."""
    import doctest

    import eval.build as build

    assert doctest.testmod(build).failed == 0
