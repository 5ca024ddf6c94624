"""The transfer experiment after training (docs/transfer.md), stage by stage; every stage resumes where it stopped.

    .venv/bin/python benchmarks/transfer.py select    # held-out reward of every checkpoint -> the chosen one
    .venv/bin/python benchmarks/transfer.py evaluate  # s3 eval on the dev slices: 4 methods (+ the equal-budget cap)
    .venv/bin/python benchmarks/transfer.py report    # paired bootstrap table, diagnostics, curves
    .venv/bin/python benchmarks/transfer.py ablation  # the held-out table: what each lever did (no model is run)
    .venv/bin/python benchmarks/transfer.py all

The command line of experiments/transfer/attempt.py (what it measures, every option, output and method: there, or
`--help`).
"""

from __future__ import annotations

import sys

from experiments.transfer.attempt import main

if __name__ == "__main__":
    sys.exit(main())
