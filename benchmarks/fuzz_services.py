"""Fuzz both services through their OpenAPI schemas with schemathesis (hypothesis-driven), on loopback.

    nice -n 10 .venv/bin/python benchmarks/fuzz_services.py [--examples 150] [--out benchmarks/results/fuzz_services.md]

The command line of experiments/fuzz_services.py (what it measures, every option and output: there, or `--help`).
"""

from __future__ import annotations

import sys

from experiments.fuzz_services import main

if __name__ == "__main__":
    sys.exit(main())
