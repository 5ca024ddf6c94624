"""`s3 data prepare` on every folder of ../shared/data, through the real CLI.

Expected counts are the ones each folder's SOURCE.txt states (checked there independently of this code):
hotpotqa_dev500 500 questions / 4,943 distinct paragraphs; musique_dev200 200 / 3,141; 2wiki_dev200 164 usable
(36 rows without context) / 1,294; the HippoRAG train corpora are the union of their questions' paragraphs;
train_hotpotqa1200 1,196 / 11,798.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dataprep import load, load_prepared
from eval.metrics import span_check
from s3.cli import main
from s3core.corpus import iter_corpus

pytestmark = pytest.mark.integration

# (name, format, input files relative to ../shared/data, questions, paragraphs or None, dropped rows)
CASES: list[tuple[str, str, list[str], int, int | None, int]] = [
    ("hotpotqa_dev500", "hotpotqa", ["hotpotqa_dev500/hotpotqa_dev_500.jsonl"], 500, 4943, 0),
    ("2wiki_dev200", "2wiki", ["2wiki_dev200/wikihop.json"], 164, 1294, 36),
    ("musique_dev200", "musique", ["musique_dev200/musique.json"], 200, 3141, 0),
    ("nq_test200", "nq", ["nq_triviaqa_test400/odqa.json"], 200, None, 200),
    ("triviaqa_test200", "triviaqa", ["nq_triviaqa_test400/odqa.json"], 200, None, 200),
    ("bamboogle", "bamboogle", ["bamboogle/bamboogle.json"], 125, None, 0),
    ("qa500_nq", "nq", ["qa500/nq.json"], 500, None, 0),
    ("qa500_nq_pre", "nq", ["qa500/nq_pre.json"], 500, None, 0),
    ("qa500_triviaqa", "triviaqa", ["qa500/triviaqa.json", "qa500/triviaqa_pre.json"], 1000, None, 0),
    ("qa500_popqa", "popqa", ["qa500/popqa.json"], 500, None, 0),
    ("qa500_2wiki", "2wiki", ["qa500/2wiki.json"], 500, None, 0),
    ("mirage", "mirage", ["mirage/benchmark.json"], 7663, None, 0),
    ("flashrag", "flashrag", ["flashrag_sample/nq_test_quickstart.jsonl", "flashrag_sample/sample_data.jsonl"], 17, 1000, 0),
    ("hotpotqa_train", "hotpotqa",
     ["train_hotpotqa_musique100/hotpotqa_train.json", "train_hotpotqa_musique100/hotpotqa_train_corpus.json"], 100, 994, 0),
    ("musique_train", "musique",
     ["train_hotpotqa_musique100/musique_train.json", "train_hotpotqa_musique100/musique_train_corpus.json"], 100, 1890, 0),
    ("hotpotqa_train1200", "hotpotqa", ["train_hotpotqa1200/hotpot_train.jsonl"], 1196, 11798, 0),
]


def test_cases_cover_every_shared_data_folder(shared_data: Path) -> None:
    folders = {p.name for p in shared_data.iterdir() if p.is_dir()}
    covered = {inp.split("/")[0] for _, _, inputs, *_ in CASES for inp in inputs}
    assert folders == covered


@pytest.fixture(scope="module")
def prepared(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prepared")
    out: dict[str, Path] = {}
    for name, fmt, inputs, *_ in CASES:
        args = ["data", "prepare", fmt, "--out", str(root / name), "--input", *(str(shared_data / i) for i in inputs)]
        assert main(args) == 0, name
        out[name] = root / name
    return out


@pytest.mark.parametrize(("name", "fmt", "inputs", "n_questions", "n_paragraphs", "n_dropped"), CASES, ids=[c[0] for c in CASES])
def test_prepared_folder(
    prepared: dict[str, Path], shared_data: Path,
    name: str, fmt: str, inputs: list[str], n_questions: int, n_paragraphs: int | None, n_dropped: int,
) -> None:
    d = prepared[name]
    manifest: dict[str, Any] = json.loads((d / "manifest.json").read_text())
    counts = manifest["counts"]
    assert (counts["questions"], counts["dropped"]) == (n_questions, n_dropped)
    # recorded relative to the prepared folder: the folder and the data can move together
    assert [(d / s["path"]).resolve() for s in manifest["sources"]] == [(shared_data / i).resolve() for i in inputs]
    assert not any(Path(s["path"]).is_absolute() for s in manifest["sources"])
    assert all(len(s["sha256"]) == 64 for s in manifest["sources"])

    corpus_path, questions = load_prepared(d)
    assert len(questions) == n_questions == len({q.id for q in questions})
    assert all(q.question.strip() and q.golden_answers for q in questions)
    if n_paragraphs is None:
        assert corpus_path is None and counts["paragraphs"] == 0
        return
    assert corpus_path is not None
    docs = list(iter_corpus(corpus_path))  # the shared reader: valid lines, unique ids
    assert len(docs) == counts["paragraphs"] == n_paragraphs
    assert counts["paragraph_occurrences"] - counts["duplicates_merged"] == n_paragraphs
    ids = {doc.id for doc in docs}
    with_support = [q for q in questions if q.supporting_ids]
    for q in with_support:
        assert set(q.supporting_ids) <= ids
        assert set(q.supporting_ids) <= set(q.metadata["context_ids"]) <= ids
    if fmt in ("hotpotqa", "2wiki", "musique"):
        assert len(with_support) == n_questions  # every multi-hop question has its gold paragraphs
        assert counts["supporting_titles_missing"] == 0


def test_supporting_paragraph_counts_match_the_datasets(prepared: dict[str, Path]) -> None:
    _, hotpot = load_prepared(prepared["hotpotqa_dev500"])
    assert all(len(q.supporting_ids) == 2 for q in hotpot)  # HotpotQA: exactly two gold paragraphs
    _, musique = load_prepared(prepared["musique_dev200"])
    assert all(len(q.supporting_ids) == q.metadata["hops"] for q in musique)  # one per hop
    _, wiki = load_prepared(prepared["2wiki_dev200"])
    assert all(2 <= len(q.supporting_ids) <= 4 for q in wiki)


def test_gold_paragraphs_contain_the_answer_more_often_than_distractors(prepared: dict[str, Path]) -> None:
    """A sanity check that supporting ids point at the right paragraphs, with the toolkit's own span check."""
    for name in ("hotpotqa_dev500", "musique_dev200"):
        corpus_path, questions = load_prepared(prepared[name])
        assert corpus_path is not None
        text = {d.id: d.text for d in iter_corpus(corpus_path)}
        gold_texts, gold_answers, other_texts, other_answers = [], [], [], []
        for q in questions:
            for pid in q.metadata["context_ids"]:
                if pid in q.supporting_ids:
                    gold_texts.append(text[pid])
                    gold_answers.append(q.golden_answers)
                else:
                    other_texts.append(text[pid])
                    other_answers.append(q.golden_answers)
        gold_rate = sum(v or 0.0 for v in span_check(gold_texts, gold_answers)) / len(gold_texts)
        other_rate = sum(v or 0.0 for v in span_check(other_texts, other_answers)) / len(other_texts)
        assert gold_rate > 0.3 and gold_rate > 3 * other_rate, (name, gold_rate, other_rate)


