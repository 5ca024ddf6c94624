"""Zero-training checks before a long transfer run (issue 45, build step 1; docs/transfer.md "Attempt 3").

    .venv/bin/python benchmarks/transfer_checks.py prepare    # data, index, the checks' contexts files
    S3_LLAMA_THREADS=2 .venv/bin/python benchmarks/transfer_checks.py run METHOD --generator qwen15 --limit 300
    .venv/bin/python benchmarks/transfer_checks.py report     # report.md, report.json, checks.png

The command line of experiments/transfer/checks_run.py (every stage, option and output: there, or `--help`, which
prints the table of methods, experiments/transfer/methods.py).
"""

from __future__ import annotations

import sys

from experiments.transfer.checks_run import main

if __name__ == "__main__":
    sys.exit(main())
