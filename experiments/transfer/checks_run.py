"""The zero-training checks' stages (issue 45, build step 1; docs/transfer.md "Attempt 3"), the command line of
benchmarks/transfer_checks.py: every stage resumes where it stopped.

    .venv/bin/python benchmarks/transfer_checks.py prepare    # hotpotqa_dev500 data + bm25 index (runs/transfer3/),
                                                              # the contexts files of A1, A2, the script and its
                                                              # controls, their stats
    S3_LLAMA_THREADS=2 .venv/bin/python benchmarks/transfer_checks.py run METHOD --generator qwen15 --limit 300
    .venv/bin/python benchmarks/transfer_checks.py max-tokens --generator qwen15 --limit 100 --measure-at 48
    .venv/bin/python benchmarks/transfer_checks.py reach      # contexts/reach.json: where the missing gold could be
                                                              # reached (the question's own ranks, a perfect selector)
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/transfer_checks.py read  # a trained reader's picks where the
                                                              # script ends, and the rankers over it (--ship: the
                                                              # no-reading one users run, searcher/policies/
                                                              # links-hotpotqa.json)
    .venv/bin/python benchmarks/transfer_checks.py report     # report.md, report.json, checks.png
    S3_LLAMA_THREADS=2 .venv/bin/python benchmarks/transfer_checks.py run naive_rag_top3 --dataset musique_dev200 \
        --limit 100                                           # the other datasets (2wiki_dev200 too): own data,
                                                              # index, runs under checks/<dataset>/runs/
    S3_LLAMA_THREADS=2 .venv/bin/python benchmarks/transfer_checks.py run title_following_ranker1 --dataset \
        2wiki_dev200 --generator qwen05 --limit 164 --documents-from qwen15  # the script's documents as the 1.5B
                                                              # run recorded them, answered by the 0.5B

METHOD: a name of the table below (experiments/transfer/methods.py). Each is one resumable `s3 eval` run
(configs/transfer3.toml; GenAcc = span check, else the 0.5B judge) in
benchmarks/results/transfer3/checks/runs/<generator>/<METHOD>/ (the folder of a renamed method keeps its old name):
run the same command again and it resumes; a larger --limit extends it. The contexts files cover all 500 questions,
so their runs' identity does not change with --limit. A finished run is left as it is (`= GEN/METHOD: N questions
already scored`); the runs of title_following_links1 / _ranker1 / _reader made before the reading searcher had its own
kind (--method title_following, searcher.read_last) are finished runs the report reads: extending one is refused by
`s3 eval` (another identity: --method searcher, searcher.kind = "reading"). The logic: experiments/transfer/checks.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, NamedTuple

from experiments.s3cli import run_s3
from experiments.transfer import checks as tc
from experiments.transfer import methods as tm
from s3core.errors import DataFormatError
from s3core.io import read_jsonl, stored
from searcher.title_following import TitleFollowingSearcher

ROOT = Path(__file__).resolve().parents[2]

CONFIG = ROOT / "configs" / "transfer3.toml"
RAW = ROOT.parent / "shared" / "data" / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"
HOTPOT = tm.CONTEXTS_DATASET
WORK = ROOT / "runs" / "transfer3" / HOTPOT  # data and index: rebuilt, never committed
RESULTS = ROOT / "benchmarks" / "results" / "transfer3" / "checks"
GENERATORS = {"qwen15": "local/qwen2.5-coder-1.5b-instruct", "qwen05": "local/qwen2.5-coder-0.5b-instruct"}
CAPS = (16, 32, 48)
# the other datasets, for the table's live methods (`run METHOD --dataset NAME`): each its own bm25 index over
# its own paragraphs, its runs under RESULTS/<NAME>/runs/<generator>/<METHOD>
OTHER = {"musique_dev200": ("musique", ROOT.parent / "shared" / "data" / "musique_dev200" / "musique.json"),
         "2wiki_dev200": ("2wiki", ROOT.parent / "shared" / "data" / "2wiki_dev200" / "wikihop.json")}
SCRIPT = "title_following"  # the title-following script: the checks' control, and the base of its controls
PRUNED, PLUS_GOLD, PLUS_GOLD16, PLUS_NEXT = (f"{SCRIPT}_{x}" for x in ("pruned", "plus_gold", "plus_gold16", "plus_next"))
READER, READER1 = f"{SCRIPT}_plus_reader", f"{SCRIPT}_plus_reader1"


def _contexts_file(name: str) -> Path:
    """Where method `name`'s contexts file of hotpotqa_dev500 is (under its stored name; FILE.jsonl.gz where only that
    is kept)."""
    return stored(RESULTS / "contexts" / f"{tm.stored_name(name)}.jsonl")


def _write_contexts(path: Path, rows: list[dict[str, Any]]) -> None:
    """A contexts file written again (`prepare`, `read`): FILE.jsonl, and its compressed copy FILE.jsonl.gz (how the
    committed ones are kept, `gzip -9 -n`) removed, so one copy of the rows is left and readers see the new one."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    path.with_name(path.name + ".gz").unlink(missing_ok=True)


def _cfg() -> Any:
    from s3.config import load_config

    return load_config(str(CONFIG))


