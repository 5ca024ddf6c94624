"""The credit probe (issue 81, step 2): before a reader is trained on the frozen generator's credit, does that credit
find the gold paragraphs? On HotpotQA training questions the reader never trained on, each candidate page the reading
searcher would choose among (the question's own bm25 ranks 4-16 less the title-following script's pages) gets its
credit: the gain in log p(gold answer) when the generator sees it added to the script's pages. The table compares
how often each chooser's best candidate is a gold paragraph: the credit, bm25 order, and the gold-trained shipped
reader (reader-smollm2-135m-hotpotqa).

    .venv/bin/python benchmarks/selection_probe.py prepare     # HotpotQA training data + bm25 (runs/selection_probe/)
    S3_LLAMA_THREADS=1 .venv/bin/python benchmarks/credit_probe.py run --questions 200    # configs/reading.toml's run
    .venv/bin/python benchmarks/credit_probe.py report         # -> benchmarks/results/credit_probe/report.md
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from experiments import selection_probe as sp
from s3core.corpus import read_questions
from s3core.io import append_jsonl, iter_jsonl, write_json_atomic, write_text_atomic

__all__ = ["probe_order", "reader_trained_ids", "report", "run", "summarize"]

SEED = 0  # the selection probe's split: its first 200 shuffled questions were held out from the shipped reader
HELD = 200


def reader_trained_ids(work: Path) -> set[str]:
    """The ids of the 200 training questions the shipped reader was trained on (benchmarks/selection_probe.py's split,
    seed 0: the 200 after the 200 it held out)."""
    shuffled, _ = sp.split_questions(read_questions(work / "data" / "questions.jsonl"), 10**9, 0, SEED)
    return {q.id for q in shuffled[HELD:2 * HELD]}


def probe_order(work: Path) -> dict[str, int]:
    """The selection probe's shuffled order of the training questions (its held-out 200 first): the probe takes its
    questions in this order."""
    shuffled, _ = sp.split_questions(read_questions(work / "data" / "questions.jsonl"), 10**9, 0, SEED)
    return {q.id: i for i, q in enumerate(shuffled)}


def run(config: Path, work: Path, out: Path, *, n: int, reader: str | None = "reader-smollm2-135m-hotpotqa",
        log: Callable[[str], None] = print) -> list[str]:
    """The credit of the first `n` training questions (of `config`'s reading run, configs/reading.toml) that the shipped
    reader never trained on and that have a gold and a non-gold candidate, scored into the run's own credit store (the
    probe's scoring is the training run's first questions), and the shipped reader's scores of the same candidates
    (OUT/reader.jsonl). Both resume. Returns the probe's question ids (OUT/questions.json)."""
    from s3.config import load_config
    from training.reading.trainer import ReadingRun

    cfg = load_config(config, [])
    rr = ReadingRun(cfg, log=log)
    train, held, retriever, titled = rr._data()
    seen = reader_trained_ids(work)
    order = probe_order(work)
    pool = sorted((q for q in [*train, *held] if q.id not in seen and q.id in order), key=lambda q: order[q.id])
    cands = rr._candidates(retriever, pool, titled)
    # only the questions with a gold page among the candidates can say whether the credit finds it (about one in
    # five: the script's start already holds the others' gold pages): the first `n` of them, in the shuffled order
    qs = [q for q in pool if any(cands[q.id].gold) and not all(cands[q.id].gold)][:n]
    log(f"probe: {len(qs)} questions with a gold and a non-gold candidate (of {len(pool)} the reader never trained on)")
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "questions.json", {"config": config.name, "ids": [q.id for q in qs]})
    if reader:
        path = out / "reader.jsonl"
        done = {r["id"]: r["candidates"] for _, r in iter_jsonl(path, torn_tail="skip")} if path.exists() else {}
        todo = [q for q in qs if done.get(q.id) != [d.id for d in cands[q.id].candidates]]
        if todo:
            from searcher.policies import HOME
            from searcher.title_following.reader import PointwiseReader

            where = HOME / reader
            r = PointwiseReader.load(str(where) if where.is_dir() else reader, threads=rr.r.threads)
            t0 = time.perf_counter()
            for i, q in enumerate(todo, 1):
                c = cands[q.id].candidates
                append_jsonl(path, [{"id": q.id, "candidates": [d.id for d in c],
                                     "scores": [round(x, 4) for x in r.scores(q.question, c)]}])
                if i % 20 == 0 or i == len(todo):
                    log(f"reader: {i}/{len(todo)} questions, {(time.perf_counter() - t0) / i:.1f} s each")
    rr.credit(qs, cands)
    return [q.id for q in qs]


