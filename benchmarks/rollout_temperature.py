"""Which rollout temperature keeps GRPO groups informative (issue 45, step 3), on the real s3 loop:

    nice -n 19 .venv/bin/python benchmarks/rollout_temperature.py --config configs/transfer3.toml \
        --policy runs/transfer3/phase1/checkpoints/step_000008 --questions 16 --temperatures 0.6 0.8 1.0 1.2 \
        --out benchmarks/results/transfer3/temperature_warmed

The command line of experiments/rollout_temperature.py (what it measures, every option and output: there, or `--help`).
"""

from __future__ import annotations

import sys

from experiments.rollout_temperature import main

if __name__ == "__main__":
    sys.exit(main())
