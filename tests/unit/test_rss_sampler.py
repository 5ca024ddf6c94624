"""experiments/rss_sampler.py: a run's memory is sampled across the process and its children (vLLM's engine core is
one), per step, into a jsonl that a resumed run appends to."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from experiments.rss_sampler import RssSampler, tree_rss

# a parent holding ~40 MB that starts a child holding ~120 MB, both alive for a while
TREE = textwrap.dedent("""
    import subprocess, sys, time
    mine = bytearray(40_000_000)
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(120_000_000); time.sleep(3)"])
    time.sleep(2.5)
    child.wait()
""")


def test_the_tree_is_counted_children_included_and_written_per_step(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", TREE])
    out = tmp_path / "memory.jsonl"
    step = iter(range(1000))
    with RssSampler(proc.pid, out=out, every_s=0.1, step_of=lambda: min(next(step) // 10, 3)) as s:
        proc.wait()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and {"t", "rss_gb", "main_gb", "step"} <= set(rows[0])
    assert s.peak_gb >= 0.15  # the child's 120 MB and the parent's 40 MB together
    assert max(r["main_gb"] for r in rows) < 0.12  # the parent alone never held the child's block
    assert set(s.peak_by_step) <= {0, 1, 2, 3} and max(s.peak_by_step.values()) == s.peak_gb
    assert tree_rss(proc.pid) == (0, 0)  # gone: nothing, no error


def test_a_second_launch_appends(tmp_path: Path) -> None:
    out = tmp_path / "memory.jsonl"
    for _ in range(2):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
        with RssSampler(proc.pid, out=out, every_s=0.1):
            proc.wait()
    ts = [json.loads(line)["t"] for line in out.read_text().splitlines()]
    assert len(ts) >= 4 and any(b < a for a, b in itertools.pairwise(ts))  # the clock restarted: 2 launches
