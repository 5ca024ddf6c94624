"""What a policy's held-out searches asked for, and what they kept (issue 45, docs/transfer.md "Attempt 3").

    .venv/bin/python benchmarks/transfer3_heldout_modes.py phase1:60 phase1:70 phase1c:80 phase1c:90 ...

The command line of experiments/transfer/heldout_modes.py (what it classifies and writes: there).
"""

from __future__ import annotations

import sys

from experiments.transfer.heldout_modes import __doc__ as about
from experiments.transfer.heldout_modes import main

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        raise SystemExit(about)
    main(sys.argv[1:])