def prepare(words: int, cap: int, k: int) -> dict[str, Any]:
    """Data, index, and the contexts files of A1, A2, the script and its controls for every question (no generator
    call)."""
    data, index = WORK / "data", WORK / "index"
    if not (data / "corpus.jsonl").is_file():
        run_s3("data", "prepare", "hotpotqa", "--input", str(RAW), "--out", str(data))
    if not index.is_dir():
        run_s3("index", "build", "--config", str(CONFIG), "--corpus", str(data / "corpus.jsonl"), "--out", str(index))
    from eval.harness import load_dataset
    from s3core.corpus import iter_corpus
    from searcher.retrieval import load_retriever

    cfg = _cfg()
    qs = load_dataset(data).questions
    retriever = load_retriever(cfg.retriever, index)
    titles = tc.TitleIndex.of(d.title for d in iter_corpus(data / "corpus.jsonl"))
    tops = retriever.search([q.question for q in qs], cfg.retriever.k)
    windows = retriever.search([q.question for q in qs], tc.READ_LAST)  # what a selector after the script reads
    # the control is the product's title-following searcher at the checks' settings (one span turn, cap, k a span, the
    # visible words): one batched call per step over all questions
    script = _script(retriever, titles, words, cap, k)
    followed, _ = script.follow([q.question for q in qs])
    out = RESULTS / "contexts"
    out.mkdir(parents=True, exist_ok=True)
    a1_rows: list[dict[str, Any]] = []
    a2_rows: list[dict[str, Any]] = []
    h_rows: list[dict[str, Any]] = []
    p_rows: list[dict[str, Any]] = []
    place_rows: list[dict[str, Any]] = []
    g_rows: list[dict[str, Any]] = []
    n_rows: list[dict[str, Any]] = []
    g16_rows: list[dict[str, Any]] = []
    lacking = copyable = 0
    n_added_h = []
    for q, top, h, window in zip(qs, tops, followed, windows, strict=True):
        gold = [d for d in retriever.get(list(q.supporting_ids)) if d is not None]
        missing = [g for g in gold if g.id not in {d.id for d in top}]
        add = tc.copyable_gold(q.question, top, gold, words)
        place_rows.append({"id": q.id, "place": tc.missing_gold_place(q.question, top, gold, words),
                           "missing": [g.id for g in missing]})
        lacking += bool(missing)
        copyable += bool(add)
        a1_rows.append(tc.contexts_row(q.id, [*top, *add], added=[d.id for d in add], missing_gold=len(missing)))
        a2_rows.append(tc.contexts_row(q.id, tc.a2_documents(top, gold), added=[d.id for d in missing]))
        if [d.id for d in h.documents[:len(top)]] != [d.id for d in top]:
            raise SystemExit(f"{q.id}: the title-following searcher's D0 is not naive RAG's top-{len(top)}")
        n_added_h.append(len(h.documents) - len(top))
        h_rows.append(tc.contexts_row(q.id, h.documents, n_queries=len(h.queries), added_by=h.added_by))
        kept = tc.pruned_documents(h.documents, h.added_by, set(q.supporting_ids))
        p_rows.append(tc.contexts_row(q.id, kept, dropped=sorted(set(h.added_by) - {d.id for d in kept})))
        for rows, docs in ((g_rows, tc.plus_documents(h.documents, window, set(q.supporting_ids))),
                           (n_rows, tc.plus_documents(h.documents, window, add=1)),
                           (g16_rows, tc.plus_documents(h.documents, window, set(q.supporting_ids),
                                                        window=tc.READ_LAST))):
            rows.append(tc.contexts_row(q.id, docs, added=[d.id for d in docs[len(h.documents):]]))
    for name, rows in (("a1", a1_rows), ("a2", a2_rows), (SCRIPT, h_rows), (PRUNED, p_rows), (PLUS_GOLD, g_rows),
                       (PLUS_NEXT, n_rows), (PLUS_GOLD16, g16_rows), ("places", place_rows)):
        _write_contexts(out / f"{tm.stored_name(name)}.jsonl", rows)
    gold_ids = {q.id: set(q.supporting_ids) for q in qs}
    # stats.json keeps its keys (the script's under its old name, "heuristic_*"): report reads every one written
    h_gold_added = sum(bool(set(r["added_by"]) & gold_ids[r["id"]]) for r in h_rows)
    stats = {
        "questions": len(qs), "visible_words": words, "heuristic_cap": cap, "heuristic_k": k,
        "top3_lacks_gold": lacking, "a1_adds_copyable_gold": copyable,
        "a1_mean_docs": statistics.fmean(len(r["documents"]) for r in a1_rows),
        "a2_mean_docs": statistics.fmean(len(r["documents"]) for r in a2_rows),
        "heuristic_mean_docs": statistics.fmean(len(r["documents"]) for r in h_rows),
        "heuristic_mean_queries": statistics.fmean(r["n_queries"] for r in h_rows),
        "heuristic_questions_with_additions": sum(x > 0 for x in n_added_h),
        "heuristic_questions_adding_gold": h_gold_added,
        "missing_gold_places": {p: sum(r["place"] == p for r in place_rows) for p in tc.GOLD_PLACES},
        "heuristic_added_docs_gold_share": (
            sum(len(set(r["added_by"]) & gold_ids[r["id"]]) for r in h_rows) / max(sum(n_added_h), 1)),
        "heuristic_pruned_mean_docs": statistics.fmean(len(r["documents"]) for r in p_rows),
        "heuristic_pruned_questions_changed": sum(bool(r["dropped"]) for r in p_rows),
        **{f"{tm.stored_name(name)}_{k}": v for name, rows in ((PLUS_GOLD, g_rows), (PLUS_NEXT, n_rows),
                                                               (PLUS_GOLD16, g16_rows))
           for k, v in (("mean_docs", statistics.fmean(len(r["documents"]) for r in rows)),
                        ("questions_changed", sum(bool(r["added"]) for r in rows)))},
    }
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(stats, indent=2))
    return stats


PROBE = ROOT / "runs" / "selection_probe"  # benchmarks/selection_probe.py: its training-question data, index, readers
PROBE_RESULTS = ROOT / "benchmarks" / "results" / "selection_probe"


def _script(retriever: Any, titles: tc.TitleIndex, words: int = tc.VISIBLE_WORDS, cap: int = tc.DOC_CAP,
            k: int = tc.SPAN_K) -> TitleFollowingSearcher:
    """The control: the product's title-following searcher at the checks' settings (the METHODS table's
    title_following: one span turn, the document cap, k a span; `cap` and `k` as given), the visible words."""
    from s3.config import load_config

    cfg = load_config(str(CONFIG), list(tm.METHODS[SCRIPT].sets))
    return TitleFollowingSearcher(retriever, cfg.searcher.model_copy(update={"k": k, "context_cap": cap}),
                                  k0=cfg.retriever.k, titles=titles, words=words)


class Read(NamedTuple):
    """One question as the reader where the script ends sees it: the script's `TitleFollowing`, the candidates
    (`tc.read_candidates`), their ranks in the question's own bm25 list and the reader's scores."""

    question: Any
    script: Any
    candidates: list[Any]
    ranks: list[int]
    scores: list[float]


def _scored(reader: Any, name: str, qs: list[Any], data: Path, index: Path, cache: Path) -> list[Read]:
    """Per question of `qs` (corpus `data`, bm25 `index`), a `Read`. Scores are cached in `cache` one question a line
    (keyed by `name` and the question id, checked against the candidates' ids), so a stopped run resumes."""
    import time

    from s3core.corpus import iter_corpus
    from searcher.retrieval import load_retriever

    retriever = load_retriever(_cfg().retriever, index)
    titles = tc.TitleIndex.of(d.title for d in iter_corpus(data / "corpus.jsonl"))
    followed, _ = _script(retriever, titles).follow([q.question for q in qs])
    ranked = retriever.search([q.question for q in qs], tc.READ_LAST)
    done: dict[str, dict[str, Any]] = {}
    if cache.is_file():
        for line in cache.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else None
            if row and row.get("set") == name:
                done[row["id"]] = row
    out = []
    t0, fresh = time.perf_counter(), 0
    with cache.open("a", encoding="utf-8") as f:
        for i, (q, h, r) in enumerate(zip(qs, followed, ranked, strict=True)):
            cands = tc.read_candidates(h.documents, r)
            old = done.get(q.id)
            if old is not None and old["candidates"] == [d.id for d in cands]:
                scores = old["scores"]
            else:
                scores = reader.scores(q.question, cands)
                f.write(json.dumps({"set": name, "id": q.id, "candidates": [d.id for d in cands],
                                    "scores": scores}) + "\n")
                f.flush()
                fresh += 1
            rank = {d.id: n for n, d in enumerate(r, 1)}
            out.append(Read(q, h, cands, [rank[d.id] for d in cands], scores))
            if fresh and (i + 1) % 50 == 0:
                left = (time.perf_counter() - t0) / fresh * (len(qs) - i - 1)
                print(f"{name}: {i + 1}/{len(qs)} questions read, ~{left / 60:.0f} min left", flush=True)
    return out


RANKER1, LINKS1 = f"{SCRIPT}_plus_ranker1", f"{SCRIPT}_plus_links1"
RANKERS = {RANKER1: tc.RANKER_FEATURES, LINKS1: tc.NO_READING}
SHIPPED_RANKER = ROOT / "searcher" / "policies" / "links-hotpotqa.json"  # LINKS1's, as users run it
# read --ship-reader NAME: the reader as it ships (a float16 LoRA adapter in searcher/policies/NAME/), the ranker fitted
# over its scores (this contexts control, composed over RANKER1's run) and, with --ship, that ranker as users run it
# (searcher.reading.ranker = 'links-reader-hotpotqa': it loads the shipped reader on its own)
SHIPPED_VARIANT = f"{RANKER1}_shipped"
SHIPPED_READING_RANKER = ROOT / "searcher" / "policies" / "links-reader-hotpotqa.json"
RANKER_FILES = RESULTS / "rankers"  # every ranker's file, for searcher.reading.ranker (run reading_NAME)


def _featured(scored: list[Read]) -> list[list[dict[str, float]]]:
    return [tc.ranker_rows(r.question.question, r.script.documents, r.candidates, r.ranks, r.scores) for r in scored]


