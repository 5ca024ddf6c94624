"""What a padded micro-batch costs the learner on CPU: the same rows' forward + backward as one padded micro-batch of
B rows, or as B micro-batches of one row (training.learner.micro_batch_size = 1).

    .venv/bin/python benchmarks/padded_microbatch.py [--tokens 2500] [--rows 2] [--repeats 3] [--threads 2]

A padded batch needs an attention mask, and with a mask torch's scaled_dot_product_attention on CPU takes the math
kernel, which keeps the (rows, heads, T, T) scores for the backward pass; a single row needs no mask and gets the
fused causal kernel. The 8:3:3 searcher's trajectories run to ~3k tokens, where that is most of a step's time and
memory (configs/transfer2.toml). Each measurement is a fresh subprocess (peak RSS is its own), the two layouts
interleaved; the SmolLM2-135M learner in bf16 autocast, as the transfer run trains it. Prints medians, ranges and the
ratio; --out writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
import torch
from searcher.policy.transformers_policy import resolve_checkpoint
from transformers import AutoModelForCausalLM
layout, T, B, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
torch.manual_seed(0)
m = AutoModelForCausalLM.from_pretrained(str(resolve_checkpoint("smollm2-135m-instruct")), dtype=torch.float32)
ids = torch.randint(0, 40000, (B, T))
def step(x, mask):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m.model(input_ids=x, attention_mask=mask, use_cache=False)
    out.last_hidden_state.float().mean().backward()
t = time.perf_counter()
if layout == "padded":
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1:, : T // 10] = 0  # the shorter rows' left padding
    step(ids, mask)
else:
    for i in range(B):
        step(ids[i : i + 1], torch.ones(1, T, dtype=torch.long))
print(json.dumps({"seconds": time.perf_counter() - t,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "attn": m.config._attn_implementation}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2500)
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"padded": [], "one_row": []}
    for r in range(args.repeats):
        for layout in ("padded", "one_row"):
            out = subprocess.run([sys.executable, "-c", CHILD, layout, str(args.tokens), str(args.rows), str(args.threads)],
                                 capture_output=True, text=True, cwd=ROOT, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            runs[layout].append(row)
            print(f"repeat {r + 1}: {layout:8s} {row['seconds']:6.1f} s  peak {row['peak_mb']:6.0f} MB  ({row['attn']})",
                  flush=True)
    summary: dict[str, object] = {"tokens": args.tokens, "rows": args.rows, "threads": args.threads, "runs": runs}
    for key in ("seconds", "peak_mb"):
        a = [x[key] for x in runs["padded"]]
        b = [x[key] for x in runs["one_row"]]
        summary[key] = {"padded_median": statistics.median(a), "one_row_median": statistics.median(b),
                        "padded_range": [min(a), max(a)], "one_row_range": [min(b), max(b)],
                        "padded_over_one_row": statistics.median(a) / statistics.median(b)}
        print(f"{key}: padded median {statistics.median(a):.1f} ({min(a):.1f}-{max(a):.1f}), one row at a time "
              f"{statistics.median(b):.1f} ({min(b):.1f}-{max(b):.1f}): padded / one row = "
              f"{statistics.median(a) / statistics.median(b):.2f}x")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
