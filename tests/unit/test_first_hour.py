"""A newcomer's first hour (issue 46): every number printed is right, no advice names a file a fresh clone lacks,
nothing key-shaped is echoed, help and piped output read as written.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from eval.accuracy import Prediction, Scores
from eval.contexts import ContextOut
from eval.harness import Components, EvalOptions, dry_run_async, load_dataset, run_eval
from generator_adapters.budget import Budget
from generator_adapters.client import run_sync
from s3.cli import build_parser
from s3.cli import main as s3_main
from s3core.errors import ConfigError
from s3core.types import Document, QAExample

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------------- the budget stop


def _dataset(root: Path, n: int) -> Path:
    d = root / "ds"
    d.mkdir()
    with (d / "questions.jsonl").open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"q{i}", "question": f"question {i}?", "golden_answers": [f"a{i}"]}) + "\n")
    return d


class PricedFakes:
    """Each question's paid calls are projected at `bound` dollars and really cost `real` (a projection is an upper
    bound: completions at max_tokens)."""

    def __init__(self, bound: float, real: float) -> None:
        self.bound, self.real, self.spent = bound, real, 0.0
        self.answered: list[str] = []

    async def contexts(self, qs: list[QAExample]) -> list[ContextOut]:
        return [ContextOut(documents=[Document(id="d", text="x")]) for _ in qs]

    async def answer(self, qs: list[QAExample], ctxs: list[list[Document]]) -> list[Prediction]:
        self.answered += [q.id for q in qs]
        self.spent += self.real * len(qs)
        return [Prediction(text=q.golden_answers[0], cost_usd=self.real) for q in qs]

    async def score(self, qs: list[QAExample], answers: list[str]) -> list[Scores]:
        return [Scores(genacc=1.0, span=1.0, em=1.0, f1=1.0) for _ in qs]

    def usage(self) -> dict[str, float]:
        return {"cost_usd": self.spent}

    def project(self, qs: list[QAExample], ctxs: list[ContextOut]) -> list[float]:
        return [self.bound] * len(qs)


def test_budget_stop_names_that_questions_cost_and_what_was_spent_after_the_batch(tmp_path: Path) -> None:
    """Budget $0.010; every question is projected at $0.003 and costs $0.002. One batch of 10: three fit the first
    projection ($0.009); once they cost $0.006, the fourth ($0.003 bound) fits too, then nothing more ($0.008 spent).
    The stop names the fifth question, ITS bound ($0.003) and the $0.008 spent, not a batch's projection and $0."""
    ds = _dataset(tmp_path, 10)
    f = PricedFakes(bound=0.003, real=0.002)
    comp = Components(f.contexts, f.answer, f.score, usage=f.usage, project=f.project,
                      budget=Budget(0.010, setting="eval.budget_usd"))
    opts = EvalOptions(dataset=ds, method="naive_rag", out=tmp_path / "run", progress=False, batch_size=10)
    s = run_eval(opts, load_dataset(ds), comp, {"method": "naive_rag"})
    assert f.answered == ["q0", "q1", "q2", "q3"]
    msg = s["stopped"]["message"]
    assert "question 'q4' would cost up to $0.003000" in msg, msg
    assert "$0.008000 of the $0.010000 budget" in msg, msg
    assert s["stopped"]["spent_usd"] == pytest.approx(0.008)


def test_dry_run_with_an_unpriced_model_names_it(tmp_path: Path) -> None:
    ds = _dataset(tmp_path, 2)
    f = PricedFakes(bound=float("inf"), real=0.0)
    comp = Components(f.contexts, f.answer, f.score, project=f.project,
                      unpriced=["generator.model = 'openai/my-finetune'"])
    opts = EvalOptions(dataset=ds, method="naive_rag", out=tmp_path / "run", progress=False)
    with pytest.raises(ConfigError, match=r"price of generator.model = 'openai/my-finetune' is unknown.*\[generator\]"):
        run_sync(dry_run_async(opts, load_dataset(ds), comp))


# ----------------------------------------------------------------------------------------------- advice that works


def test_a_missing_training_index_is_not_rebuilt_from_a_corpus_that_is_not_there(tmp_path: Path) -> None:
    """The committed transfer policy, as a fresh clone has it (no training corpus, no index): the advice is the policy
    README's command and --index, never an `s3 index build --corpus` of a corpus that is not there."""
    from searcher.config import RetrieverConfig, SearcherConfig
    from searcher.trained import apply_record, find_record

    policy = tmp_path / "transfer" / "policy"
    policy.mkdir(parents=True)
    src = REPO / "searcher" / "policies" / "smollm2-135m-hotpotqa"
    record = json.loads((src / "searcher.json").read_text())
    (policy / "searcher.json").write_text(json.dumps(record))
    readme = (src / "README.md").read_text() if (src / "README.md").is_file() else (
        "rebuilt by `s3 prepare-training --config configs/transfer3.toml`")
    (policy / "README.md").write_text(readme)
    found = find_record(policy)
    assert found is not None
    with pytest.raises(ConfigError) as e:
        apply_record(found[0], found[1], SearcherConfig(), RetrieverConfig())
    msg = str(e.value)
    assert record["retriever"]["rebuild"] not in msg, msg  # its corpus is not there
    assert "s3 prepare-training --config configs/transfer3.toml" in msg and "--index DIR" in msg, msg
    assert "so is the corpus it was built from" in msg