def _at1(scored: list[Read], scores: list[list[float]] | None = None) -> dict[str, int]:
    """`tc.best_pick_hits` of the reader's scores, or of other `scores` (a ranker's), one list a question."""
    return tc.best_pick_hits([(set(r.question.supporting_ids), [d.id for d in r.candidates], sc)
                              for r, sc in zip(scored, scores or [r.scores for r in scored], strict=True)])


def _seen_questions(tag: str) -> int | None:
    """How many of the probe's shuffled training questions the reader `tag` has seen (its held-out and training ones,
    and those of the reader it was trained further from), or None where a report does not say. Probes record it since
    2026-12-05; before, only a reader trained from scratch is known: 0 (the caller's --probe-questions says)."""
    rep = json.loads((PROBE_RESULTS / tag / "report.json").read_text(encoding="utf-8"))
    own = rep.get("heldout_questions", 0) + rep.get("train_questions", 0)
    start = rep.get("from_reader")
    if not start:
        return own
    if "train_questions" not in rep or not (PROBE_RESULTS / start / "report.json").is_file():
        return None
    before = _seen_questions(start)
    return None if before is None else max(own, before)


def _ship_reader(tag: str, rep: dict[str, Any], name: str) -> Path:
    """The LoRA reader `tag` as it ships: searcher/policies/`name`/, a float16 adapter on the offline base model by its
    name (training/learn/export.py `export_adapter`: the same rank, no machine path in adapter_config.json). Made once;
    a folder already there is used as it is."""
    from training.learn.export import export_adapter

    out = ROOT / "searcher" / "policies" / name
    if (out / "adapter_config.json").is_file():
        return out
    if not rep.get("lora_r"):
        raise SystemExit(f"--ship-reader: {tag} is a full fine-tune; only a LoRA reader ships (selection_probe.py run "
                         "--lora R --save)")
    # the base's tokenizer is the one it was trained with (the probe trains the adapter only): none is copied
    info = export_adapter(PROBE / "readers" / tag, rep["model"], out, rank=int(rep["lora_r"]), dtype="float16")
    print(f"{tag} shipped as {out.relative_to(ROOT)}: {info['layers']} layers, {info['bytes'] / 1e6:.1f} MB, largest "
          f"remainder {info['max_remainder']:.1e}", flush=True)
    return out


