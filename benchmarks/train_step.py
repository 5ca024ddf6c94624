"""One masked GRPO update of the real SmolLM2-135M searcher: fp32 vs bf16 autocast (`training.learner.autocast`).

    nice -n 10 .venv/bin/python benchmarks/train_step.py [--batch 4] [--threads 1] [--repeats 3]

Sequences are real s3 searcher prompts (HotpotQA dev questions, their first three context paragraphs rendered as the
first <information> window, per-document budget 48 words) followed by a policy reply, an environment
<information> block and a second reply, so the loss mask has the shape of a real rollout. For each precision: the
median seconds of reference forward + policy forward/backward (what one micro-batch of `S3Trainer.update` does),
then the ratio fp32/bf16, the largest |log-prob difference| on policy tokens, and the cosine similarity of the two
gradients (does bf16 point the update the same way?).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "hotpotqa_dev500"

REPLY = '<important_info>[1, 2]</important_info>\n<search_complete>False</search_complete>\n<query>{"query": "%s"}</query>'


def _batch(tokenizer: object, n: int) -> tuple[list[list[int]], list[list[int]]]:
    from s3core.types import Document
    from searcher.protocol import build_s3_prompt, information_observation, render_information

    rows = [json.loads(line) for line in sorted(DATA.glob("*.jsonl"))[0].read_text().splitlines()[:n]]
    seqs, masks = [], []
    for r in rows:
        ctx = r["context"]  # HotpotQA distractor setting: {"title": [...], "sentences": [[...], ...]}
        docs = [Document(id=str(i), title=t, text=" ".join(sents))
                for i, (t, sents) in enumerate(zip(ctx["title"][:3], ctx["sentences"][:3], strict=True))]
        info = render_information(docs, 48)
        prompt = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
            [{"role": "user", "content": build_s3_prompt(r["question"], info, 3)}], tokenize=False, add_generation_prompt=True
        )
        parts = [(prompt, 0), (REPLY % r["question"][:60], 1), (information_observation(info), 0), (REPLY % "second", 1)]
        ids: list[int] = []
        mask: list[int] = []
        for text, m in parts:
            t = tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
            ids += t
            mask += [m] * len(t)
        seqs.append(ids)
        masks.append(mask)
    return seqs, masks


def _bf16_flags() -> str:
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    have = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return ", ".join(have) if have else "no native bf16 (autocast still works, maybe slower)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import torch

    from searcher.policy.transformers_policy import TransformersPolicy
    from training.learn.algorithms import gather_logprobs, grpo_loss

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    pol = TransformersPolicy.load("smollm2-135m-instruct")
    model, tok = pol.model, pol.tokenizer
    seqs, masks = _batch(tok, args.batch)
    L = max(len(s) for s in seqs)
    pad = tok.pad_token_id or 0
    ids = torch.tensor([s + [pad] * (L - len(s)) for s in seqs])
    att = torch.tensor([[1] * len(s) + [0] * (L - len(s)) for s in seqs])
    mask = torch.tensor([m[1:] + [0] * (L - len(m)) for m in masks], dtype=torch.float32)  # position t predicts t+1
    adv = torch.tensor([1.0, -1.0] * (args.batch // 2) + [0.5] * (args.batch % 2))
    print(f"batch {args.batch} x {L} tokens ({int(mask.sum())} policy tokens), {args.threads} thread(s), "
          f"CPU flags: {_bf16_flags()}")

    def step(precision: str) -> tuple[float, torch.Tensor, torch.Tensor]:
        ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else contextlib.nullcontext
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        with torch.no_grad(), ctx():
            ref = gather_logprobs(model(input_ids=ids, attention_mask=att, use_cache=False).logits[:, :-1], ids[:, 1:])
        model.train()
        with ctx():
            logits = model(input_ids=ids, attention_mask=att, use_cache=False).logits[:, :-1]
        lp = gather_logprobs(logits, ids[:, 1:])
        out = grpo_loss(lp, lp.detach(), ref, adv, mask)
        out.loss.backward()
        sec = time.perf_counter() - t0
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return sec, lp.detach(), grad

    times: dict[str, list[float]] = {"fp32": [], "bf16": []}
    last: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for _ in range(args.repeats):
        for precision in ("fp32", "bf16"):
            sec, lp, grad = step(precision)
            times[precision].append(sec)
            last[precision] = (lp, grad)
    med = {k: statistics.median(v) for k, v in times.items()}
    m = mask.bool()
    dlp = (last["fp32"][0][m] - last["bf16"][0][m]).abs().max().item()
    cos = torch.nn.functional.cosine_similarity(last["fp32"][1].double(), last["bf16"][1].double(), dim=0).item()
    print("\n| precision | median s (ref fwd + fwd/bwd) | runs | x fp32 |")
    print("| --- | ---: | --- | ---: |")
    for k in ("fp32", "bf16"):
        print(f"| {k} | {med[k]:.2f} | {', '.join(f'{t:.1f}' for t in times[k])} | {med['fp32'] / med[k]:.2f} |")
    print(f"\nmax |log-prob fp32 - bf16| on policy tokens: {dlp:.4f}; gradient cosine similarity: {cos:.4f}")


if __name__ == "__main__":
    main()
