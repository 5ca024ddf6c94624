"""The held-out ablation of the third transfer attempt (issue 45): each policy that still exists, greedy, on the same
100 held-out training questions, scored with the phase-1 reward.

    S3_LLAMA_THREADS=2 .venv/bin/python benchmarks/transfer3_ablation.py run [NAME ...]   # resumable: a row once
    .venv/bin/python benchmarks/transfer3_ablation.py report

The command line of experiments/transfer/ablation.py (what each row is, what it needs and writes: there, or `--help`).
"""

from __future__ import annotations

from experiments.transfer.ablation import main

if __name__ == "__main__":
    main()
