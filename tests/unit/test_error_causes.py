"""Errors that name their cause (issue 61): each checked before the first slow or paid call, each blamed on what the
user wrote — the command line, the data file and its line, the model name, the index; and the smaller defects of the
issue's list (index info's argument, the trajectory's final documents, the README's snippet)."""

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
    # a provider litellm knows: accepted (at a server of one's own; its own endpoint also needs a key named)
    build_generator(GeneratorConfig(model="openai/gpt-9", api_base="http://127.0.0.1:9/v1", cache_path=None))


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


def test_index_info_takes_the_directory_as_an_argument_and_still_takes_index(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from searcher.config import RetrieverConfig
    from searcher.retrieval import build_index

    d = _dataset(tmp_path, "mine", [{"id": "q1", "question": "Who?", "golden_answers": ["x"]}],
                 ["Hamlet is a play by Shakespeare.", "Kant was born in Königsberg."])
    index = build_index(d / "corpus.jsonl", "bm25", tmp_path / "idx", RetrieverConfig())
    capsys.readouterr()
    for argv in (["index", "info", str(index)], ["index", "info", "--index", str(index)],
                 ["index", "info", str(index), "--index", str(index)]):
        assert main(argv) == 0, argv
        assert json.loads(capsys.readouterr().out)["doc_count"] == 2
    assert main(["index", "info", str(index), "--index", str(tmp_path / "other")]) == 2
    assert "two indexes given" in capsys.readouterr().err
    assert main(["index", "info", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err


def _trajectory(*, additive: bool, fallback: bool) -> str:
    import io

    from s3.commands.search import print_trajectory
    from s3core.types import Document, SearchResult, SearchStep

    q = "Who directed the film about the inventor of the Earthship?"
    steps = [SearchStep(turn=0, query=q, retrieved_ids=["a", "b", "c"], selected_ids=[] if additive else ["a"]),
             SearchStep(turn=1, query="Garbage Warrior", retrieved_ids=["d", "e", "a"],
                        selected_ids=["d", "e", "a"] if fallback else ["d"], selection_fallback=fallback,
                        search_complete=True)]
    ids = ["a", "b", "c", "d"] if additive else ["a", "d", "e"] if fallback else ["a", "d"]
    result = SearchResult(question=q, documents=[Document(id=i, title=i.upper(), text="") for i in ids], steps=steps,
                          seconds=1.0)
    buf = io.StringIO()
    print_trajectory(result, additive=additive, file=buf)
    return buf.getvalue()


def test_final_documents_say_why_a_document_nobody_selected_is_there() -> None:
    """With the trained (additive) searcher the final documents include naive RAG's top-k it never selected: the
    listing says so per document; a turn whose reply selected nothing says its window is kept, in words, not
    "whole window admitted, A.5" (issue 61 item 8)."""
    out = _trajectory(additive=True, fallback=False)
    assert "naive RAG's top documents of the question are always kept (additive searcher)" in " ".join(out.split())
    lines = {ln.split("]")[0].strip(): ln for ln in out.splitlines() if ln.strip()[:3] in ("1. ", "2. ", "3. ", "4. ")}
    assert lines["1. [a"].endswith("(top-k, kept)") and lines["2. [b"].endswith("(top-k, kept)")
    assert not lines["4. [d"].endswith(")")  # selected in turn 1: no note needed
    out = " ".join(_trajectory(additive=False, fallback=True).split())
    assert "the reply selected none: all 3 documents of this window are kept" in out
    assert "A.5" not in out and "whole window admitted" not in out and "always kept" not in out


def test_s3_search_exits_non_zero_when_the_search_ended_early(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A search that ended early (a context-window error) prints what it had admitted and exits 2 naming why, not 0
    beside "Final documents (2)" (issue 61 item 7)."""
    import s3.build as build
    from s3core.types import Document, SearchResult, SearchStep
    from searcher.config import SearcherConfig

    class Degraded:
        cfg = SearcherConfig()

        def search(self, questions: list[str], **_: object) -> list[SearchResult]:
            return [SearchResult(question=q, documents=[Document(id="a", title="A", text="")],
                                 steps=[SearchStep(turn=0, query=q, retrieved_ids=["a"], selected_ids=["a"])],
                                 error="the prompt is longer than the searcher's context window",
                                 error_code="upstream_context_window") for q in questions]

    monkeypatch.setattr(build, "build_searcher", lambda cfg, index=None, policy=None: (Degraded(), None, None, cfg, "a fake"))
    assert main(["search", "who?"]) == 2
    captured = capsys.readouterr()
    assert "Final documents (1)" in captured.out
    assert "the search ended early (upstream_context_window): the prompt is longer" in captured.err


def test_the_readme_snippet_loads_its_configuration_outside_the_checkout(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Python block calls `load_config()`: with no config.toml in the folder it is the defaults (equal to
    config.toml), not an error about a file or preset that only the checkout has (issue 61 item 8)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "cfg = load_config()" in readme and 'load_config(["config.toml"' not in readme
    monkeypatch.chdir(tmp_path)
    cfg = load_config()
    assert cfg.searcher.default_policy and cfg.retriever.backend == "bm25"


GOOD_A = '{"id": "a", "title": "A", "text": "alpha"}'
GOOD_C = '{"id": "c", "title": "C", "text": "gamma"}'


@pytest.mark.parametrize("lines,where,what", [
    # a line cut short: json's position is past the line's end ("column 1" of the next line); the line's end is named
    ([GOOD_A, '{"id": "b", "title": "B", "text": "beta"', GOOD_C], 2,
     "the line ends at column 40 before its JSON is complete: a closing brace, bracket or quote is missing"),
    # the first line broken: still JSON lines (not one pretty-printed object whose error lands on line 2)
    (['{"id": "b", "title": "B", "text": "beta"', GOOD_A, GOOD_C], 1, "the line ends at column 40"),
    ([GOOD_A, "Garbage Warrior\tdirected by Oliver Hodge", GOOD_C], 2, "Expecting value at column 1"),
    ([GOOD_A, '{"id": "b", "title": "B" "text": "beta"}'], 2, "Expecting ',' delimiter at column 26"),
    ([GOOD_A, '{"id": "b", "title": "B", "text": "beta}'], 2, "Unterminated string starting at column 35"),
    (["\ufeff" + GOOD_A, "not json"], 2, "Expecting value at column 1"),  # a byte-order mark is not the error
    (["not json", GOOD_A], 1, "expected JSON (an array, JSON lines or an object), found 'n'"),
])
def test_a_corpus_line_that_is_not_json_is_named_by_file_line_and_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str], where: int, what: str) -> None:
    """`s3 data prepare flashrag` with a corpus line that is not JSON: the file, the line and what is wrong at which
    column of that line (issue 61 item 7)."""
    q = tmp_path / "questions.jsonl"
    q.write_text(json.dumps({"id": "q1", "question": "Who?", "golden_answers": ["x"]}) + "\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    rc = main(["data", "prepare", "flashrag", "--input", str(q), str(corpus), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and f"corpus.jsonl:{where}: " in err and what in err, err
    assert "Traceback" not in err and "question" not in err


def test_a_corpus_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    from dataprep.records import iter_records

    f = tmp_path / "corpus.jsonl"
    f.write_text("\ufeff" + GOOD_A + "\n" + GOOD_C + "\n", encoding="utf-8")
    assert [r for _, r in iter_records(f)] == [json.loads(GOOD_A), json.loads(GOOD_C)]