def test_a_missing_index_whose_corpus_is_there_keeps_the_recorded_rebuild(tmp_path: Path) -> None:
    from searcher.config import RetrieverConfig, SearcherConfig
    from searcher.trained import apply_record, find_record

    policy = tmp_path / "run" / "policy"
    policy.mkdir(parents=True)
    (tmp_path / "run" / "data").mkdir()
    (tmp_path / "run" / "data" / "corpus.jsonl").write_text('{"id": "a", "contents": "x"}\n')
    record = json.loads((REPO / "searcher/policies/smollm2-135m-hotpotqa/searcher.json").read_text())
    record["retriever"].update(index="../data/index",
                               rebuild="s3 index build --corpus ../data/corpus.jsonl --backend bm25 --out ../data/index")
    (policy / "searcher.json").write_text(json.dumps(record))
    found = find_record(policy)
    assert found is not None
    with pytest.raises(ConfigError, match=r"cd .* && s3 index build --corpus \.\./data/corpus\.jsonl"):
        apply_record(found[0], found[1], SearcherConfig(), RetrieverConfig())


# ----------------------------------------------------------------------------------------------- the CLI's text


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += [sub, *_subparsers(sub)]
    return out


def test_help_texts_print_percent_signs_once() -> None:
    parser = build_parser()
    helps = {p.prog: p.format_help() for p in _subparsers(parser)}
    assert "s3 eval" in helps and "s3 analyze" in helps
    doubled = [prog for prog, text in helps.items() if "%%" in text]
    assert doubled == []
    assert "95% " in helps["s3 eval"] and "95% " in helps["s3 analyze"]


def test_config_show_redacts_a_key_and_resolves_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    key = "sk-" + "abcdefghij" * 4
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "mine.toml").write_text('[retriever]\nindex = "indexes/wiki"\n')
    monkeypatch.chdir(tmp_path)
    assert s3_main(["config", "--config", str(conf / "mine.toml"), "--set", f"generator.api_key_env={key}"]) == 0
    out = capsys.readouterr().out
    assert key not in out and "abcdefghij" not in out
    shown = json.loads(out)
    assert shown["retriever"]["index"] == str((conf / "indexes" / "wiki").resolve())
    assert Path(shown["generator"]["cache_path"]).is_absolute()


def test_piped_rich_output_is_not_wrapped_at_80_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`s3 retrieve` prints a rich table; piped (here: captured, not a terminal) a long title stays on its line."""
    from searcher.config import RetrieverConfig
    from searcher.retrieval import build_index

    title = "A very long title of a document that a terminal of eighty columns would never have shown on one line"
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"doc-{i}", "title": f"{title} {i}", "text": f"Kant wrote book {i}."})
                              + "\n" for i in range(3)))
    build_index(corpus, "bm25", tmp_path / "idx", RetrieverConfig())
    assert s3_main(["retrieve", "--index", str(tmp_path / "idx"), "--k", "2", "Kant book"]) == 0
    out = capsys.readouterr().out
    assert any(f"{title} " in line for line in out.splitlines()), out


def test_eval_summary_prints_no_empty_cache() -> None:
    from s3.commands.evaluate import _cache_text

    assert _cache_text({}) == "" and _cache_text(None) == ""
    assert _cache_text({"hits": 2, "misses": 1}) == "; response cache: hits 2, misses 1"


def test_doctor_cleans_its_work_folder_and_says_where_the_summary_is(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "check"
    assert s3_main(["doctor", "--device", "cpu", "--only", "^devices$", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"summary: {out / 'summary.md'}" in printed
    assert (out / "summary.md").is_file() and not (out / "work").exists()
    shutil.rmtree(out)
    assert s3_main(["doctor", "--device", "cpu", "--only", "^devices$", "--out", str(out), "--keep-work"]) == 0
    assert (out / "work").is_dir()


# ----------------------------------------------------------------------------------------------- a model not installed


def test_an_offline_model_that_is_not_installed_is_refused_before_the_first_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever is installed here: the 1.5B's data wheels are pointed at a distribution that does not exist."""
    import dataclasses

    from s3runtime import local_models as lm

    name = "qwen2.5-coder-1.5b-instruct"
    monkeypatch.setitem(lm.MODELS, name, dataclasses.replace(lm.MODELS[name], packages=("s3-no-such-dist-xyz",)))
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "questions.jsonl").write_text(json.dumps({"id": "q0", "question": "q?", "golden_answers": ["a"]}) + "\n")
    run = tmp_path / "run"
    rc = s3_main(["eval", "--dataset", str(ds), "--method", "no_retrieval", "--generator", f"local/{name}",
                  "--no-progress", "--out", str(run)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "pip install -e '.[qwen15]'" in err and f"local/{name}" in err and "Traceback" not in err
    assert not (run / "results.jsonl").exists()