def read(tag: str, heldout: int, add: int, probe_questions: int, ship: bool,
         ship_reader: str | None = None) -> dict[str, Any]:
    """title_following_plus_reader's contexts file: the script's documents, then up to `add` of the question's own bm25
    ranks 4-16 that the trained reader `tag` (benchmarks/selection_probe.py `run --save --tag ...`) scores highest, each
    at or above a threshold chosen on the probe's `heldout` held-out TRAINING questions (`tc.precision_threshold`: the
    script's own precision there); title_following_plus_reader1's: its best, always. And the rankers (`RANKERS`): a
    logistic regression over the reader's score and what the script found (`tc.ranker_rows`), fitted on the training
    questions after the probe's first `probe_questions` (its held-out and training ones, which the reader has seen),
    its best added always (RANKER1; LINKS1 without the reader's score). No dev gold label chooses anything;
    contexts/reader.json has the numbers. `ship_reader`: the reader as it ships (`_ship_reader`) scores instead, and
    only the ranker over it is written (`SHIPPED_VARIANT`; the other contexts files stay the last reader's). Files and
    reader.json's keys carry the methods' stored names (`tm.stored_name`)."""
    from eval.harness import load_dataset
    from experiments import selection_probe as sp
    from s3core.corpus import read_questions
    from searcher.title_following.reader import PointwiseReader

    reader, probe = PROBE / "readers" / tag, PROBE_RESULTS / tag / "report.json"
    if not any((reader / f).is_file() for f in ("config.json", "adapter_config.json")) or not probe.is_file():
        raise SystemExit(f"no trained reader {tag!r}: {reader.relative_to(ROOT)} and {probe.relative_to(ROOT)} come "
                         "from `benchmarks/selection_probe.py run --reader pointwise --save --tag ...`")
    rep = json.loads(probe.read_text(encoding="utf-8"))
    if rep.get("reader") != "pointwise":
        raise SystemExit(f"{tag}: a {rep.get('reader')} reader; the searcher reads with a pointwise one")
    shuffled, _ = sp.split_questions(read_questions(PROBE / "data" / "questions.jsonl"), 10**9, 0, rep["seed"])
    seen = _seen_questions(tag)
    if seen is None:
        raise SystemExit(f"{tag} was trained further from another reader and its probe report does not record the "
                         "questions it saw: the rankers cannot be fitted on questions it never saw")
    if seen > probe_questions:
        raise SystemExit(f"{tag} has seen the first {seen} training questions (its probe's --heldout + --train, and "
                         f"its starting reader's): pass --probe-questions {seen} or more")
    if not heldout <= probe_questions < len(shuffled):
        raise SystemExit(f"--heldout {heldout} and --probe-questions {probe_questions}: need heldout <= probe "
                         f"questions < the {len(shuffled)} training questions with gold paragraphs")
    held, unseen = shuffled[:heldout], shuffled[probe_questions:]
    if ship_reader:
        reader = _ship_reader(tag, rep, ship_reader)
    scorer = PointwiseReader.load(str(reader))  # the product's reader (searcher.reading.reader): the searcher scores the same
    cache = WORK.parent / "reader_scores" / f"{ship_reader or tag}.jsonl"
    cache.parent.mkdir(parents=True, exist_ok=True)
    calib = _scored(scorer, "heldout_training", held, PROBE / "data", PROBE / "index", cache)
    # the script's own precision on these questions: the share of its additions that are gold
    added = [(d.id in set(r.question.supporting_ids)) for r in calib for d in r.script.documents
             if d.id in r.script.added_by]
    target = sum(added) / max(len(added), 1)
    picks = [(r.scores[i], r.candidates[i].id in set(r.question.supporting_ids))  # every best `add`, no threshold
             for r in calib for i in tc.read_picks(r.scores, -float("inf"), add)]
    threshold = tc.precision_threshold(picks, target)
    kept = [g for s, g in picks if s >= threshold]
    surest = [g for _, g in sorted(picks, key=lambda p: -p[0])]  # the picks' gold labels, surest first
    qs = load_dataset(WORK / "data").questions
    dev = _scored(scorer, "hotpotqa_dev500", qs, WORK / "data", WORK / "index", cache)
    fit_on = _scored(scorer, "unseen_training", unseen, PROBE / "data", PROBE / "index", cache)
    fit_rows = [(row, c.id in set(r.question.supporting_ids))
                for r, rows in zip(fit_on, _featured(fit_on), strict=True)
                for c, row in zip(r.candidates, rows, strict=True)]
    weights = {name: tc.fit_ranker([x for x, _ in fit_rows], [g for _, g in fit_rows], feats)
               for name, feats in RANKERS.items()}
    feats_calib, feats_dev = _featured(calib), _featured(dev)

    def ranked(name: str, feats: list[list[dict[str, float]]]) -> list[list[float]]:
        return [[tc.ranker_score(weights[name], x) for x in rows] for rows in feats]

    script_rows = {r["id"]: [d["id"] for d in r["documents"]] for r in _contexts(SCRIPT)}
    files: dict[str, list[dict[str, Any]]] = {READER: [], READER1: [], **{name: [] for name in RANKERS}}
    dev_scores = {READER: [r.scores for r in dev], READER1: [r.scores for r in dev],
                  **{name: ranked(name, feats_dev) for name in RANKERS}}
    for n, r in enumerate(dev):
        if script_rows.get(r.question.id) != [d.id for d in r.script.documents]:  # --only-changed composes over them
            raise SystemExit(f"{r.question.id}: the script's documents differ from {_contexts_file(SCRIPT).name}; run "
                             "prepare")
        for name, written in files.items():
            sc = dev_scores[name][n]
            picked = tc.read_picks(sc, threshold, add) if name == READER else tc.read_picks(
                sc, -float("inf"), 1)  # the others: their best, always
            written.append(tc.contexts_row(r.question.id, [*r.script.documents, *(r.candidates[i] for i in picked)],
                                           added=[r.candidates[i].id for i in picked],
                                           added_scores=[round(sc[i], 3) for i in picked]))
    # per question, how many of the pages each file adds are gold
    gold_of = {name: [len(set(w["added"]) & set(r.question.supporting_ids)) for w, r in zip(written, dev, strict=True)]
               for name, written in files.items()}
    rows = files[READER]
    n_added = sum(len(r["added"]) for r in rows)
    out_dir = RESULTS / "contexts"
    for name, written in files.items():
        if ship_reader and name != RANKER1:
            continue
        if ship_reader:
            name = SHIPPED_VARIANT
        _write_contexts(out_dir / f"{tm.stored_name(name)}.jsonl", written)

    def gold_share(name: str) -> float:
        return round(statistics.fmean([bool(g) for g, w in zip(gold_of[name], files[name], strict=True)
                                       if w["added"]] or [0.0]), 3)

    stats = {
        "reader": tag, "reader_probe": probe.parent.relative_to(ROOT).as_posix(), "add": add,
        "calibration_at1": _at1(calib), "dev_at1": _at1(dev),
        "ranks": [tc.PLUS_FIRST, tc.READ_LAST], "calibration_questions": len(calib),
        "calibration_script_added_gold_share": round(target, 3),
        "threshold": None if threshold == float("inf") else threshold,  # None: no pick is precise enough, none added
        "calibration_picks": len(picks), "calibration_picks_kept": len(kept),
        "calibration_kept_gold_share": round(sum(kept) / max(len(kept), 1), 3),
        # how precise the reader's surest picks are: the gold share of its best-scored 10%, 25% and all picks there
        "calibration_precision_of_top": {
            f"{int(f * 100)}%": round(statistics.fmean(surest[:max(1, int(f * len(surest)))]), 3)
            for f in (0.1, 0.25, 1.0)} if surest else {},
        f"{tm.stored_name(READER)}_mean_docs": statistics.fmean(len(r["documents"]) for r in rows),
        f"{tm.stored_name(READER)}_questions_changed": sum(bool(r["added"]) for r in rows),
        "dev_added_docs": n_added,
        "dev_added_gold_share": round(sum(gold_of[READER]) / max(n_added, 1), 3),
        "dev_questions_adding_gold": sum(g > 0 for g in gold_of[READER]),
        f"{tm.stored_name(READER1)}_questions_changed": sum(bool(r["added"]) for r in files[READER1]),
        f"{tm.stored_name(READER1)}_gold_share": gold_share(READER1),
        # the rankers: fitted on `fit_on`'s candidates; their best's gold counts as the reader's above (at1 keys)
        "rankers": {tm.stored_name(name): {
            "weights": weights[name], "fit_questions": len(fit_on), "fit_candidates": len(fit_rows),
            "fit_gold_candidates": sum(g for _, g in fit_rows), "calibration_at1": _at1(calib, ranked(name, feats_calib)),
            "dev_at1": _at1(dev, dev_scores[name]), "gold_share": gold_share(name),
            "questions_other_than_reader1": len(tc.changed_ids(files[name], files[READER1]))}
            for name in RANKERS},
    }
    # every ranker as a file searcher.reading.ranker loads (searcher/title_following/links.py), so the live reading
    # searcher runs it on any dataset; the no-reading one ships (links-hotpotqa): it needs no model
    RANKER_FILES.mkdir(parents=True, exist_ok=True)
    for name, feats in RANKERS.items():
        reads = "reader" in feats
        if ship_reader and not reads:
            continue
        body: dict[str, Any] = {"about": "searcher.reading.ranker: the page the reading searcher (searcher.kind = "
                         "'reading') adds after the title-following script's spans, from the question's own ranks "
                         "(searcher.reading.read_last); a logistic regression fitted by `benchmarks/transfer_checks.py "
                         f"read` ({tm.stored_name(name)} in "
                         "benchmarks/results/transfer3/checks/contexts/reader.json, docs/transfer.md)"
                         + (f"; it weighs the pointwise reader {tag}'s score: set searcher.reading.reader to that reader"
                            if reads and not ship_reader else
                            f"; it weighs the score of the reader that ships beside it (searcher/policies/{ship_reader}"
                            f", {tag} in float16), which it loads on its own" if reads else ""),
                "fit_questions": len(fit_on), "fit_candidates": len(fit_rows), "ranks": [tc.PLUS_FIRST, tc.READ_LAST],
                **({"reader": ship_reader or tag} if reads else {}), "weights": weights[name]}
        (RANKER_FILES / f"{tm.stored_name(SHIPPED_VARIANT if ship_reader else name)}.json").write_text(
            json.dumps(body, indent=2) + "\n", encoding="utf-8")
        if ship and name == LINKS1:
            body["about"] = body["about"].replace("searcher.reading.ranker:",
                                                  "searcher.reading.ranker = 'links-hotpotqa':", 1)
            SHIPPED_RANKER.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        if ship and ship_reader:
            body["about"] = body["about"].replace("searcher.reading.ranker:",
                                                  "searcher.reading.ranker = 'links-reader-hotpotqa':", 1)
            SHIPPED_READING_RANKER.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    path = out_dir / "reader.json"  # one entry a reader; the contexts files are the last one read's
    every = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if ship_reader:  # the shipped reader's entry, under its name; only SHIPPED_VARIANT's files are its
        stats |= {"shipped_as": f"searcher/policies/{ship_reader}", "contexts": f"{tm.stored_name(SHIPPED_VARIANT)}.jsonl"}
    every = {"last": every.get("last", tag) if ship_reader else tag,
             "readers": {**every.get("readers", {}), (ship_reader or tag): stats}}
    path.write_text(json.dumps(every, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(stats, indent=2))
    return stats


def _run_dir(gen: str, method: str, dataset: str = HOTPOT) -> Path:
    """Where `gen`'s run of `method` (METHOD or METHOD_mtN) is: under the method's stored name (`tm.stored_name`)."""
    return (RESULTS if dataset == HOTPOT else RESULTS / dataset) / "runs" / gen / tm.stored_name(method, dataset)


def _work(dataset: str) -> Path:
    return WORK if dataset == HOTPOT else WORK.parent / dataset


def _prepare_other(dataset: str) -> None:
    """musique_dev200 / 2wiki_dev200: the prepared data and a bm25 index over its paragraphs (once; no contexts files:
    only the table's live methods run there)."""
    fmt, raw = OTHER[dataset]
    data, index = _work(dataset) / "data", _work(dataset) / "index"
    if not (data / "corpus.jsonl").is_file():
        run_s3("data", "prepare", fmt, "--input", str(raw), "--out", str(data))
    if not index.is_dir():
        run_s3("index", "build", "--config", str(CONFIG), "--corpus", str(data / "corpus.jsonl"), "--out", str(index))


def run(method: str, gen: str, limit: int, max_tokens: int | None, policy: str | None, additive: list[str],
        dataset: str = HOTPOT, documents_from: str | None = None) -> None:
    """One resumable `s3 eval` run of a check with a generator (`method`: a name of the METHODS table, an old one read
    as its method); `documents_from` another generator whose run of the same searcher method recorded its documents:
    those are replayed (`_replay`) instead of running the searcher."""
    method = tm.canonical(method)
    data, index = _work(dataset) / "data", _work(dataset) / "index"
    method_sets: list[str]
    try:
        if documents_from is not None:  # the searcher's settings are the source run's: no --additive needed
            if additive:
                raise ValueError("--documents-from replays another run's documents: its searcher settings were that "
                                 "run's, so --additive would change nothing (leave it out)")
            margs, method_sets, uses_index = (
                ["searcher", "--contexts", str(_replay(method, documents_from, gen, dataset))], [], True)
        else:
            margs, method_sets, uses_index = tm.eval_args(method, RESULTS / "contexts", policy, additive,
                                                          dataset=dataset)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if dataset != HOTPOT:
        _prepare_other(dataset)
    elif not (index.is_dir() and _contexts_file("a1").is_file()):
        raise SystemExit("run `benchmarks/transfer_checks.py prepare` first")
    if max_tokens is not None:
        method_sets = [f"generator.max_tokens={max_tokens}", *method_sets]
    name = method if max_tokens in (None, _cfg().generator.max_tokens) else f"{method}_mt{max_tokens}"
    summary = _run_dir(gen, name, dataset) / "summary.json"
    done = json.loads(summary.read_text()) if summary.is_file() else {}
    if done.get("n_scored", 0) >= limit and not done.get("n_failed") and not done.get("n_missing"):
        print(f"= {gen}/{name}: {done['n_scored']} questions already scored", flush=True)
        return
    _eval(gen, margs, method_sets, data, index if uses_index else None, limit, _run_dir(gen, name, dataset))


def _replay(method: str, source: str, gen: str, dataset: str) -> Path:
    """The documents `source`'s run of `method` recorded (its contexts.jsonl[.gz]), as a contexts file for `gen`'s run
    (runs/transfer3/<dataset>/replay/). Exact for the title-following and reading searchers run live, which never ask
    the generator: its documents are the same whichever generator answers (MuSiQue, title_following_ranker1: the 1.5B and
    0.5B runs' documents agree on 200 of 200 questions, and a replay's answers equal the live run's on 12 of 12). A
    policy searcher is refused: it may sample, and a replay would stand in for a run it did not make."""
    from s3core.io import latest_by_id

    if source == gen:
        raise SystemExit(f"--documents-from {source}: that is the run being made; name the generator whose run "
                         "recorded the documents")
    if not tm.scripted(tm.lookup(method)[1]):
        raise SystemExit(f"--documents-from replays the documents of a title-following or reading searcher run live "
                         f"(title_following(_NAME), title_following_ranker1, reading_NAME, ...); {method} is not one (a "
                         "policy searcher samples: its replay would stand in for another run)")
    src = _run_dir(source, method, dataset)
    rows = list(latest_by_id(src / "contexts.jsonl", what="contexts row").values())  # or contexts.jsonl.gz
    if not rows:
        raise SystemExit(f"{src.relative_to(ROOT)}: no recorded documents (contexts.jsonl or contexts.jsonl.gz): run "
                         f"`run {method} --dataset {dataset} --generator {source}` first")
    out = _work(dataset) / "replay" / source / f"{method}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({"id": r["id"], "documents": r["documents"]}) + "\n" for r in rows),
                   encoding="utf-8")
    print(f"{gen}/{method} on {dataset}: the documents of {source}'s run ({len(rows)} questions), replayed", flush=True)
    return out


