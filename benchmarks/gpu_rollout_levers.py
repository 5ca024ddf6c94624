"""Where the transformers rollout engine's time goes on a GPU, and which lever moves it (the engine `s3 train` samples
with where vLLM is absent; `s3 doctor --shape 3b` measured it at 443.5 policy tokens/s on an H200, under the 1,110 goal;
merged and warm it passes: 1,543.3, benchmarks/results/doctor_cuda_shapes).

    S3_DOCTOR_TOKENIZER=.s3cache/doctor_gpu/tok python3 benchmarks/gpu_rollout_levers.py --out $OUT/levers.jsonl
    .venv/bin/python benchmarks/gpu_rollout_levers.py --device cpu --shape small --rows 8 --tokens 16   # the CPU check

The doctor's shape step's model and learner (a seeded random model of Qwen2.5-3B's shape, configs/gpu_single.toml's
LoRA learner), then the same `rows` s3 prompts rolled out for `tokens` tokens at the recipe's temperature, one lever at
a time, each after a warm-up:
- `as_doctor`: the engine as `s3 train` runs it (shared-prefix KV, LoRA adapters live, chosen-token log-probs);
- `no_shared_prefix`: the prefix computed per row (searcher.transformers share_prefix off);
- `lora_merged`: the adapters merged into the weights for the rollout (peft merge_adapter / unmerge_adapter);
- `lora_merged_no_shared_prefix`: both;
- `*_2x_rows`: twice the rows in one generate call (is decoding bound by launches?);
- `as_doctor_again`: the first lever once more (the spread between two runs of the same thing);
- `lora_merged_out_of_place`: the merge `s3 train` does on a GPU (training.rollout.merge_lora; not in the committed runs);
- `static_compiled`: HF generate with a static KV cache, which transformers compiles (CUDA graphs), adapters merged,
  no log-prob recorder: an upper bound for a compiled transformers engine, not a path `s3 train` takes.
One JSON line per lever (written as each ends: a lever cut off by the time limit loses only itself).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from typing import Any

# (name, shared-prefix KV, LoRA merged for the rollout (True: peft's in-place merge_adapter; "product": the trainer's
# training.learn.weight_sync.lora_merged, out of place), rows multiplier)
LEVERS = [("as_doctor", True, False, 1), ("no_shared_prefix", False, False, 1), ("lora_merged", True, True, 1),
          ("lora_merged_no_shared_prefix", False, True, 1), ("lora_merged_2x_rows", True, True, 2),
          ("lora_merged_no_shared_prefix_2x_rows", False, True, 2), ("as_doctor_again", True, False, 1),
          ("lora_merged_out_of_place", True, "product", 1), ("static_compiled", False, True, 1)]


def _time_generate(sampler: Any, prompts: list[Any], tokens: int, temperature: float, sync: Any) -> dict[str, Any]:
    sampler.generate(prompts[:2], max_new_tokens=4, temperature=temperature)  # warm-up
    sync()
    t0 = time.perf_counter()
    outs = sampler.generate(prompts, max_new_tokens=tokens, temperature=temperature)
    sync()
    dt = time.perf_counter() - t0
    n = sum(len(o.token_ids or []) for o in outs)
    return {"rows": len(prompts), "policy_tokens": n, "seconds": round(dt, 2), "tokens_per_s": round(n / dt, 1)}


def _time_static(model: Any, tok_ids: list[list[int]], pad: int, tokens: int, temperature: float, device: str,
                 sync: Any) -> dict[str, Any]:
    import torch

    width = max(map(len, tok_ids))
    ids = torch.tensor([[pad] * (width - len(x)) + x for x in tok_ids], device=device)
    mask = (torch.arange(width, device=device)[None, :] >= torch.tensor([width - len(x) for x in tok_ids],
                                                                        device=device)[:, None]).long()
    kw = {"do_sample": temperature > 0, "temperature": temperature, "top_k": 0, "top_p": 1.0, "pad_token_id": pad,
          "cache_implementation": "static"}
    t0 = time.perf_counter()
    model.generate(input_ids=ids[:2], attention_mask=mask[:2], max_new_tokens=4, **kw)  # warm-up + compile
    kw["min_new_tokens"] = tokens  # every row the full length (random weights may end a row early)
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, **kw)  # compile at this batch
    sync()
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, **kw)
    sync()
    dt = time.perf_counter() - t0
    n = int(out.shape[0] * (out.shape[1] - width))
    return {"rows": len(tok_ids), "policy_tokens": n, "seconds": round(dt, 2), "tokens_per_s": round(n / dt, 1),
            "warmup_and_compile_seconds": round(warm, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", default="3b")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--work", type=Path, default=Path("/tmp/s3-levers"))
    ap.add_argument("--out", type=Path, default=Path("levers.jsonl"))
    ap.add_argument("--skip", default="", help="comma-separated levers not to run")
    a = ap.parse_args()

    import torch

    from s3.config import load_config
    from s3.doctor import RECIPE, SHAPES, _s3_prompts, save_shape_checkpoint
    from searcher.policy.base import TokenPrompt
    from training.learn.learner import Learner, autocast
    from training.learn.weight_sync import lora_merged

    model_dir, run_dir = a.work / f"shape_{a.shape}", a.work / "run"
    if not (model_dir / "config.json").is_file():
        save_shape_checkpoint(SHAPES[a.shape], a.device, model_dir)
    cfg = load_config([RECIPE], [f"training.base_model={model_dir}", f"training.output_dir={run_dir}",
                                 f"training.learner.device={a.device}", f"searcher.device={a.device}",
                                 "training.rollout.engine=transformers", "searcher.policy=transformers"])
    tc = cfg.training
    learner = Learner(tc, a.device, run_dir)
    policy, model = learner.policy, learner.model
    model.eval()
    _, ids = _s3_prompts(policy, a.rows, cfg.searcher.max_select)
    prompts = [TokenPrompt(x) for x in ids]
    temp = tc.rollout.temperature

    def sync() -> None:
        if a.device == "cuda":
            torch.cuda.synchronize()

    a.out.parent.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, a.skip.split(",")))
    header = {"lever": "setup", "shape": a.shape, "device": a.device, "prompt_tokens_mean": sum(map(len, ids)) / a.rows,
              "gpu": torch.cuda.get_device_name() if a.device == "cuda" else None, "torch": torch.__version__}
    a.out.write_text(json.dumps(header) + "\n")

    def record(lever: str, fn: Any) -> None:
        with torch.no_grad(), autocast(tc.learner.autocast, model):
            row = {"lever": lever, **fn()}
        print(json.dumps(row), flush=True)
        with a.out.open("a") as f:
            f.write(json.dumps(row) + "\n")

    policy.gen_batch = 2 * a.rows
    for lever, share, merge, mult in LEVERS:
        if lever in skip:
            continue
        policy.share_prefix = share
        with contextlib.ExitStack() as stack:
            if merge == "product":
                stack.enter_context(lora_merged(model))
            elif merge and hasattr(model, "merge_adapter"):  # a peft model (the recipe's LoRA learner)
                model.merge_adapter()
                stack.callback(model.unmerge_adapter)
            if lever == "static_compiled":
                record(lever, lambda: _time_static(model, ids, policy.pad_id, a.tokens, temp, a.device, sync))
            else:
                record(lever, lambda m=mult: _time_generate(policy, prompts * m, a.tokens, temp, sync))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
