"""Run directories travel (issue 46): run.json records its paths relative to the run, a committed run whose run.json
holds another machine's absolute paths still finds the data beside it, and `s3 report` says how many documents show
their text — and, when the corpus is missing (committed runs keep questions, not corpora), how to rebuild it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from eval.analysis import load_run, resolve_recorded
from s3.cli import main

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "tests" / "fixtures" / "committed_runs" / "musique_dev200"  # attempt 1's runs, as committed


def test_new_runs_record_paths_relative_to_the_run(tmp_path: Path) -> None:
    from eval.build import build_run
    from eval.harness import EvalOptions
    from s3.config import load_config
    from searcher.config import RetrieverConfig
    from searcher.retrieval import build_index

    data = tmp_path / "data" / "toy"
    data.mkdir(parents=True)
    (data / "questions.jsonl").write_text(json.dumps({"id": "q0", "question": "Who wrote Critique of Pure Reason?",
                                                      "golden_answers": ["Kant"]}) + "\n")
    (data / "corpus.jsonl").write_text(json.dumps({"id": "d0", "title": "Kant", "text": "Kant wrote it."}) + "\n")
    build_index(data / "corpus.jsonl", "bm25", tmp_path / "indexes" / "toy", RetrieverConfig())
    run = tmp_path / "runs" / "qwen05" / "naive_rag"
    opts = EvalOptions(dataset=data, method="naive_rag", out=run, index=tmp_path / "indexes" / "toy", progress=False,
                       given={"index"})
    _, comp, config = build_run(load_config(None, []), opts)
    assert comp.close is not None
    comp.close()
    assert config["dataset"]["dir"] == "../../../data/toy"
    assert config["retriever"]["index"] == "../../../indexes/toy"
    # the same tree moved elsewhere: what run.json says still leads to the data
    moved = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "data", moved / "data")
    (moved / "runs" / "qwen05" / "naive_rag").mkdir(parents=True)
    assert resolve_recorded(moved / "runs/qwen05/naive_rag", config["dataset"]["dir"]) == \
        moved / "runs/qwen05/naive_rag" / "../../../data/toy"


def _clone_of_a_committed_run(root: Path, name: str = "untrained") -> Path:
    """A committed run and its data folder (questions + manifest, no corpus) where a fresh clone would put them."""
    here = root / "clone" / COMMITTED.relative_to(REPO)
    shutil.copytree(COMMITTED / name, here / name)
    shutil.copytree(COMMITTED / "data", here / "data", ignore=shutil.ignore_patterns("corpus.jsonl"))
    return here


def test_an_old_absolute_path_resolves_beside_the_moved_run(tmp_path: Path) -> None:
    """run.json of a run made elsewhere names /old/machine/.../data; a copy of that folder still exists on this
    machine (the checkout it was made in), but the run beside it is the one that moved with it."""
    here = _clone_of_a_committed_run(tmp_path)
    old = tmp_path / "old" / "machine" / COMMITTED.relative_to(REPO)
    (old / "data").mkdir(parents=True)
    rj = here / "untrained" / "run.json"
    meta = json.loads(rj.read_text())
    meta["config"]["dataset"]["dir"] = str(old / "data")
    rj.write_text(json.dumps(meta))
    run = load_run(here / "untrained")
    assert run.dataset_dir == here / "data"
    n = len((here / "data" / "questions.jsonl").read_text().splitlines())
    assert n > 100 and len(run.gold) == n  # questions.jsonl read: gold paragraphs known


def test_report_counts_documents_without_text_and_says_how_to_fix_it(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    here = _clone_of_a_committed_run(tmp_path)
    out = tmp_path / "report"
    assert main(["report", str(here / "untrained"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    m = re.search(r"documents with text: (\d+) of (\d+)", printed)
    assert m is not None, printed
    assert int(m.group(1)) == 0 and int(m.group(2)) > 100
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert f"{int(m.group(2))} documents in the report show no text" in warned
    assert "s3 data prepare musique --input" in warned and str(here.name) in warned
    assert 'id="missing-texts"' in (out / "index.html").read_text()
    # the fix it names, with this machine's copy of the source: every document shows its text
    assert main(["data", "prepare", "musique", "--input", str(shared_data / "musique_dev200" / "musique.json"),
                 "--out", str(here / "data")]) == 0
    capsys.readouterr()
    caplog.clear()
    assert main(["report", str(here / "untrained"), "--out", str(out)]) == 0
    m2 = re.search(r"documents with text: (\d+) of (\d+)", capsys.readouterr().out)
    assert m2 is not None and m2.group(1) == m2.group(2) == m.group(2)
    page = (out / "index.html").read_text()
    assert 'id="missing-texts"' not in page and "${q.turns} turns" not in page


def test_a_run_stored_gzipped_reads_as_the_plain_one_in_load_run_and_s3_report(tmp_path: Path) -> None:
    """benchmarks/results keeps runs' rows and trajectories as results.jsonl.gz / contexts.jsonl.gz: `load_run` (what
    `s3 report`, `s3 analyze` and the browser read) sees the same rows and trajectories as from the plain files."""
    import gzip

    here = _clone_of_a_committed_run(tmp_path)
    plain = load_run(here / "untrained")
    for name in ("results.jsonl", "contexts.jsonl"):
        f = here / "untrained" / name
        f.with_name(name + ".gz").write_bytes(gzip.compress(f.read_bytes()))
        f.unlink()
    packed = load_run(here / "untrained")
    assert packed.rows == plain.rows and packed.contexts == plain.contexts and len(packed.contexts) == 100
    assert main(["report", str(here / "untrained"), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "index.html").is_file()
    assert not (here / "untrained" / "results.jsonl").exists()  # reading never unpacks: only an append does
