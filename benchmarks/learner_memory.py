"""Peak memory of one learner update: the full-vocabulary log-softmax (before) vs policy-token chunks (after).

    .venv/bin/python benchmarks/learner_memory.py [--before-repo /tmp/s3-before] [--tokens 1024 2048 4096] \
        [--out benchmarks/results/learner_memory]

One GRPO update (training.learner.masked_update through the project's Learner: AdamW, clipping, the KL reference off)
of 4 rows x T tokens, of which 3 policy spans of 128 tokens per row are trained on (the rest: prompt and retrieved
documents, as in an s3 trajectory), with a model of Qwen2.5-0.5B's shape where the logits live: its 151,936-token
vocabulary and 896 hidden units, but 2 of its 24 layers (seeded random weights) — the logits' memory does not
depend on depth, and 24 layers x 16k tokens would take many minutes a run on 2 CPU cores. Each (code, T) runs in a
fresh process; the peak is VmHWM after the update minus VmRSS before it (the kernel's peak counter is reset first).

`--before-repo` is a checkout of the parent commit (`git worktree add /tmp/s3-before <commit>`), run the same way; a
`before` run whose projected peak would not fit in this machine's free memory is skipped and said so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, os, sys, tempfile
from pathlib import Path
from types import SimpleNamespace
import torch
torch.set_num_threads(2)
torch.manual_seed(0)
from transformers import Qwen2Config, Qwen2ForCausalLM
T, model_dir = int(sys.argv[1]), sys.argv[2]
from training.learn.api import Batch, MicroBatch
from training.learn.learner import masked_update, optimizer_and_scheduler
from s3.config import load_config
tc = load_config(None, ["training.update.kl_coef=0", "training.rollout.temperature=1.0"]).training
model = Qwen2ForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
model.train()
opt, _ = optimizer_and_scheduler(tc, model, None)
B = 4
ids = torch.randint(0, model.config.vocab_size, (B, T))
att = torch.ones(B, T, dtype=torch.long)
start = 256  # the prompt
mask = torch.zeros(B, T - 1 - start)
for s in (200, 1200, 2600):  # three policy spans of 128 tokens (query / selection / stop turns)
    if s + 128 <= mask.shape[1]:
        mask[:, s : s + 128] = 1
batch = Batch(ids=ids, attention=att, loss_mask=mask, start=start, rollout_lp=torch.zeros_like(mask))
core = SimpleNamespace(tc=tc, model=model, value_head=None, ref_model=None, optimizer=opt)
def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
# a first update on a short batch: AdamW's state and the allocator's steady state exist before the measurement
small = Batch(ids=ids[:, :start + 64], attention=att[:, :start + 64], loss_mask=torch.ones(B, 63),
              start=start, rollout_lp=torch.zeros(B, 63))
masked_update(core, [MicroBatch(small, adv=[1.0, -1.0, 0.5, -0.5])], [1.0])
Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
before = status("VmRSS:")
out = masked_update(core, [MicroBatch(batch, adv=[1.0, -1.0, 0.5, -0.5])], [1.0])
peak = status("VmHWM:")
print(json.dumps({"T": T, "policy_tokens": int(mask.sum()), "peak_delta_bytes": peak - before,
                  "rss_before": before, "loss": out.stats.get("losses/total")}))
'''


def make_model(where: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=2,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                      tie_word_embeddings=True)
    Qwen2ForCausalLM(cfg).save_pretrained(str(where))


def run(repo: Path, T: int, model_dir: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(repo), LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1")
    p = subprocess.run([sys.executable, "-c", CHILD, str(T), str(model_dir)], cwd=str(repo), env=env,
                       capture_output=True, text=True, timeout=3000)
    if p.returncode != 0:
        return {"T": T, "error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"rc {p.returncode}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-repo", type=Path, default=None)
    ap.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "learner_memory")
    args = ap.parse_args()
    gib = 1024**3
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "qwen05-shape"
        make_model(model_dir)
        rows = []
        for T in args.tokens:
            for label, repo in (("after", ROOT), ("before", args.before_repo)):
                if repo is None:
                    continue
                # the full-vocabulary path holds ~4 x T x 151,936 x 4 B three times over (bf16/fp32 logits, log-softmax, grad)
                projected = 3 * 4 * T * 151936 * 4
                free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
                if label == "before" and projected > 0.8 * free:
                    rows.append({"code": label, "T": T, "skipped": f"projected {projected / gib:.1f} GiB > 80% of the "
                                 f"{free / gib:.1f} GiB free here"})
                    print(rows[-1], flush=True)
                    continue
                r = {"code": label, **run(repo, T, model_dir)}
                rows.append(r)
                print(r, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = ["# Learner peak memory, one GRPO update of 4 rows x T tokens (Qwen2.5-0.5B vocabulary and width, 2 layers)",
             "", "`.venv/bin/python benchmarks/learner_memory.py --before-repo <parent checkout>`; peak = VmHWM after "
             "the update - VmRSS before it, fresh process per cell, 2 CPU cores.", "",
             "| T | policy tokens | before (full-vocabulary logits) | after (policy-token chunks) | ratio |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for T in args.tokens:
        b = next((r for r in rows if r["T"] == T and r["code"] == "before"), {})
        a = next((r for r in rows if r["T"] == T and r["code"] == "after"), {})
        fmt = lambda r: (f"{r['peak_delta_bytes'] / gib:.2f} GiB" if "peak_delta_bytes" in r  # noqa: E731
                         else r.get("skipped") or r.get("error") or "-")
        ratio = (f"{b['peak_delta_bytes'] / a['peak_delta_bytes']:.1f}x" if "peak_delta_bytes" in a and
                 "peak_delta_bytes" in b else "-")
        lines.append(f"| {T} | {a.get('policy_tokens', '-')} | {fmt(b)} | {fmt(a)} | {ratio} |")
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
