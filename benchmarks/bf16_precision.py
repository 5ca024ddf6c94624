"""Full fine-tuning precision: float32 vs bf16 weights updated in place vs float32 master weights + bf16 compute.

    .venv/bin/python benchmarks/bf16_precision.py [--steps 20] [--lrs 1e-5 1e-6] [--out benchmarks/results/bf16_precision]

SmolLM2-135M-Instruct (the offline model, real weights), all weights trained, the project's AdamW
(training.learner.optimizer_and_scheduler) on the same 4 sequences every step; the loss is the masked negative
log-likelihood of the answer tokens (training.learner.forward_logprobs, the learner's own log-prob path). Three ways:

- fp32:            float32 weights, float32 compute (the reference);
- bf16 in place:   bfloat16 weights updated in place by AdamW — what training.learner.dtype = "bfloat16" did to full
                   fine-tuning before issue 29 (the config now refuses it);
- fp32 master + bf16 autocast: float32 weights (the master copy every update lands in), bf16 compute
                   (training.learner.dtype = "float32", training.learner.autocast = "bf16": the path the refusal names).

Reports the share of weight elements that differ from the start after 1, 3 and all steps, and the loss curves
(PNG, one panel per learning rate).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

TEXTS = [
    ("Question: Who wrote Critique of Pure Reason?\nAnswer:", " Immanuel Kant, a German philosopher."),
    ("Question: What is the capital of Norway?\nAnswer:", " Oslo is the capital of Norway."),
    ("Question: Which river flows through Paris?\nAnswer:", " The Seine flows through Paris."),
    ("Question: In which country is Lima?\nAnswer:", " Lima is the capital of Peru."),
]
WAYS = {"fp32": ("float32", "off"), "bf16 in place": ("bfloat16", "off"), "fp32 master + bf16 autocast": ("float32", "bf16")}


def batch_of(tok: Any) -> Any:
    import torch

    from training.learn.api import Batch

    rows = [(tok(q)["input_ids"], tok(a)["input_ids"]) for q, a in TEXTS]
    L = max(len(q) + len(a) for q, a in rows)
    start = min(len(q) for q, _ in rows) - 1
    ids = torch.full((len(rows), L), tok.pad_token_id or 0, dtype=torch.long)
    att = torch.zeros((len(rows), L), dtype=torch.long)
    mask = torch.zeros((len(rows), L - 1))
    for j, (q, a) in enumerate(rows):
        ids[j, : len(q) + len(a)] = torch.tensor(q + a)
        att[j, : len(q) + len(a)] = 1
        mask[j, len(q) - 1 : len(q) + len(a) - 1] = 1  # positions predicting the answer tokens
    return Batch(ids=ids, attention=att, loss_mask=mask[:, start:], start=start)


def train(way: str, lr: float, steps: int, model_dir: str) -> dict[str, Any]:
    import torch

    from searcher.policy.transformers_policy import TransformersPolicy
    from training.config import TrainingConfig
    from training.learn.algorithms import masked_mean
    from training.learn.learner import forward_logprobs, optimizer_and_scheduler

    dtype, autocast = WAYS[way]
    torch.manual_seed(0)
    pol = TransformersPolicy.load(model_dir, dtype=dtype)
    model = pol.model
    model.train()
    tc = TrainingConfig(update={"learning_rate": lr, "critic_learning_rate": lr, "warmup_steps": 0},
                        rollout={"temperature": 1.0}, learner={"autocast": autocast, "logprob_chunk": 1024})
    opt, _ = optimizer_and_scheduler(tc, model, None)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    batch = batch_of(pol.tokenizer)
    total = sum(p.numel() for p in start.values())
    losses, moved = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        lp, _ = forward_logprobs(tc, model, batch)
        loss = -masked_mean(lp, batch.loss_mask)
        loss.backward()
        opt.step()
        losses.append(float(loss))
        changed = sum(int((p.detach() != start[n]).sum()) for n, p in model.named_parameters())
        moved.append(changed / total)
    return {"way": way, "lr": lr, "losses": losses, "moved": moved}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lrs", type=float, nargs="+", default=[1e-5, 1e-6])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "bf16_precision")
    args = ap.parse_args()
    import torch

    from searcher.policy.transformers_policy import resolve_checkpoint

    torch.set_num_threads(2)
    model_dir = str(resolve_checkpoint(args.model))
    rows = []
    for lr in args.lrs:
        for way in WAYS:
            r = train(way, lr, args.steps, model_dir)
            rows.append(r)
            print(f"lr {lr:g} {way:>28}: moved after 1/3/{args.steps} steps "
                  f"{r['moved'][0]:.1%} / {r['moved'][min(2, args.steps - 1)]:.1%} / {r['moved'][-1]:.1%}; "
                  f"loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(args.lrs), figsize=(5.5 * len(args.lrs), 7), squeeze=False)
    for c, lr in enumerate(args.lrs):
        for r in (r for r in rows if r["lr"] == lr):
            x = range(1, len(r["losses"]) + 1)
            axes[0][c].plot(x, r["losses"], marker=".", label=r["way"])
            axes[1][c].plot(x, [100 * m for m in r["moved"]], marker=".", label=r["way"])
        axes[0][c].set_title(f"answer NLL, lr {lr:g}")
        axes[1][c].set_title(f"% of weights changed since step 0, lr {lr:g}")
        axes[1][c].set_xlabel("AdamW step (same 4 sequences)")
        axes[0][c].legend(fontsize=8)
    fig.suptitle(f"SmolLM2-135M full fine-tuning on CPU: {args.steps} steps, three precisions")
    fig.tight_layout()
    fig.savefig(args.out / "precision.png", dpi=110)
    md = ["# Full fine-tuning precision (issue 29)", "", f"`.venv/bin/python benchmarks/bf16_precision.py --steps {args.steps}`"
          " — SmolLM2-135M, all weights, AdamW, the same 4 sequences every step, CPU. Plot: `precision.png`.", "",
          "| lr | way | weights changed after 1 step | after 3 | after all | loss first -> last |",
          "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        md.append(f"| {r['lr']:g} | {r['way']} | {r['moved'][0]:.1%} | {r['moved'][min(2, len(r['moved']) - 1)]:.1%} | "
                  f"{r['moved'][-1]:.1%} | {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f} |")
    (args.out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
