"""What the transfer experiment's searchers do, and a Search-R1-mode run's over-/under-search (issue 34).

    .venv/bin/python benchmarks/analysis.py prepare      # the dev slices' corpora + bm25 indexes (gitignored; seconds)
    .venv/bin/python benchmarks/analysis.py search_r1    # s3 eval --method search_r1 on MuSiQue (resumable)
    .venv/bin/python benchmarks/analysis.py analyze      # s3 analyze: the searchers, the Search-R1 run, hand labels
    .venv/bin/python benchmarks/analysis.py all

Everything lands in benchmarks/results/analysis/: s3/ (untrained vs trained searcher, HotpotQA and MuSiQue),
training/ (the transfer training run's search metrics and collapse), search_r1/ (the Search-R1 run and its
analysis), hand_labels_*.jsonl (every step with a judge verdict, labelled by a person reading it; benchmarks/label_sample.py
prints a sample to label).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRANSFER = ROOT / "benchmarks" / "results" / "transfer" / "eval"
OUT = ROOT / "benchmarks" / "results" / "analysis"
SHARED = ROOT.parent / "shared" / "data"
SLICES = {"hotpotqa_dev500": ("hotpotqa", SHARED / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"),
          "musique_dev200": ("musique", SHARED / "musique_dev200" / "musique.json")}
# the committed run: SmolLM2-135M (Qwen2.5-Coder-0.5B never searched in an 8-question trial: search_r1_qwen05/), stopped
# at 80 of the 200 questions by this session's CPU budget (the same command resumes it)
R1_POLICY = os.environ.get("S3_R1_POLICY", "local/smollm2-135m-instruct")
R1_QUESTIONS = int(os.environ.get("S3_R1_QUESTIONS", "200"))
GENACC_QUESTIONS = os.environ.get("S3_GENACC_QUESTIONS", "20")
R1_RUN = OUT / "search_r1" / "musique_dev200" / "search_r1"


def _s3(*args: str) -> None:
    cmd = [str(ROOT / ".venv" / "bin" / "s3"), *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def prepare() -> None:
    for name, (fmt, raw) in SLICES.items():
        data, index = TRANSFER / name / "data", TRANSFER / name / "index"
        if not (data / "corpus.jsonl").is_file():
            _s3("data", "prepare", fmt, "--input", str(raw), "--out", str(data))
        if not index.is_dir():
            _s3("index", "build", "--config", "configs/transfer.toml", "--corpus", str(data / "corpus.jsonl"),
                "--out", str(index))


def search_r1() -> None:
    prepare()
    data, index = TRANSFER / "musique_dev200" / "data", TRANSFER / "musique_dev200" / "index"
    _s3("eval", "--config", "configs/transfer.toml", "--dataset", str(data), "--index", str(index), "--method",
        "search_r1", "--limit", str(R1_QUESTIONS), "--out", str(R1_RUN), "--set", "searcher.policy=litellm",
        "--set", f"searcher.model={R1_POLICY}", "--set", "searcher.max_new_tokens=80", "--set", "eval.metric=genacc",
        "--set", "eval.use_judge=true", "--no-progress")


def analyze() -> None:
    prepare()
    runs = [str(TRANSFER / s / m) for s in SLICES for m in ("untrained", "trained")]
    _s3("analyze", "--config", "configs/transfer.toml", *runs, "--out", str(OUT / "s3"), "--probe",
        "--genacc-questions", GENACC_QUESTIONS, "--set", "eval.metric=genacc", "--set", "eval.use_judge=true")
    _s3("analyze", str(ROOT / "benchmarks" / "results" / "transfer"), "--out", str(OUT / "training"))
    if (R1_RUN / "results.jsonl").is_file():
        labels = OUT / "hand_labels_smollm2.jsonl"
        _s3("analyze", "--config", "configs/transfer.toml", str(R1_RUN), "--out", str(OUT / "search_r1" / "analysis"),
            "--dataset", str(TRANSFER / "musique_dev200" / "data"), "--index", str(TRANSFER / "musique_dev200" / "index"),
            "--set", "searcher.policy=litellm", "--set", f"searcher.model={R1_POLICY}", "--set", "eval.metric=genacc",
            "--set", "eval.use_judge=true", *(["--labels", str(labels)] if labels.is_file() else []))


def main() -> int:
    stage = sys.argv[1] if len(sys.argv) > 1 else "all"
    stages = {"prepare": [prepare], "search_r1": [search_r1], "analyze": [analyze],
              "all": [prepare, search_r1, analyze]}
    if stage not in stages:
        print(f"usage: analysis.py {{{'|'.join(stages)}}}", file=sys.stderr)
        return 2
    for f in stages[stage]:
        f()
    return 0


if __name__ == "__main__":
    sys.exit(main())
