"""The reward landscape of a training set: the frozen generator's accuracy under different contexts.

    .venv/bin/python benchmarks/reward_landscape.py [--config configs/cpu_train.toml] [--set key=value ...] \
        [--sample 200] [--out benchmarks/results/transfer/reward_landscape_qwen05]

Before training a searcher for a generator, it is worth knowing what any searcher could gain. For the training
questions of the config (the held-out ones excluded) this prints the generator's mean accuracy (the training metric)
with: naive RAG's top-k, a deeper top-2k, the gold supporting paragraphs (metadata.supporting_ids), top-k plus the
gold paragraphs, and one random document of the top-k. Calls go through the config's generator and its response
cache, so a second run is free. If the gold paragraphs do not beat top-k, GBR has little to reward; the share of
questions the generator fails even from the gold paragraphs is the share of GRPO groups that are flat whatever the
searcher does (`training.data.keep_answerable` drops them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "configs" / "cpu_train.toml"))
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", type=int, default=None, help="a random sample of this many training questions (seeded)")
    ap.add_argument("--out", type=Path, default=None, help="also write OUT.md and OUT.json")
    args = ap.parse_args()

    from s3.config import load_config
    from searcher.retrieval import load_retriever
    from training.data import load_training_set, make_accuracy

    cfg = load_config(args.config, args.overrides)
    data = load_training_set(cfg)
    held = cfg.training.heldout.questions
    examples = data.examples[:-held] if 0 < held < len(data.examples) else data.examples
    if args.sample and args.sample < len(examples):
        examples = random.Random(args.seed).sample(examples, args.sample)
    retriever = load_retriever(cfg.retriever, data.index_dir)
    k = cfg.retriever.k
    questions = [e.question for e in examples]
    golden = [e.golden_answers for e in examples]
    deep = retriever.search(questions, 2 * k)
    gold = [retriever.get(e.supporting_ids) if e.supporting_ids else [] for e in examples]
    rng = random.Random(args.seed)
    variants = {
        f"naive RAG top-{k}": [d[:k] for d in deep],
        f"top-{2 * k}": deep,
        "gold supporting paragraphs": gold,
        f"top-{k} + gold paragraphs (at most {2 * k})": [
            (d[:k] + [g for g in gs if g.id not in {x.id for x in d[:k]}])[: 2 * k] for d, gs in zip(deep, gold, strict=True)
        ],
        f"one random document of the top-{k}": [rng.sample(d[:k], 1) if d else [] for d in deep],
    }
    accuracy = make_accuracy(cfg)
    sampled = f" (a seeded sample of {len(examples)})" if args.sample else ""
    lines = [
        f"{len(examples)} training questions{sampled}, generator {cfg.generator.model}, metric {cfg.eval.metric}, "
        f"retriever {cfg.retriever.backend}",
        "",
        "| context | docs | Acc | questions answered |",
        "| --- | ---: | ---: | ---: |",
    ]
    print("\n".join(lines), flush=True)
    rows = []
    for name, docs in variants.items():
        acc = asyncio.run(accuracy(questions, docs, golden))
        ok = [a for a in acc if a is not None]
        mean_docs = sum(len(d) for d in docs) / max(len(docs), 1)
        missing = f" ({len(acc) - len(ok)} calls failed)" if len(ok) < len(acc) else ""
        line = f"| {name} | {mean_docs:.2f} | {sum(ok) / max(len(ok), 1):.3f} | {int(sum(ok))} of {len(ok)}{missing} |"
        lines.append(line)
        print(line, flush=True)
        rows.append({"context": name, "mean_docs": mean_docs, "acc": sum(ok) / max(len(ok), 1), "answered": int(sum(ok)),
                     "scored": len(ok), "failed": len(acc) - len(ok), "per_question": dict(zip([e.id for e in examples], acc, strict=True))})
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        cmd = " ".join(["benchmarks/reward_landscape.py", *sys.argv[1:]])
        args.out.with_suffix(".md").write_text(f"`{cmd}`\n\n" + "\n".join(lines) + "\n")
        args.out.with_suffix(".json").write_text(json.dumps({
            "command": cmd, "generator": cfg.generator.model, "metric": cfg.eval.metric, "k": k,
            "questions": len(examples), "sample_seed": args.seed if args.sample else None, "variants": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
