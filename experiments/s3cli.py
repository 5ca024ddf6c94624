"""The `s3` command line as a subprocess: the one helper every benchmark stage runs `s3 ...` through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_s3(*args: str, capture: bool = False) -> str:
    """`s3 ARGS` with this interpreter (its `s3.cli`), from the repository root, the command line echoed first; with
    `capture` its standard output is returned instead of shown. A failure exits with its status: s3 printed why (its
    captured error output is shown then), so no second traceback."""
    print("+ s3 " + " ".join(args), flush=True)
    done = subprocess.run([sys.executable, "-m", "s3.cli", *args], check=False, cwd=ROOT, text=True,
                          capture_output=capture)
    if done.returncode:
        if capture:
            sys.stderr.write(done.stderr)
        raise SystemExit(f"s3 {args[0]} exited with {done.returncode}")
    return done.stdout if capture else ""
