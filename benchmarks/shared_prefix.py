"""Shared-prefix KV reuse (searcher/policy/prefix_kv.py) on the real SmolLM2-135M searcher: on vs off, same run.

    nice -n 10 .venv/bin/python benchmarks/shared_prefix.py [--batch 8] [--micro-batch 4] [--threads 2] [--repeats 3]

Every s3 prompt starts with the same ~570 tokens (system turn, Figure 11 instruction, loop example). Measured here,
each as the median of --repeats, plain path first then shared prefix, in bf16 autocast as `configs/cpu_train.toml`
trains:

1. rollout generation: `TransformersPolicy.generate` on --batch first-turn prompts of different HotpotQA questions
   (their D0 = the first three context paragraphs, 48 words each), greedy, 32 new tokens; the sampled tokens must be
   identical with and without the shared prefix;
2. the training forward/backward (`training.learner.forward_logprobs` + a masked loss + backward) on --micro-batch rollout-shaped
   sequences (prompt, reply, <information> window, reply): (a) different questions (only the instruction is shared),
   (b) one question's GRPO group (the whole first prompt is shared); the largest |log-prob| and gradient differences.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "hotpotqa_dev500"

REPLY = '<important_info>[1, 2]</important_info>\n<search_complete>False</search_complete>\n<query>{"query": "%s"}</query>'


def _questions(n: int) -> list[tuple[str, str]]:
    """(question, rendered D0 window) for the first n HotpotQA dev questions."""
    from s3core.types import Document
    from searcher.protocol import render_information

    rows = [json.loads(line) for line in sorted(DATA.glob("*.jsonl"))[0].read_text().splitlines()[:n]]
    out = []
    for r in rows:
        ctx = r["context"]  # HotpotQA distractor setting: {"title": [...], "sentences": [[...], ...]}
        docs = [Document(id=str(i), title=t, text=" ".join(s)) for i, (t, s) in enumerate(zip(ctx["title"][:3], ctx["sentences"][:3], strict=True))]
        out.append((r["question"], render_information(docs, 48)))
    return out


def _median_time(fn: Any, repeats: int) -> tuple[float, list[float], Any]:
    times, last = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        last = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=4, help="rows of the training forward (configs/cpu_train.toml: 4)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=32)
    args = ap.parse_args()

    import torch

    from s3core.types import SearchResult, Trajectory
    from searcher.policy import TokenPrompt
    from searcher.policy.transformers_policy import TransformersPolicy
    from searcher.protocol import build_s3_prompt, information_observation
    from training.config import TrainingConfig
    from training.learn.api import pad_rollouts
    from training.learn.learner import forward_logprobs

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    pol = TransformersPolicy.load("smollm2-135m-instruct")
    model, tok = pol.model, pol.tokenizer
    qs = _questions(args.batch)
    first = [pol.encode_chat([{"role": "user", "content": build_s3_prompt(q, d0, 3)}]) for q, d0 in qs]
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    print(f"SmolLM2-135M, {args.threads} thread(s), bf16 autocast, batch {args.batch}, first prompts "
          f"{min(map(len, first))}-{max(map(len, first))} tokens")

    # 1. rollout generation
    rows = []

    def gen(share: bool) -> Any:
        pol.share_prefix = share
        with torch.no_grad(), bf16():
            return pol.generate([TokenPrompt(x) for x in first], max_new_tokens=args.new_tokens, temperature=0.0)

    gen(True)  # warm-up (allocations, kernels)
    t_plain, runs_plain, out_plain = _median_time(lambda: gen(False), args.repeats)
    t_shared, runs_shared, out_shared = _median_time(lambda: gen(True), args.repeats)
    shared_len = pol.last_shared_prefix

    def agree(a: list[Any], b: list[Any]) -> str:
        """Rows whose greedy tokens are identical (bf16 rounding differs with the matmul shapes; a near-tie can
        flip a greedy token, and the reply diverges from there)."""
        same = sum(x.token_ids == y.token_ids for x, y in zip(a, b, strict=True))
        return f"{same}/{len(a)} rows identical"

    with torch.no_grad():
        pol.share_prefix = False
        out_fp32 = pol.generate([TokenPrompt(x) for x in first], max_new_tokens=args.new_tokens, temperature=0.0)
    check = f"greedy, shared vs plain: {agree(out_plain, out_shared)} (bf16 vs fp32: {agree(out_plain, out_fp32)})"
    rows.append((f"rollout generation (greedy, {args.new_tokens} new tokens)", shared_len, t_plain, runs_plain,
                 t_shared, runs_shared, check))

    # 2. training forward/backward
    def results_for(pairs: list[tuple[list[int], str]]) -> list[SearchResult]:
        out = []
        for prompt_ids, q in pairs:
            t = Trajectory(prompt_ids=list(prompt_ids))
            t.append(tok(REPLY % q[:60], add_special_tokens=False)["input_ids"], True)
            t.append(tok(information_observation(qs[0][1]), add_special_tokens=False)["input_ids"], False)
            t.append(tok(REPLY % "second", add_special_tokens=False)["input_ids"], True)
            out.append(SearchResult(question=q, trajectory=t))
        return out

    def fwd_bwd(results: list[SearchResult], share: bool, precision: str = "bf16") -> tuple[Any, Any, int, Any]:
        """log-probs, gradient, shared tokens, policy-token mask; fp32 ('off') runs without gradients (memory)."""
        tc = TrainingConfig(rollout={"temperature": 1.0}, learner={"autocast": precision, "share_prefix": share})
        batch = pad_rollouts(results, list(range(len(results))), tok.pad_token_id, share_prefix=share)
        model.zero_grad(set_to_none=True)
        model.train()
        if precision == "off":
            with torch.no_grad():
                return forward_logprobs(tc, model, batch)[0], None, batch.prefix, batch.loss_mask.bool()
        lp, _ = forward_logprobs(tc, model, batch)
        (-(lp * batch.loss_mask).sum() / batch.loss_mask.sum()).backward()
        grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return lp.detach(), grad, batch.prefix, batch.loss_mask.bool()

    mb = min(args.micro_batch, args.batch)
    cases = {
        f"training fwd/bwd, {mb} different questions": results_for([(first[i], qs[i][0]) for i in range(mb)]),
        f"training fwd/bwd, one question's group of {mb}": results_for([(first[0], qs[0][0] + f" v{i}") for i in range(mb)]),
    }
    for name, res in cases.items():
        fwd_bwd(res, True)  # warm-up
        t_plain, runs_plain, (lp0, g0, _, m) = _median_time(lambda res=res: fwd_bwd(res, False), args.repeats)
        t_shared, runs_shared, (lp1, g1, p1, _) = _median_time(lambda res=res: fwd_bwd(res, True), args.repeats)
        lp32 = fwd_bwd(res, False, "off")[0]  # the yardstick: how far bf16 itself is from fp32
        cos = torch.nn.functional.cosine_similarity(g0.double(), g1.double(), dim=0)
        check = (f"policy tokens: mean / max |d log-prob| shared vs plain {(lp0 - lp1)[m].abs().mean():.4f} / "
                 f"{(lp0 - lp1)[m].abs().max():.3f} (bf16 vs fp32: {(lp0 - lp32)[m].abs().mean():.4f} / "
                 f"{(lp0 - lp32)[m].abs().max():.3f}); gradient cosine shared vs plain {cos:.5f}")
        rows.append((name, p1, t_plain, runs_plain, t_shared, runs_shared, check))
    model.eval()
    pol.share_prefix = True

    print("\n| what | shared tokens | plain s (median) | shared s (median) | plain / shared | check |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, p, tp, rp, ts, rs, check in rows:
        print(f"| {name} | {p} | {tp:.2f} ({', '.join(f'{x:.1f}' for x in rp)}) | {ts:.2f} ({', '.join(f'{x:.1f}' for x in rs)}) | "
              f"{tp / ts:.2f}x | {check} |")


if __name__ == "__main__":
    main()