def _eval(gen: str, margs: list[str], sets: list[str], data: Path, index: Path | None, limit: int, out: Path) -> None:
    """The one `s3 eval` call of a check: `margs` / `sets` from tm.eval_args, with `gen`'s generator; `index` None
    where the method reads none (`s3 eval` refuses an index it would not use)."""
    sets = [f"generator.model={GENERATORS[gen]}", *sets]
    index_args = ["--index", str(index)] if index is not None else []
    run_s3("eval", "--config", str(CONFIG), *[x for s in sets for x in ("--set", s)], "--dataset", str(data),
           *index_args, "--limit", str(limit), "--out", str(out), "--no-progress", "--method", *margs)


# a changed-only control takes its unchanged questions' rows from the script's run, or from its table entry's `base`
# (a ranker's: title_following_plus_reader1's, itself composed over the script's first)
CHANGED_BASES = {name: m.base or SCRIPT for name, m in tm.METHODS.items() if m.contexts and name != SCRIPT}


def _contexts(method: str) -> list[dict[str, Any]]:
    return read_jsonl(_contexts_file(method))


def run_changed(method: str, gen: str) -> None:
    """A control that changes only some of its base's contexts (`CHANGED_BASES`: the script's, title_following_plus_gold
    changes 72 of 500; a ranker's is title_following_plus_reader1's), run on those questions only (a questions file of
    theirs under runs/, `s3 eval` into RESULTS/changed/<gen>/<stored name>); the report takes the base run's rows for
    the others (`tc.compose_changed`: the same documents, the same prompt, greedy)."""
    method = tm.canonical(method)
    if method not in CHANGED_BASES:
        raise SystemExit(f"--only-changed runs a contexts control other than {SCRIPT} ({', '.join(CHANGED_BASES)}), "
                         f"not {method!r}")
    base = CHANGED_BASES[method]
    if base != SCRIPT and not _rows(RESULTS / "changed" / gen / tm.stored_name(base)):
        raise SystemExit(f"{method} composes over {base}'s {gen} run: run `run {base} --only-changed --generator {gen} "
                         "--limit 500` first")
    ids = set(tc.changed_ids(_contexts(method), _contexts(base)))
    qdir = WORK / f"changed_{tm.stored_name(method)}"
    qdir.mkdir(parents=True, exist_ok=True)
    lines = (WORK / "data" / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    keep = [x for x in lines if x.strip() and json.loads(x)["id"] in ids]
    (qdir / "questions.jsonl").write_text("".join(x + "\n" for x in keep), encoding="utf-8")
    print(f"{method}: {len(keep)} of {len(lines)} questions have other documents than {base}'s", flush=True)
    margs, sets, _ = tm.eval_args(method, RESULTS / "contexts")
    _eval(gen, margs, sets, qdir, WORK / "index", len(keep), RESULTS / "changed" / gen / tm.stored_name(method))


def _changed_runs(gen: str, base_rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """The changed-only controls of `gen`, each composed into a whole run's rows over its base's (`CHANGED_BASES`):
    over `base_rows` (the script's), or over another control's once that is composed."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    root = RESULTS / "changed" / gen
    names = [tm.canonical(d.name) for d in root.iterdir() if d.is_dir()] if root.is_dir() and base_rows else []
    for name in tc.composition_order(names, CHANGED_BASES, SCRIPT):
        d, base = root / tm.stored_name(name), CHANGED_BASES.get(name, SCRIPT)
        under = base_rows if base == SCRIPT else out.get(base)
        if under is None:
            print(f"{gen}/{name} left out of the report: its base {base} has no composed run", flush=True)
            continue
        ran = (json.loads((d / "run.json").read_text(encoding="utf-8")).get("config", {}).get("contexts", {})
               if (d / "run.json").is_file() else {})
        now = _contexts_file(name)
        why = ("its run.json records no contexts file" if not ran.get("sha256") else
               f"contexts/{now.name} is gone" if not now.is_file() else
               f"contexts/{now.name} is not the file it ran (rerun it)" if ran["sha256"] != tc.rows_sha256(now) else "")
        if why:
            print(f"{gen}/{name} left out of the report: {why}", flush=True)
            continue
        try:
            out[name] = tc.compose_changed(under, _rows(d), tc.changed_ids(_contexts(name), _contexts(base)))
        except DataFormatError as e:
            print(f"{gen}/{name} left out of the report: {e}", flush=True)
    return out


def _rows(run_dir: Path) -> dict[str, dict[str, Any]]:
    from eval.rundir import read_results

    return read_results(run_dir / "results.jsonl")  # or results.jsonl.gz; {} when there is none


def max_tokens(gen: str, limit: int, measure_at: int) -> dict[str, Any]:
    """Cap-hit shares of naive-RAG answers at 16 / 32 / 48 from one run at `measure_at` (>= the largest cap)."""
    # the config's own max_tokens: the naive-RAG run the checks are paired against is the measurement
    run_dir = _run_dir(gen, "naive_rag_top3" if measure_at == _cfg().generator.max_tokens
                       else f"naive_rag_top3_mt{measure_at}")
    if len(_rows(run_dir)) < limit:
        run("naive_rag_top3", gen, limit, measure_at, None, [])
    rows = list(_rows(run_dir).values())[:limit]
    caps = [c for c in CAPS if c <= measure_at]
    shares = tc.cap_hit_shares([int(r["completion_tokens"]) for r in rows], caps)
    out = {"generator": GENERATORS[gen], "questions": len(rows), "measured_at": measure_at,
           "hit_share": {str(c): s for c, s in shares.items()}, "smallest_below_5pct": tc.smallest_cap(shares),
           "run": str(run_dir.relative_to(ROOT))}
    path = RESULTS / "max_tokens.json"
    allm = json.loads(path.read_text()) if path.is_file() else {}
    allm[gen] = out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(allm, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=2))
    return out


def report() -> dict[str, Any]:
    """report.md / report.json / checks.png from the finished (or partial) runs: per generator, over the questions
    every run of that generator has scored."""
    out: dict[str, Any] = {"generators": {}}
    lines = ["# Zero-training checks (issue 45, build step 1)", "",
             "Generated by `.venv/bin/python benchmarks/transfer_checks.py report` from the runs in `runs/` "
             "(configs/transfer3.toml; hotpotqa_dev500, bm25 over its 4,943 paragraphs; GenAcc = span check, else the "
             "judge local/qwen2.5-coder-0.5b-instruct; 95% intervals: bootstrap over questions, paired for "
             "differences). What each method is: `benchmarks/transfer_checks.py --help` (experiments/transfer/methods.py); the discussion: docs/transfer.md, "
             "\"Attempt 3\".", ""]
    stats_path = RESULTS / "contexts" / "stats.json"
    if stats_path.is_file():
        st = json.loads(stats_path.read_text())
        out["contexts"] = st
        lines += ["## The contexts (all 500 questions, no generator call)", "",
                  f"- naive RAG's top-3 lacks a gold paragraph on {st['top3_lacks_gold']} questions; A1 adds a "
                  f"copyable one (title visible in the question or a top-3 document's title + first "
                  f"{st['visible_words']} words) on {st['a1_adds_copyable_gold']}; A1's mean documents "
                  f"{st['a1_mean_docs']:.2f}"
                  + (f"; A2 adds every missing gold paragraph, visible or not (a perfect searcher), mean documents "
                     f"{st['a2_mean_docs']:.2f}" if "a2_mean_docs" in st else ""),
                  f"- {SCRIPT} (cap {st['heuristic_cap']}, k = {st['heuristic_k']} per query): "
                  f"{st['heuristic_mean_queries']:.1f} span queries a question, adds documents on "
                  f"{st['heuristic_questions_with_additions']} questions, a gold one on "
                  f"{st['heuristic_questions_adding_gold']}; share of added documents that are gold "
                  f"{st['heuristic_added_docs_gold_share']:.3f}; mean documents {st['heuristic_mean_docs']:.2f}"
                  + (f"\n- {PRUNED} (its non-gold additions removed): changed on "
                     f"{st['heuristic_pruned_questions_changed']} questions, mean documents "
                     f"{st['heuristic_pruned_mean_docs']:.2f}" if "heuristic_pruned_mean_docs" in st else "")
                  + "".join(f"\n- {name}: changed on {st[f'{key}_questions_changed']} questions, mean documents "
                            f"{st[f'{key}_mean_docs']:.2f}"
                            for name, key in ((n, tm.stored_name(n)) for n in (PLUS_GOLD, PLUS_NEXT, PLUS_GOLD16))
                            if f"{key}_mean_docs" in st), ""]
    reader_path = RESULTS / "contexts" / "reader.json"
    readers = json.loads(reader_path.read_text()) if reader_path.is_file() else {"readers": {}}
    out["readers"] = readers
    for tag, rd in readers["readers"].items():
        ca, da = rd["calibration_at1"], rd["dev_at1"]
        lines.append(
            (f"- **{READER}** (the contexts file)" if tag == readers.get("last") else "- another reader")
            + f" (`read`: the trained reader {tag}, {rd['reader_probe']}, reads the question's own bm25 ranks "
            f"{rd['ranks'][0]}-{rd['ranks'][1]} the script lacks and adds up to {rd['add']} at or above the threshold "
            + ("+inf (none is precise enough)" if rd["threshold"] is None else f"{rd['threshold']:.3f}") + ", chosen on"
            f" {rd['calibration_questions']} held-out training questions where the "
            f"script's additions are gold {rd['calibration_script_added_gold_share']:.3f} of the time; its kept picks "
            f"there {rd['calibration_picks_kept']} of {rd['calibration_picks']}, gold "
            f"{rd['calibration_kept_gold_share']:.3f}; its surest picks' gold share, top 10% / 25% / all: "
            + " / ".join(f"{v:.3f}" for v in rd.get("calibration_precision_of_top", {}).values()) + "): changed on"
            f" {rd['heuristic_plus_reader_questions_changed']} "
            f"questions, {rd['dev_added_docs']} documents added, gold {rd['dev_added_gold_share']:.3f} of them, a "
            f"missing gold added on {rd['dev_questions_adding_gold']} questions; mean documents "
            f"{rd['heuristic_plus_reader_mean_docs']:.2f}"
            + (f"; {READER1} (its best, always) changes {rd['heuristic_plus_reader1_questions_changed']}"
               f" questions, gold on {rd['heuristic_plus_reader1_gold_share']:.3f} of them"
               if "heuristic_plus_reader1_gold_share" in rd else "")
            + ". Where a gold is among the candidates, the reader's best is "
            f"gold on {ca['reader_best_is_gold']} of {ca['questions_with_a_gold_candidate']} held-out training "
            f"questions (bm25 order's: {ca['bm25_best_is_gold']}) and on {da['reader_best_is_gold']} of "
            f"{da['questions_with_a_gold_candidate']} dev questions (bm25 order's: {da['bm25_best_is_gold']})")
    if readers["readers"]:
        lines.append("")
    mt_path = RESULTS / "max_tokens.json"
    if mt_path.is_file():
        mt = json.loads(mt_path.read_text())
        out["max_tokens"] = mt
        lines += ["## max_tokens: share of naive-RAG top-3 answers at the cap", "",
                  "One naive-RAG run per generator at max_tokens = 48 on the first questions; an answer of L "
                  "completion tokens (results.jsonl `completion_tokens`; the rows record no finish reason) hits a "
                  "cap c <= 48 exactly when L >= c, since greedy decoding under the smaller cap writes a prefix of "
                  "the same answer (`tc.cap_hit_shares`).", "",
                  "| generator | questions | " + " | ".join(f"hits at {c}" for c in CAPS) + " | smallest < 5% |",
                  "| --- | ---: | " + " | ".join("---:" for _ in CAPS) + " | ---: |"]
        for m in mt.values():
            cells = " | ".join(f"{m['hit_share'][str(c)]:.3f}" if str(c) in m["hit_share"] else "" for c in CAPS)
            lines.append(f"| {m['generator']} | {m['questions']} | {cells} | {m['smallest_below_5pct']} |")
        lines.append("")
    reach_path = RESULTS / "contexts" / "reach.json"
    if reach_path.is_file():
        rc = json.loads(reach_path.read_text())
        out["reach"] = rc
        buckets = [f"{a}-{b}" for a, b in tc.RANK_BUCKETS]
        lines += ["## Where a searcher could reach the missing gold (all 500 questions, bm25 only)", "",
                  "`benchmarks/transfer_checks.py reach` (`tc.reach_by_place`): per place of the missing gold title, the "
                  "best rank of a missing gold paragraph in the question's OWN bm25 list (past naive RAG's top-3), and "
                  f"on how many questions one gets in for a perfect selector over the question's first {rc['window']} "
                  f"documents (no new query), the title-following script, and the script then that selector (cap "
                  f"{rc['cap']}).", "",
                  "| missing gold title visible | questions | " + " | ".join(f"rank {b}" for b in buckets)
                  + f" | rank > 50 | selector | {SCRIPT} | {SCRIPT} then selector |",
                  "| --- | ---: | " + " | ".join("---:" for _ in buckets) + " | ---: | ---: | ---: | ---: |"]
        for place, e in rc["places"].items():
            lines.append(f"| {place} | {e['questions']} | " + " | ".join(str(e["ranks"][b]) for b in buckets)
                         + f" | {e['ranks']['beyond']} | {e['selector']} | {e['heuristic']} | "
                         f"{e['heuristic_then_selector']} |")
        lines.append("")
    places = _places()
    st_words = out.get("contexts", {}).get("visible_words", tc.VISIBLE_WORDS)
    out["generators"] = _generator_tables(HOTPOT, lines, places, st_words)
    if out["generators"]:
        _plot(out["generators"], RESULTS / "checks.png")
        lines += ["![GenAcc and paired differences](checks.png)", ""]
    for dataset in OTHER:
        head = [f"# {dataset}: naive RAG, the title-following script and the trained searcher", "",
                f"Its own bm25 index over its paragraphs (`run METHOD --dataset {dataset}`); the searcher was trained on "
                "HotpotQA questions only.", ""]
        tables = _generator_tables(dataset, head, None, st_words)
        if tables:
            out.setdefault("datasets", {})[dataset] = tables
            lines += head
    (RESULTS / "report.md").write_text("\n".join(lines), encoding="utf-8")
    (RESULTS / "report.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return out


def _key(name: str) -> str:
    """The METHODS key of a method name ("" for a folder the table does not name)."""
    try:
        return tm.lookup(name)[0]
    except ValueError:
        return ""


def _generator_tables(dataset: str, lines: list[str], places: Any, st_words: int) -> dict[str, Any]:
    """One dataset's paired tables per generator (appended to `lines`), over the questions its runs share."""
    found: dict[str, Any] = {}
    for gen, model in GENERATORS.items():
        base = _run_dir(gen, "", dataset)
        if not base.is_dir():
            continue
        # a folder under an old name is its method's (`tm.canonical`)
        runs = {tm.canonical(p.name): _rows(p) for p in sorted(base.iterdir()) if p.is_dir() and "_mt" not in p.name}
        runs = {k: v for k, v in runs.items() if v}
        if not runs:
            continue
        composed = _changed_runs(gen, runs.get(SCRIPT, {})) if dataset == HOTPOT else {}
        runs |= composed
        runs = {m: runs[m] for m in tm.order(list(runs))}
        # one table per finished length (a run in progress is listed, not allowed to shrink every table)
        tiers, running = tc.report_tiers({m: (len(r), _asked(_run_dir(gen, SCRIPT if m in composed else m, dataset)))
                                          for m, r in runs.items()})
        tables: list[dict[str, Any]] = []
        for n, members in tiers:
            sub = {m: runs[m] for m in members}
            ids = _common_ids(sub, dataset)[:n]
            # the bar, the equal-documents controls, and the script a trained searcher must clear
            baselines = ["naive_rag_top3", *[m for m in members if m != "naive_rag_top3" and _key(m) == "naive_rag_top{N}"],
                         *[m for m in members if m == SCRIPT]]
            table = tc.paired_rows(sub, baselines, ids)
            entry: dict[str, Any] = {"questions": len(ids), "methods": table}
            lines += _table_lines(model, len(ids), table, baselines)
            if places and not tables:  # the diagnosis of the longest table
                entry["places"] = tc.place_rows(sub, places[0], places[1], ids)
                lines += _place_lines(len(ids), entry["places"], st_words)
            tables.append(entry)
        if running:
            lines += ["Still running (in the tables of the questions they already scored): " + ", ".join(
                f"{m} ({s} of {a} questions)" for m, (s, a) in running.items()), ""]
        if tables:  # the longest table first; "questions" / "methods" are that table's
            found[gen] = {"model": model, **tables[0], "tables": tables,
                          "in_progress": {m: {"scored": s, "asked": a} for m, (s, a) in running.items()}}
    return found


def reach() -> dict[str, Any]:
    """contexts/reach.json: where a searcher could reach the gold paragraphs the top-3 lacks (`tc.reach_by_place`: the
    question's own bm25 ranks, a perfect selector over its first 8, the script, both); bm25 only, seconds."""
    from eval.harness import load_dataset
    from searcher.retrieval import load_retriever

    found = _places()
    if found is None:
        raise SystemExit("run `benchmarks/transfer_checks.py prepare` first")
    places, missing = found
    script = {r["id"]: [d["id"] for d in r["documents"]] for r in _contexts(SCRIPT)}
    qs = load_dataset(WORK / "data").questions
    retriever = load_retriever(_cfg().retriever, WORK / "index")
    depth = max(b for _, b in tc.RANK_BUCKETS)
    ranked = {q.id: [d.id for d in hits] for q, hits in zip(qs, retriever.search([q.question for q in qs], depth),
                                                             strict=True)}
    out = {"window": tc.SPAN_K, "cap": tc.DOC_CAP, "places": tc.reach_by_place(places, missing, ranked, script)}
    (RESULTS / "contexts" / "reach.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=2))
    return out


def _places() -> tuple[dict[str, str], dict[str, set[str]]] | None:
    """contexts/places.jsonl (written by `prepare`): question id -> where its missing gold title was visible, and
    question id -> the gold ids naive RAG's top-3 lacks."""
    path = stored(RESULTS / "contexts" / "places.jsonl")
    if not path.is_file():
        return None
    rows = read_jsonl(path)
    return {r["id"]: r["place"] for r in rows}, {r["id"]: set(r["missing"]) for r in rows}


def _place_lines(n: int, rows: list[dict[str, Any]], words: int) -> list[str]:
    if not rows:
        return []
    methods = list(rows[0]["methods"])
    lines = [f"Where the gold paragraphs naive RAG's top-3 lacks were visible (the same {n} questions): in the question, "
             f"only in a top-3 document's title and first {words} words (mostly the bridge to the second hop), or "
             "nowhere. Per method: questions where it got a missing gold paragraph into the context / its GenAcc "
             "there.", "",
             "| missing gold title visible | questions | " + " | ".join(methods) + " |",
             "| --- | ---: | " + " | ".join("---" for _ in methods) + " |"]
    for r in rows:
        cells = []
        for m in methods:
            e = r["methods"][m]
            acc = "n/a" if e["genacc"] is None else f"{e['genacc']:.3f}"
            cells.append(acc if r["place"] == "none missing" else f"{e['found']} / {acc}")
        lines.append(f"| {r['place']} | {r['questions']} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _asked(run_dir: Path) -> int:
    """How many questions the run was last asked for and finished: its summary.json's dataset.n_questions (written
    when an invocation ends; run.json keeps the first invocation's, the run's identity), else run.json's for a first
    invocation still going; 0 when it has neither."""
    for name in ("summary.json", "run.json"):
        path = run_dir / name
        if path.is_file():
            return int(json.loads(path.read_text())["config"]["dataset"].get("n_questions") or 0)
    return 0


def _common_ids(runs: dict[str, dict[str, dict[str, Any]]], dataset: str = HOTPOT) -> list[str]:
    """The question ids every run scored, in dataset order (the first n questions when the runs are prefixes)."""
    from eval.harness import load_dataset

    data = _work(dataset) / "data"
    order = [q.id for q in load_dataset(data).questions] if data.is_dir() else sorted(next(iter(runs.values())))
    return [i for i in order if all(i in r for r in runs.values())]


def _fmt(m: dict[str, Any] | None, sign: bool = False) -> str:
    if not m or m.get("mean" if "mean" in m else "diff") is None:
        return "n/a"
    v = m["mean"] if "mean" in m else m["diff"]
    lo, hi = m["ci95"]
    f = "{:+.3f}" if sign else "{:.3f}"
    return f"{f.format(v)} [{f.format(lo)}, {f.format(hi)}]"


def _table_lines(model: str, n: int, table: list[dict[str, Any]], baselines: list[str]) -> list[str]:
    present = [b for b in baselines if any(e["method"] == b for e in table)]
    head = ("| method | mean docs | support recall | GenAcc [95% CI] | "
            + " | ".join(f"- {b} [95% CI] (wins / losses)" for b in present))
    lines = [f"## Generator {model}: the first {n} questions", "", head + " |",
             "| --- | ---: | ---: | --- | " + " | ".join("---" for _ in present) + " |"]
    for e in table:
        cells = []
        for b in present:
            d = e["vs"].get(b)
            cells.append(f"{_fmt(d, sign=True)} ({d['wins']} / {d['losses']})" if d else "")
        rec = "" if e.get("support_recall") is None else f"{e['support_recall']:.3f}"
        lines.append(f"| {e['method']} | {e['mean_docs']:.2f} | {rec} | {_fmt(e['genacc'])} | " + " | ".join(cells)
                     + " |")
    return [*lines, ""]


def _plot(gens: dict[str, Any], path: Path) -> None:
    """checks.png: per generator, GenAcc of each method with its 95% interval and each method's paired difference to
    naive RAG top-3."""
    tc.plot_genacc([(g["model"].removeprefix("local/"), g["questions"], [(e["method"], e["genacc"]) for e in g["methods"]],
                     [(f"{e['method']} - naive_rag_top3", e["vs"]["naive_rag_top3"]) for e in g["methods"]
                      if "naive_rag_top3" in e["vs"]]) for g in gens.values()], path)


def main() -> int:
    table = tm.help_table("checks")
    ap = argparse.ArgumentParser(description=__doc__, epilog=table, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="stage", required=True)
    p = sub.add_parser("prepare", help="data, index, the contexts files of A1, A2, the script and its controls, stats")
    p.add_argument("--visible-words", type=int, default=tc.VISIBLE_WORDS)
    p.add_argument("--cap", type=int, default=tc.DOC_CAP, help="the script's document cap")
    p.add_argument("--k", type=int, default=tc.SPAN_K, help="documents the script retrieves per span")
    r = sub.add_parser("run", help="one resumable s3 eval run of a check", epilog=table,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("method", help="a name of the table below (an old name is read as its method)")
    r.add_argument("--generator", choices=GENERATORS, default="qwen15")
    r.add_argument("--limit", type=int, default=300)
    r.add_argument("--dataset", choices=[HOTPOT, *OTHER], default=HOTPOT,
                   help="musique_dev200 / 2wiki_dev200: the table's live methods only (no contexts files there)")
    r.add_argument("--max-tokens", type=int, default=None, help="override configs/transfer3.toml's max_tokens")
    r.add_argument("--policy", default=None, help="a0 / policy_NAME: the policy directory")
    r.add_argument("--only-changed", action="store_true",
                   help=f"a contexts control: run only the questions whose documents differ from its base's ({SCRIPT}'s; "
                        f"a ranker's: {READER1}'s); the report takes that run's rows for the rest")
    r.add_argument("--additive", action="append", default=[], metavar="KEY=VALUE",
                   help="policy_NAME, title_following_NAME and reading_NAME: extra --set (repeatable); elsewhere only "
                        "the table's own")
    r.add_argument("--documents-from", choices=GENERATORS, default=None, metavar="GENERATOR",
                   help="a title-following or reading searcher run live (title_following(_NAME), title_following_"
                        "ranker1, reading_NAME, ...): answer from the documents GENERATOR's run of the same method "
                        "recorded (its contexts.jsonl.gz) instead of running the searcher again; exact, since that "
                        "searcher never asks the generator")
    m = sub.add_parser("max-tokens", help="cap-hit shares of naive-RAG answers at 16 / 32 / 48")
    m.add_argument("--generator", choices=GENERATORS, default="qwen15")
    m.add_argument("--limit", type=int, default=100)
    m.add_argument("--measure-at", type=int, default=48)
    rd = sub.add_parser("read", help=f"{READER}: the script, then a trained reader's picks ({READER1}: its best, always; "
                        f"{RANKER1} / {LINKS1}: a ranker's best over the reader's score and the script's documents, "
                        "with and without the reader)")
    rd.add_argument("--reader", default="smollm2-135m-instruct-pointwise",
                    help="a trained pointwise reader's tag (runs/selection_probe/readers/TAG, its probe report in "
                         "benchmarks/results/selection_probe/TAG)")
    rd.add_argument("--heldout", type=int, default=200, help="the probe's held-out training questions the threshold "
                    "is chosen on (at most the probe's own --heldout)")
    rd.add_argument("--add", type=int, default=tc.READ_ADD, help="documents the reader adds at most")
    rd.add_argument("--ship", action="store_true", help=f"also write the no-reading ranker users run, "
                    f"{SHIPPED_RANKER.relative_to(ROOT)} (searcher.reading.ranker = 'links-hotpotqa')")
    rd.add_argument("--ship-reader", default=None, metavar="NAME",
                    help="a LoRA reader as it ships: exported in float16 to searcher/policies/NAME/, scored from there, "
                    f"only its ranker written ({SHIPPED_VARIANT}: run it --only-changed over {RANKER1}); "
                    f"with --ship also {SHIPPED_READING_RANKER.relative_to(ROOT)}")
    rd.add_argument("--probe-questions", type=int, default=400, help="the probe's held-out + training questions "
                    "(its --heldout + --train), which the reader has seen: the rankers fit on the training questions "
                    "after them")
    sub.add_parser("reach", help="contexts/reach.json: where the missing gold could be reached (bm25 only)")
    sub.add_parser("report", help="report.md, report.json and checks.png")
    a = ap.parse_args()
    if a.stage == "prepare":
        prepare(a.visible_words, a.cap, a.k)
    elif a.stage == "run":
        if a.only_changed:
            run_changed(a.method, a.generator)
        else:
            run(a.method, a.generator, a.limit, a.max_tokens, a.policy, a.additive, a.dataset, a.documents_from)
    elif a.stage == "max-tokens":
        if a.measure_at < max(c for c in CAPS if c <= a.measure_at):
            raise SystemExit("--measure-at must be at least the largest cap measured")
        max_tokens(a.generator, a.limit, a.measure_at)
    elif a.stage == "read":
        read(a.reader, a.heldout, a.add, a.probe_questions, a.ship, a.ship_reader)
    elif a.stage == "reach":
        reach()
    else:
        report()
    return 0