def test_layouts_and_reruns_give_identical_ids(shared_data: Path, tmp_path: Path) -> None:
    """hotpotqa_dev500 (Hugging Face layout, JSON lines) rewritten in the original layout as a JSON array."""
    src = shared_data / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines()[:60]]
    original = [
        {
            "_id": r["id"], "question": r["question"], "answer": r["answer"], "type": r["type"], "level": r["level"],
            "supporting_facts": [list(x) for x in zip(r["supporting_facts"]["title"], r["supporting_facts"]["sent_id"], strict=True)],
            "context": [list(x) for x in zip(r["context"]["title"], r["context"]["sentences"], strict=True)],
        }
        for r in rows
    ]
    (tmp_path / "hf.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "orig.json").write_text(json.dumps(original, indent=1), encoding="utf-8")
    a, b = load("hotpotqa", [tmp_path / "hf.jsonl"]), load("hotpotqa", [tmp_path / "orig.json"])
    assert a.corpus == b.corpus and a.questions == b.questions
    full = {d.id for d in load("hotpotqa", [src]).corpus}
    assert {d.id for d in a.corpus} <= full  # a paragraph's id does not depend on what else was loaded


def test_merging_dev_and_train_into_one_corpus(shared_data: Path) -> None:
    inputs = [
        shared_data / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl",
        shared_data / "train_hotpotqa_musique100" / "hotpotqa_train.json",
        shared_data / "train_hotpotqa_musique100" / "hotpotqa_train_corpus.json",
    ]
    dev = load("hotpotqa", inputs[:1])
    train = load("hotpotqa", inputs[1:])
    merged = load("hotpotqa", inputs)
    overlap = {d.id for d in dev.corpus} & {d.id for d in train.corpus}
    assert len(merged.corpus) == len(dev.corpus) + len(train.corpus) - len(overlap)
    assert len(merged.questions) == 600


def test_console_script_and_one_line_error(shared_data: Path, tmp_path: Path) -> None:
    s3 = Path(sys.executable).parent / "s3"
    if not s3.exists():
        pytest.fail(f"console script not installed at {s3} (pip install -e .)")
    ok = subprocess.run(
        [str(s3), "data", "prepare", "bamboogle", "--input", str(shared_data / "bamboogle" / "bamboogle.json"),
         "--out", str(tmp_path / "b")],
        capture_output=True, text=True, timeout=120,
    )
    assert ok.returncode == 0 and "questions            125" in ok.stdout, ok.stderr
    bad = subprocess.run(
        [str(s3), "data", "prepare", "mirage", "--input", str(shared_data / "bamboogle" / "bamboogle.json"),
         "--out", str(tmp_path / "m")],
        capture_output=True, text=True, timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "bamboogle.json:" in bad.stderr and "Traceback" not in bad.stderr