def _best(scores: Sequence[float]) -> int:
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def _auc(scores: Sequence[float], gold: Sequence[bool]) -> float | None:
    """P(a gold candidate scores above a non-gold one), ties half."""
    g = [s for s, y in zip(scores, gold, strict=True) if y]
    o = [s for s, y in zip(scores, gold, strict=True) if not y]
    if not g or not o:
        return None
    return sum((a > b) + 0.5 * (a == b) for a in g for b in o) / (len(g) * len(o))


def summarize(credit_rows: Sequence[dict[str, Any]], reader_rows: dict[str, list[float]]) -> dict[str, Any]:
    """The probe table: over questions with a gold and a non-gold candidate, how often each chooser's first choice is
    gold, and its AUC; plus what the credit says of gold and other pages."""
    rows = [r for r in credit_rows if any(r["gold"]) and not all(r["gold"])]
    choosers: dict[str, Callable[[dict[str, Any]], Sequence[float]]] = {
        "credit (generator's gain)": lambda r: r["gains"],
        "bm25 order": lambda r: [-float(x) for x in r["ranks"]],
        "gold-trained reader (shipped)": lambda r: reader_rows.get(r["id"], []),
    }
    from eval.stats import paired_diff_ci

    table: dict[str, dict[str, Any]] = {}
    picks: dict[str, dict[str, float | None]] = {}
    for name, f in choosers.items():
        usable = [r for r in rows if len(f(r)) == len(r["gold"])]
        picks[name] = {r["id"]: float(r["gold"][_best(f(r))]) for r in usable}
        hits = [float(x) for x in picks[name].values() if x is not None]
        aucs = [a for r in usable if (a := _auc(f(r), r["gold"])) is not None]
        table[name] = {"questions": len(usable), "best_is_gold": round(statistics.fmean(hits), 3) if hits else None,
                       "auc": round(statistics.fmean(aucs), 3) if aucs else None}
    credit = next(iter(choosers))
    for name in list(choosers)[1:]:  # the credit's first pick against each other chooser's, paired by question
        d = paired_diff_ci(picks[credit], picks[name])
        if d["n"]:
            table[name]["credit_minus_this"] = {"diff": round(d["diff"], 3), "ci95": [round(x, 3) for x in d["ci95"]],
                                                "wins": d["wins"], "losses": d["losses"], "n": d["n"]}
    table["random"] = {"questions": len(rows),
                       "best_is_gold": round(statistics.fmean(sum(r["gold"]) / len(r["gold"]) for r in rows), 3)
                       if rows else None, "auc": 0.5}
    gold_g = [g for r in credit_rows for g, y in zip(r["gains"], r["gold"], strict=True) if y]
    other_g = [g for r in credit_rows for g, y in zip(r["gains"], r["gold"], strict=True) if not y]
    cost = [r["computed_tokens"] for r in credit_rows]
    secs = [r["seconds"] for r in credit_rows]
    return {
        "questions_scored": len(credit_rows), "questions_with_gold_and_other": len(rows),
        "questions_without_gold_candidate": sum(not any(r["gold"]) for r in credit_rows),
        "choosers": table,
        "gain_gold": {"n": len(gold_g), "mean": round(statistics.fmean(gold_g), 3) if gold_g else None,
                      "positive": round(sum(g > 0 for g in gold_g) / len(gold_g), 3) if gold_g else None},
        "gain_other": {"n": len(other_g), "mean": round(statistics.fmean(other_g), 3) if other_g else None,
                       "positive": round(sum(g > 0 for g in other_g) / len(other_g), 3) if other_g else None},
        "candidates_per_question": round(statistics.fmean(len(r["gains"]) for r in credit_rows), 2) if credit_rows else None,
        "computed_tokens_per_question": round(statistics.fmean(cost)) if cost else None,
        "prompt_tokens_per_question": round(statistics.fmean(r["prompt_tokens"] for r in credit_rows)) if credit_rows else None,
        "seconds_per_question": {"median": round(statistics.median(secs), 1), "min": round(min(secs), 1),
                                 "max": round(max(secs), 1)} if secs else None,
    }


