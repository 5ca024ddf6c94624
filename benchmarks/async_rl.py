"""Asynchronous RL vs the synchronous loop: step throughput (medians of 3 launches, interleaved), the cost check
against the priced loopback API, the per-step timeline plot (issue 47).

    nice -n 5 .venv/bin/python benchmarks/async_rl.py [--steps 5] [--launches 3] [--staleness 1] [--latency auto] \
        [--parts fake,local,ray] [--out benchmarks/results/async_rl]

The command line of experiments/async_rl.py (what it measures, every option and output: there, or `--help`).
"""

from __future__ import annotations

import sys

from experiments.async_rl import main

if __name__ == "__main__":
    sys.exit(main())
