"""The selection probe (issue 60, build step 2): can a searcher this size read? Selection alone, supervised.

    .venv/bin/python benchmarks/selection_probe.py prepare          # HotpotQA train data + bm25 (runs/selection_probe/)
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/selection_probe.py run --model smollm2-135m-instruct \
        --train 800 --heldout 200 --epochs 1                        # -> benchmarks/results/selection_probe/<model>/
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/selection_probe.py run --model qwen2.5-coder-0.5b-instruct --lora 16
    ... run --reader pointwise ...                                  # one document a prompt (a cross-encoder), yes / no
    ... run --reader pointwise --save --tag pointwise               # keep it: runs/selection_probe/readers/<model>-<tag>
    ... run --reader pointwise --windows leftover --from-reader smollm2-135m-instruct-pointwise --train 1000 \
        --batch 2 --lr 3e-5 --tag pointwise-leftover --save         # trained further on what the script leaves
    ... --windows leftover --loss bce --negatives 1                 # scores that can abstain (windows with no gold too)

Windows (experiments/selection_probe.py): the question's own bm25 top-8 and a gold title query's top-8 over the
training questions' paragraphs (../shared/data/train_hotpotqa1200), shown shuffled; the questions are split after a
seeded shuffle, the held-out ones never trained on. The student (the offline GGUF converted to torch by the project's
loader) scores a window from the logits of its first id token and is trained with the listwise gold-mass loss; the
report is held-out gold recall at 2 for the student, selecting by position and by bm25 order, per window kind and
gold rank, with the training time per example: report.md / report.json beside the loss curve (loss.png). The
pointwise reader (`--reader pointwise`) scores each document in its own prompt from logit(yes) - logit(no); every run
also reports the headroom case, the choice among a question window's bm25 ranks 4-8 (`sp.tail_table`).
`--windows leftover` trains and scores on what a reader started where the script ends chooses from: the question's own
ranks 4-16 less the title-following script's documents (`sp.leftover_window`), with gold recall at 1 as well;
`benchmarks/transfer_checks.py read` turns a saved reader into that searcher's contexts.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from experiments import selection_probe as sp
from experiments.s3cli import run_s3
from searcher.title_following.reader import yes_no_token_ids

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT.parent / "shared" / "data" / "train_hotpotqa1200" / "hotpot_train.jsonl"
WORK = ROOT / "runs" / "selection_probe"  # data and index: rebuilt, never committed
RESULTS = ROOT / "benchmarks" / "results" / "selection_probe"
READERS = WORK / "readers"  # --save: trained readers, for a searcher that selects with one


def prepare() -> None:
    data, index = WORK / "data", WORK / "index"
    if not (data / "corpus.jsonl").is_file():
        run_s3("data", "prepare", "hotpotqa", "--input", str(RAW), "--out", str(data))
    if not index.is_dir():
        run_s3("index", "build", "--corpus", str(data / "corpus.jsonl"), "--out", str(index))


def _windows(train: int, heldout: int, seed: int, kind: str = "window", negatives: float = 0.0
             ) -> tuple[list[sp.Window], list[sp.Window]]:
    """(training, held-out) windows. leftover: held-out ones hold a gold (the selection tables need one); training
    ones too, plus `negatives` x as many without a gold (drawn by `seed`), for the pointwise loss."""
    from s3core.corpus import iter_corpus, read_questions
    from searcher.config import RetrieverConfig
    from searcher.retrieval import load_retriever

    if not (WORK / "index").is_dir():
        raise SystemExit("run `benchmarks/selection_probe.py prepare` first")
    held_q, train_q = sp.split_questions(read_questions(WORK / "data" / "questions.jsonl"), heldout, train, seed)
    titles = {d.id: d.title for d in iter_corpus(WORK / "data" / "corpus.jsonl")}
    bm25 = load_retriever(RetrieverConfig(), WORK / "index")
    if kind == "leftover":  # what a reader started where the script ends chooses from (transfer_checks.py read)
        from experiments.transfer import checks as tc

        index = tc.TitleIndex.of(titles.values())

        def leftover(qs: list[Any], rng: random.Random, negatives: float) -> list[sp.Window]:
            ranked = bm25.search([q.question for q in qs], sp.LEFTOVER_LAST)
            gold: list[sp.Window] = []
            none: list[sp.Window] = []
            for q, r in zip(qs, ranked, strict=True):
                h = tc.title_following_documents(q.question, r[:3], bm25.search, index)
                w = sp.leftover_window(q, h.documents, r, rng, any_gold=negatives > 0)
                if w is not None:
                    (gold if any(w.gold) else none).append(w)
            extra = rng.sample(none, min(len(none), round(negatives * len(gold))))
            at = {q.id: i for i, q in enumerate(qs)}
            return sorted(gold + extra, key=lambda w: at[w.question_id])

        return (leftover(train_q, random.Random(seed), negatives),
                leftover(held_q, random.Random(seed + 1), 0.0))
    return (sp.build_windows(train_q, bm25.search, titles, seed=seed),
            sp.build_windows(held_q, bm25.search, titles, seed=seed + 1))


def _reused_untrained(folder: Path, model: str, seed: int, held_w: list[sp.Window], reader: str
                      ) -> tuple[dict[str, Any], float, dict[str, Any] | None]:
    path = folder / "report.json"
    if not path.is_file():
        raise SystemExit(f"--untrained-from {folder}: no report.json there")
    report = json.loads(path.read_text(encoding="utf-8"))
    try:
        table, held_s = sp.reuse_untrained(report, model, seed, held_w, reader)
        return table, held_s, report.get("tail_untrained")
    except ValueError as e:
        raise SystemExit(f"--untrained-from {folder}: {e}") from None


def run(model: str, train: int, heldout: int, epochs: int, lr: float, batch: int, lora: int, seed: int,
        tag: str = "", untrained_from: Path | None = None, reader: str = "listwise", save: bool = False,
        kind: str = "window", from_reader: str | None = None, loss: str = "listwise", negatives: float = 0.0
        ) -> dict[str, Any]:
    import torch

    from s3core.devices import steady_malloc
    from searcher.policy.transformers_policy import TransformersPolicy

    steady_malloc()  # before the model loads: without it the training grew past 24 GB on this CPU (docs/transfer.md)
    torch.manual_seed(seed)
    train_w, held_w = _windows(train, heldout, seed, kind, negatives)
    if untrained_from is not None:  # the first of the two held-out passes, reused (~8 s a window for the 0.5B)
        before, held_s, tail_before = _reused_untrained(untrained_from, model, seed, held_w, reader)
    t0 = time.perf_counter()
    start = READERS / from_reader if from_reader else None
    if start is not None and not (start / "config.json").is_file():
        raise SystemExit(f"--from-reader {from_reader}: no saved reader in {start.relative_to(ROOT)} (run --save)")
    policy = TransformersPolicy.load(str(start) if start is not None else model)
    load_s = time.perf_counter() - t0
    net = policy.model
    if lora:
        from peft import LoraConfig, get_peft_model

        net = get_peft_model(net, LoraConfig(r=lora, lora_alpha=2 * lora, target_modules="all-linear"))
    tok = policy.tokenizer
    encode = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    student = (sp.PointwiseStudent(net, encode, yes_no_token_ids(tok), pad_id=policy.pad_id, loss=loss)
               if reader == "pointwise" else sp.Student(net, encode, sp.id_token_ids(tok), pad_id=policy.pad_id))
    net.eval()
    if untrained_from is None:
        print(f"scoring {len(held_w)} held-out windows untrained (~1.4 s a window for the 135M pointwise reader, "
              "~8 s for the 0.5B listwise one)", flush=True)
        t0 = time.perf_counter()
        held_scores = student.scores(held_w)
        before, tail_before = sp.selection_table(held_w, held_scores), sp.tail_table(held_w, held_scores)
        before_at1 = sp.selection_table(held_w, held_scores, m=1) if kind == "leftover" else None
        held_s = (time.perf_counter() - t0) / max(len(held_w), 1)
    curve: list[dict[str, float]] = []
    steps = epochs * -(-len(train_w) // batch)

    def log(row: dict[str, float]) -> None:
        curve.append(row)
        if row["step"] % 25 == 0 or row["step"] == steps:
            recent = [c["loss"] for c in curve[-25:]]
            left = (steps - row["step"]) * batch * statistics.median(student.times[-25:])
            print(f"step {row['step']}/{steps}: loss {statistics.fmean(recent):.3f} (last 25), "
                  f"{row['s_per_example']:.2f} s an example, ~{left / 60:.0f} min left", flush=True)

    print(f"{len(train_w)} training windows, {len(held_w)} held-out; model loaded in {load_s:.0f} s", flush=True)
    # --train 0: the untrained student only (what a model reads zero-shot), no training and no second pass
    losses = student.train(train_w, epochs=epochs, lr=lr, batch=batch, seed=seed, log=log) if train_w else []
    if train_w:
        print(f"scoring {len(held_w)} held-out windows trained", flush=True)
    after_scores = student.scores(held_w) if train_w else None
    after = sp.selection_table(held_w, after_scores) if after_scores is not None else None
    out = {
        "model": model, "reader": reader, "lora_r": lora or None, "train_windows": len(train_w),
        "heldout_windows": len(held_w), "heldout_questions": heldout, "train_questions": train,  # what it has seen
        "epochs": epochs, "lr": lr, "batch": batch, "seed": seed, "select": sp.SELECT, "load_s": round(load_s, 1),
        "s_per_heldout_window": round(held_s, 2),
        "s_per_example": statistics.median(student.times) if student.times else None,
        "loss_first_50": statistics.fmean(losses[:50]) if losses else None,
        "loss_last_50": statistics.fmean(losses[-50:]) if losses else None,
        "untrained": before, "trained": after,
        "tail_untrained": tail_before,
        "tail_trained": sp.tail_table(held_w, after_scores) if after_scores is not None else None,
        "untrained_from": untrained_from.relative_to(ROOT).as_posix() if untrained_from else None,
        "windows": kind, "from_reader": from_reader, "loss": loss, "negatives": negatives,
        "train_windows_without_gold": sum(not any(w.gold) for w in train_w),
    }
    if kind == "leftover":
        out["untrained_at1"] = before_at1
        out["trained_at1"] = sp.selection_table(held_w, after_scores, m=1) if after_scores is not None else None
    folder = RESULTS / (f"{model}-{tag}" if tag else model)
    folder.mkdir(parents=True, exist_ok=True)
    if save and train_w:  # the trained reader (weights or LoRA adapter, with its tokenizer): runs/, never committed
        kept = READERS / folder.name
        net.save_pretrained(kept)
        tok.save_pretrained(kept)
        out["saved_to"] = kept.relative_to(ROOT).as_posix()
        print(f"the trained reader is in {kept}", flush=True)
    (folder / "report.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    (folder / "curve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve), encoding="utf-8")
    (folder / "report.md").write_text("\n".join(sp.report_lines(out)) + "\n", encoding="utf-8")
    if curve:
        _plot(curve, folder / "loss.png", model)
    print("\n".join(sp.report_lines(out)))
    return out


def _plot(curve: list[dict[str, float]], path: Path, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ys = [c["loss"] for c in curve]
    win = max(1, len(ys) // 20)
    ax.plot([statistics.fmean(ys[max(0, i - win):i + 1]) for i in range(len(ys))])
    ax.set_xlabel("step")
    ax.set_ylabel("listwise loss (running mean)")
    ax.set_title(f"selection probe: {model}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="stage", required=True)
    sub.add_parser("prepare", help="HotpotQA training data and its bm25 index")
    r = sub.add_parser("run", help="train selection alone and report held-out gold recall")
    r.add_argument("--model", default="smollm2-135m-instruct")
    r.add_argument("--train", type=int, default=800, help="training questions (about 2 windows each)")
    r.add_argument("--heldout", type=int, default=200, help="held-out questions")
    r.add_argument("--epochs", type=int, default=1)
    r.add_argument("--lr", type=float, default=2e-5)
    r.add_argument("--batch", type=int, default=4)
    r.add_argument("--lora", type=int, default=0, help="LoRA rank (0 = full fine-tuning; use it for the 0.5B)")
    r.add_argument("--reader", choices=("listwise", "pointwise"), default="listwise",
                   help="listwise: one prompt a window, read from its first id token (FIRST); pointwise: one prompt "
                        "a document, scored logit(yes) - logit(no), trained with the same listwise loss")
    r.add_argument("--save", action="store_true",
                   help="keep the trained reader in runs/selection_probe/readers/<model>-<tag>/ (not committed)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--tag", default="", help="results go to <model>-<tag>/ (another setting beside the first)")
    r.add_argument("--untrained-from", type=Path, default=None,
                   help="a results folder of a --train 0 run of the same model, seed and --heldout: its untrained "
                        "column is reused instead of scoring the held-out windows twice")
    r.add_argument("--windows", choices=("window", "leftover"), default="window",
                   help="window: the question's own and a gold title's bm25 top-8; leftover: the question's own ranks "
                        "4-16 less the title-following script's documents (what a reader started where the script "
                        "ends chooses from; windows holding a gold only)")
    r.add_argument("--from-reader", default=None, metavar="TAG",
                   help="start from a saved reader (runs/selection_probe/readers/TAG) instead of the base model")
    r.add_argument("--loss", choices=tuple(sp.LOSSES), default="listwise",
                   help="listwise: the gold's share of a window's softmax (ranks within a window); bce (pointwise "
                        "reader only): each document's score against its label, the same meaning in every window, so "
                        "a threshold can abstain")
    r.add_argument("--negatives", type=float, default=0.0,
                   help="leftover windows with --loss bce: add this many windows without a gold per window with one")
    a = ap.parse_args()
    if a.stage == "prepare":
        prepare()
    else:
        if (a.loss == "bce" and a.reader != "pointwise") or (a.negatives and (a.loss != "bce"
                                                                               or a.windows != "leftover")):
            raise SystemExit("--loss bce is the pointwise reader's; --negatives needs --loss bce --windows leftover "
                             "(a window without a gold has no listwise loss)")
        if a.windows == "leftover" and a.untrained_from:
            raise SystemExit("--untrained-from reuses a report of the window kind's held-out windows, not leftover "
                             "ones")
        run(a.model, a.train, a.heldout, a.epochs, a.lr, a.batch, a.lora, a.seed, a.tag,
            a.untrained_from.resolve() if a.untrained_from else None, a.reader, a.save, a.windows, a.from_reader,
            a.loss, a.negatives)
    return 0


if __name__ == "__main__":
    sys.exit(main())