def report(out: Path, credit: Path, generator: str) -> dict[str, Any]:
    """OUT/report.json and report.md: the probe's questions (OUT/questions.json) as scored in `credit` (the run's
    credit store)."""
    readers = ({r["id"]: r["scores"] for _, r in iter_jsonl(out / "reader.jsonl", torn_tail="skip")}
               if (out / "reader.jsonl").exists() else {})
    ids = set(json.loads((out / "questions.json").read_text())["ids"])
    rows = [r for n, (_, r) in enumerate(iter_jsonl(credit, torn_tail="skip")) if n > 0 and r["id"] in ids]
    res: dict[str, Any] = {generator: summarize(rows, readers)}
    write_json_atomic(out / "report.json", res)
    _plot(rows, out / "credit.png", generator)
    lines = ["# The credit probe: does the frozen generator's gain find the gold paragraphs?", "",
             "HotpotQA training questions the shipped reader never trained on (benchmarks/selection_probe.py's split), "
             "those with a gold and a non-gold candidate; the candidates are the question's bm25 ranks 4-16 less the title-following script's pages (what the "
             "reading searcher chooses among). Over the questions with a gold and a non-gold candidate: how often each "
             "chooser's first choice is gold, and its AUC (a gold candidate above a non-gold one). Source: "
             "`benchmarks/credit_probe.py` (experiments/credit_probe.py).", ""]
    for gen, s in res.items():
        lines += [f"## Credit from {gen}", "",
                  f"{s['questions_scored']} questions scored, {s['questions_with_gold_and_other']} with a gold and a "
                  f"non-gold candidate ({s['questions_without_gold_candidate']} have no gold among the candidates).", "",
                  "| chooser | questions | best is gold | AUC | credit − this: best is gold, paired 95% (wins / losses) |",
                  "| --- | ---: | ---: | ---: | --- |"]
        for name, t in s["choosers"].items():
            d = t.get("credit_minus_this")
            vs = (f"{d['diff']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] ({d['wins']} / {d['losses']})"
                  if d else "")
            lines.append(f"| {name} | {t['questions']} | {t['best_is_gold']} | {t['auc']} | {vs} |")
        gg, go = s["gain_gold"], s["gain_other"]
        sec = s["seconds_per_question"] or {}
        lines += ["", f"- gain in log p(answer), gold pages: mean {gg['mean']}, positive {gg['positive']} (n={gg['n']}); "
                  f"other pages: mean {go['mean']}, positive {go['positive']} (n={go['n']})",
                  f"- cost: {s['candidates_per_question']} candidates a question; {s['prompt_tokens_per_question']} "
                  f"prompt tokens scored, {s['computed_tokens_per_question']} run through the model (the shared prefix "
                  f"once); {sec.get('median')} s a question (median; {sec.get('min')}-{sec.get('max')})", ""]
    write_text_atomic(out / "report.md", "\n".join(lines) + "\n")
    return res


def _plot(rows: Sequence[dict[str, Any]], path: Path, generator: str) -> None:
    """credit.png: the credit of gold pages against the other candidates (histograms, nats)."""
    gold = [g for r in rows for g, y in zip(r["gains"], r["gold"], strict=True) if y]
    other = [g for r in rows for g, y in zip(r["gains"], r["gold"], strict=True) if not y]
    if not gold or not other:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lo, hi = min(gold + other), max(gold + other)
    bins = [lo + (hi - lo) * i / 40 for i in range(41)]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.hist(other, bins=bins, alpha=0.6, density=True, label=f"other candidates (n={len(other)})")
    ax.hist(gold, bins=bins, alpha=0.6, density=True, label=f"gold paragraphs (n={len(gold)})")
    ax.set_xlabel(f"credit: gain in log p(gold answer) from {generator} (nats)")
    ax.set_ylabel("density")
    ax.set_title("does the generator's credit find the gold paragraphs?")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def dump(res: dict[str, Any]) -> str:
    return json.dumps(res, indent=2)
