"""The reward landscape of a training set: the frozen generator's accuracy under different contexts.

    .venv/bin/python benchmarks/reward_landscape.py [--config configs/cpu_train.toml] [--set key=value ...] \
        [--sample 200] [--out benchmarks/results/transfer/reward_landscape_qwen05]

The command line of experiments/reward_landscape.py (what it measures, every option and output: there, or `--help`).
"""

from __future__ import annotations

import sys

from experiments.reward_landscape import main

if __name__ == "__main__":
    sys.exit(main())
