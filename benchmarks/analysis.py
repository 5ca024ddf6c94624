"""What the transfer experiment's searchers do, and a Search-R1-mode run's over-/under-search (issue 34).

    .venv/bin/python benchmarks/analysis.py prepare      # the dev slices' corpora + bm25 indexes (gitignored; seconds)
    .venv/bin/python benchmarks/analysis.py search_r1    # s3 eval --method search_r1 on MuSiQue (resumable)
    .venv/bin/python benchmarks/analysis.py analyze      # s3 analyze: the searchers, the Search-R1 runs, hand labels
                                                         # (analyze_s3 / analyze_r1: one half)
    .venv/bin/python benchmarks/analysis.py all

Everything lands in benchmarks/results/analysis/: s3/ (untrained vs trained searcher, HotpotQA and MuSiQue),
training/ (the transfer training run's search metrics and collapse), search_r1/ (the Search-R1 run and its
analysis), hand_labels_*.jsonl (every step with a judge verdict, labelled by a person reading it; benchmarks/label_sample.py
prints a sample to label).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from experiments.s3cli import run_s3
from s3core.io import stored

ROOT = Path(__file__).resolve().parents[1]
TRANSFER = ROOT / "benchmarks" / "results" / "transfer" / "eval"
OUT = ROOT / "benchmarks" / "results" / "analysis"
SHARED = ROOT.parent / "shared" / "data"
SLICES = {"hotpotqa_dev500": ("hotpotqa", SHARED / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"),
          "musique_dev200": ("musique", SHARED / "musique_dev200" / "musique.json")}
# the Search-R1-mode runs, policy zero-shot through llama.cpp: name -> (policy, dataset, questions, tokens a turn,
# turns, hand labels). Qwen2.5-Coder-1.5B searches, but once a question at most: on MuSiQue dev200 (80 tokens, 3
# turns) it made 182 searches in 200 questions, and with 128 tokens a turn it searched less (29 in the first 48: it
# answers from its own thoughts). Its run therefore covers MuSiQue dev200 + the 100 MuSiQue TRAIN questions (one
# dataset, one index; zero-shot, so train questions are unseen): ~270 searches, the >= 200 the analysis needs.
# SmolLM2-135M almost never searches (6 searches in 80 questions, stopped there by an earlier session's CPU budget)
# and Qwen2.5-Coder-0.5B never did in an 8-question trial (search_r1_qwen05/). `analysis.py search_r1` runs (or
# resumes) the first; S3_R1_RUNS=a,b picks others.
R1_RUNS = {
    "search_r1_qwen15": ("local/qwen2.5-coder-1.5b-instruct", "musique_dev200_train100", 300, 80, 3,
                         "hand_labels_qwen15.jsonl"),
    "search_r1": ("local/smollm2-135m-instruct", "musique_dev200", 80, 80, 3, "hand_labels_smollm2.jsonl"),
}
# MuSiQue dev200 + train100 in one prepared dataset (dev questions first): the Qwen-1.5B run's
R1_DATA = OUT / "search_r1" / "musique_dev200_train100"
R1_RAW = [SHARED / "musique_dev200" / "musique.json", SHARED / "train_hotpotqa_musique100" / "musique_train.json"]
R1_SELECTED = [n for n in os.environ.get("S3_R1_RUNS", "search_r1_qwen15").split(",") if n]
GENACC_QUESTIONS = os.environ.get("S3_GENACC_QUESTIONS", "20")
# over-search on the first N search steps only (default all); the policy's answers are kept in the analysis folder, so
# a later run with a larger N (or none) asks only for the steps not answered yet
OVER_SEARCH_STEPS = os.environ.get("S3_R1_OVER_SEARCH_STEPS", "")
R1_DIR = OUT / "search_r1"  # runs: R1_DIR/<dataset>/<name>


def _prepare(fmt: str, raws: list[Path], where: Path) -> None:
    """WHERE/data (s3 data prepare) and WHERE/index (bm25), each built once."""
    data, index = where / "data", where / "index"
    if not (data / "corpus.jsonl").is_file():
        run_s3("data", "prepare", fmt, "--input", *map(str, raws), "--out", str(data))
    if not index.is_dir():
        run_s3("index", "build", "--config", "configs/transfer.toml", "--corpus", str(data / "corpus.jsonl"),
               "--out", str(index))


def prepare() -> None:
    for name, (fmt, raw) in SLICES.items():
        _prepare(fmt, [raw], TRANSFER / name)


def _r1_dataset(name: str) -> tuple[Path, Path]:
    """(data, index) of a Search-R1 run's dataset."""
    if name == R1_DATA.name:
        return R1_DATA / "data", R1_DATA / "index"
    return TRANSFER / name / "data", TRANSFER / name / "index"


def prepare_r1() -> None:
    _prepare("musique", R1_RAW, R1_DATA)


def search_r1() -> None:
    prepare()
    prepare_r1()
    for name in R1_SELECTED:
        policy, dataset, questions, tokens, turns, _ = R1_RUNS[name]
        data, index = _r1_dataset(dataset)
        run_s3("eval", "--config", "configs/transfer.toml", "--dataset", str(data), "--index", str(index), "--method",
               "search_r1", "--limit", str(questions), "--out", str(R1_DIR / dataset / name), "--set", "searcher.policy=litellm",
               "--set", f"searcher.model={policy}", "--set", f"searcher.max_new_tokens={tokens}", "--set",
               f"searcher.max_turns={turns}", "--set", "eval.metric=genacc", "--set", "eval.use_judge=true", "--no-progress")


def analyze_s3() -> None:
    prepare()
    runs = [str(TRANSFER / s / m) for s in SLICES for m in ("untrained", "trained")]
    run_s3("analyze", "--config", "configs/transfer.toml", *runs, "--out", str(OUT / "s3"), "--probe",
           "--genacc-questions", GENACC_QUESTIONS, "--set", "eval.metric=genacc", "--set", "eval.use_judge=true")
    run_s3("analyze", str(ROOT / "benchmarks" / "results" / "transfer"), "--out", str(OUT / "training"))


def analyze_r1() -> None:
    prepare()
    prepare_r1()
    for name, (policy, dataset, _, _, _, label_file) in R1_RUNS.items():
        run, labels = R1_DIR / dataset / name, OUT / label_file
        if not stored(run / "results.jsonl").is_file():
            continue
        data, index = _r1_dataset(dataset)
        run_s3("analyze", "--config", "configs/transfer.toml", str(run), "--out", str(OUT / "search_r1" / f"analysis_{name}"),
               "--dataset", str(data), "--index", str(index),
               "--set", "searcher.policy=litellm", "--set", f"searcher.model={policy}", "--set", "eval.metric=genacc",
               "--set", "eval.use_judge=true", *(["--labels", str(labels)] if labels.is_file() else []),
               *(["--over-search-steps", OVER_SEARCH_STEPS] if OVER_SEARCH_STEPS else []))


def main() -> int:
    stage = sys.argv[1] if len(sys.argv) > 1 else "all"
    stages = {"prepare": [prepare], "search_r1": [search_r1], "analyze": [analyze_s3, analyze_r1],
              "analyze_s3": [analyze_s3], "analyze_r1": [analyze_r1], "all": [prepare, search_r1, analyze_s3, analyze_r1]}
    if stage not in stages:
        print(f"usage: analysis.py {{{'|'.join(stages)}}}", file=sys.stderr)
        return 2
    for f in stages[stage]:
        f()
    return 0


if __name__ == "__main__":
    sys.exit(main())
