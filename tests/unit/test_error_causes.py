"""Errors that name their cause (issue 61): each checked before the first slow or paid call, each blamed on what the
user wrote — the command line, the data file and its line, the model name, the index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from s3.cli import main
from s3.config import load_config
from s3core.errors import ConfigError, DataFormatError


def _dataset(root: Path, name: str, rows: list[dict[str, object]], docs: list[str]) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "corpus.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "contents": f'"T{i}"\n{t}'}) + "\n"
                                            for i, t in enumerate(docs)))
    return d


def test_a_bad_set_is_blamed_on_the_command_line_not_the_last_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^invalid configuration in --set searcher\.max_turn=2 \(over .*cpu\.toml\)"
                                          r":\n  unknown key 'searcher\.max_turn'"):
        load_config(["cpu"], ["searcher.max_turn=2"])
    with pytest.raises(ConfigError, match=r"in --set searcher\.max_turns=x( \(over .*\))?:\n  searcher\.max_turns: Input should be"):
        load_config(None, ["searcher.max_turns=x"])
    bad = tmp_path / "bad.toml"
    bad.write_text("[searcher]\nmax_turn = 2\n")
    with pytest.raises(ConfigError, match=r"invalid configuration in .*bad\.toml:"):  # a bad file is still the file's
        load_config([bad], ["searcher.max_turns=2"])


@pytest.mark.parametrize("model,hint", [
    ("qwen2.5-coder-0.5b-instruct", "the offline model is 'local/qwen2.5-coder-0.5b-instruct'"),
    ("no-such-model", "write it as 'provider/name'"),
])
def test_a_generator_name_litellm_cannot_route_is_refused_before_the_first_call(model: str, hint: str) -> None:
    from generator_adapters.build import build_generator
    from generator_adapters.config import GeneratorConfig

    with pytest.raises(ConfigError, match=rf"generator\.model = '{model}': litellm knows no provider .*{hint}"):
        build_generator(GeneratorConfig(model=model, cache_path=None))
    build_generator(GeneratorConfig(model="openai/gpt-9", cache_path=None))  # a provider litellm knows: accepted


def test_a_run_where_nothing_was_scored_names_the_first_cause() -> None:
    from eval.summary import summarize, verdict

    rows = [{"id": f"q{i}", "error": "InternalServerError: litellm.InternalServerError: Connection error to "
             "api.openai.com", "metrics": {}} for i in range(2)]
    s = summarize(rows, {"method": "naive_rag"}, n_expected=2, n_resamples=10)
    line = verdict(s, 0.5) or ""
    assert line.startswith("nothing was scored: 2 of 2 rows failed (InternalServerError 2); the first: "
                           "InternalServerError: litellm.InternalServerError: Connection error to api.openai.com")


def test_eval_refuses_an_index_built_from_another_corpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from searcher.config import RetrieverConfig
    from searcher.retrieval import build_index

    mine = _dataset(tmp_path, "mine", [{"id": "q1", "question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare"]}],
                    ["Hamlet is a play by Shakespeare.", "Kant was born in Königsberg."])
    other = _dataset(tmp_path, "other", [{"id": "o1", "question": "x?", "golden_answers": ["y"]}],
                     ["A passage about something else.", "And another one."])
    index = build_index(other / "corpus.jsonl", "bm25", tmp_path / "index_other", RetrieverConfig())
    rc = main(["eval", "--dataset", str(mine), "--method", "naive_rag", "--index", str(index), "--out",
               str(tmp_path / "run"), "--limit", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "was built from another corpus" in err and f"--corpus {mine / 'corpus.jsonl'}" in err, err
    assert not (tmp_path / "run" / "results.jsonl").exists()  # nothing ran


def test_a_question_without_answers_is_refused_by_prepare_and_by_eval(tmp_path: Path) -> None:
    from dataprep.prepare import prepare
    from eval.harness import load_dataset

    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "q1", "question": "Who?"}) + "\n")
    with pytest.raises(DataFormatError, match=r"q\.jsonl:1: question row without an answer .*'golden_answers'"):
        prepare("flashrag", [q], tmp_path / "out")
    d = _dataset(tmp_path, "hand", [{"id": "q1", "question": "Who?", "golden_answers": []}], ["x"])
    with pytest.raises(DataFormatError, match=r"1 of 1 questions have no golden_answers \(first: 'q1'\)"):
        load_dataset(d)


def test_s3_search_refuses_a_question_longer_than_the_service_allows(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["search", "x" * 120_000, "--index", "nowhere"])
    err = capsys.readouterr().err
    assert rc == 2 and "the question is 120000 characters, more than service.max_query_chars=2000" in err, err
