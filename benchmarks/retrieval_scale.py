"""Retrieval at scale on a modest machine: compressed dense indexes vs flat on real passages, a 1M-passage memory
check, /retrieve loopback vs in-process, and a wiki-18 projection.

    flock /tmp/s3-cpu.lock nice -n 10 .venv/bin/python benchmarks/retrieval_scale.py              # everything
    .venv/bin/python benchmarks/retrieval_scale.py --stages corpus,encode,dense,project          # no 1M / http
    .venv/bin/python benchmarks/retrieval_scale.py --stages http                                  # /retrieve only

The command line of experiments/retrieval_scale.py (what it measures, every option and output: there, or `--help`).
"""

from __future__ import annotations

import sys

from experiments.retrieval_scale import main

if __name__ == "__main__":
    sys.exit(main())
