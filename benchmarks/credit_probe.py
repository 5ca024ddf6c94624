"""The credit probe (issue 81): does the frozen generator's gain in log p(answer) find the gold paragraphs?
experiments/credit_probe.py holds the logic; this is its command line. Its scoring is the first part of
configs/reading.toml's training run (the same credit store), so no scored question is paid for twice.

    .venv/bin/python benchmarks/selection_probe.py prepare     # the shipped reader's split (runs/selection_probe/)
    S3_LLAMA_THREADS=1 .venv/bin/python benchmarks/credit_probe.py run --questions 200    # resumes
    .venv/bin/python benchmarks/credit_probe.py report         # -> benchmarks/results/credit_probe/report.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

from experiments import credit_probe as cp

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "runs" / "selection_probe"  # benchmarks/selection_probe.py prepare: data and index, never committed
RESULTS = ROOT / "benchmarks" / "results" / "credit_probe"
CONFIG = ROOT / "configs" / "reading.toml"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=CONFIG, help="the reading run whose credit the probe scores")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="score the probe questions' candidates (resumes)")
    r.add_argument("--questions", type=int, default=200, help="questions with a gold and a non-gold candidate")
    r.add_argument("--no-reader", action="store_true", help="skip the shipped reader's scores")
    sub.add_parser("report", help="write report.md / report.json")
    a = ap.parse_args()
    if not (WORK / "data" / "questions.jsonl").is_file():
        raise SystemExit("run `benchmarks/selection_probe.py prepare` first (the shipped reader's split)")
    if a.cmd == "run":
        cp.run(a.config, WORK, RESULTS, n=a.questions, reader=None if a.no_reader else "reader-smollm2-135m-hotpotqa",
               log=lambda m: print(m, flush=True))
    from s3.config import load_config

    cfg = load_config(a.config, [])
    credit = cfg.resolve(cfg.training.reading.credit_path or Path(cfg.training.output_dir) / "credit.jsonl")
    print(cp.dump(cp.report(RESULTS, credit, cfg.generator_resolved.model.removeprefix("local/"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
