"""Training data: `s3 prepare-training`.

From QA files (here ../shared/data/train_hotpotqa_musique100, via dataprep/) to a training directory:

    corpus.jsonl        the paragraphs of every source question (the retrieval corpus)
    questions.jsonl     every question loaded (FlashRAG shape)
    index/              the retriever index over corpus.jsonl (when retriever.index is not set)
    baseline.jsonl      the cached naive-RAG baseline Acc(G(Q, D_RAG)) per question; every row carries the cache
                        key (generator, prompt, retriever, k, metric) and rows with another key are ignored, so a
                        change of generator recomputes instead of silently reusing. Appended per batch: resumable.
    train.jsonl         the questions kept for training
    manifest.json       counts after each filter, the cache key, source files

Filters (s3 §3.2): drop yes/no and true/false answers; keep questions whose baseline is 0 (configurable). A question
whose baseline call failed is dropped and counted (it is never scored as 0). At training time a question without a
cached baseline is an error (`load_training_set`), never a silent fallback. Optionally (training.keep_answerable) the
complementary filter: drop training questions the generator gets wrong even from their gold supporting paragraphs
(cached in gold.jsonl), whose rollouts would all get the same reward.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dataprep.training_sources import TrainingSources, load_sources
from s3core.errors import DataFormatError, S3Error
from s3core.types import Document, QAExample

if TYPE_CHECKING:
    from s3.config import S3Config  # noqa: F401  (type only; training never imports s3 at run time)

__all__ = [
    "TrainingSet",
    "baseline_key",
    "is_yes_no",
    "load_training_set",
    "prepare_training",
    "training_dir",
]

YES_NO = {"yes", "no", "true", "false"}


def is_yes_no(answers: list[str]) -> bool:
    """True when every gold answer is yes/no/true/false (case, spaces and final punctuation ignored).

    >>> is_yes_no(["Yes"]), is_yes_no(["no."]), is_yes_no(["True ", "false"]), is_yes_no(["Yes Minister"])
    (True, True, True, False)
    """
    return bool(answers) and all(a.strip().strip(".!").strip().lower() in YES_NO for a in answers)


def training_dir(cfg: Any) -> Path:
    """The prepared training directory: training.train_data, else <output_dir>/data."""
    d = cfg.resolve(cfg.training.train_data) if cfg.training.train_data else cfg.resolve(cfg.training.output_dir) / "data"
    return Path(d)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_jsonl_atomic(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _cached_acc(path: Path, khash: str) -> dict[str, float | None]:
    """question id -> cached accuracy (None = the call failed: retried) from the rows of `path` written under `khash`."""
    if not path.is_file():
        return {}
    return {r["id"]: r["acc"] for r in _read_jsonl(path) if r.get("key") == khash}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                # a truncated last line (killed mid-write) is tolerated; anything else is an error
                if fh.readline() == "":
                    break
                raise DataFormatError(f"{path}:{i}: not valid JSON") from None
    return rows


def _load_sources(cfg: Any) -> TrainingSources:
    """Load every 'format:path' of training.train_sources (paths relative to the config file's folder)."""
    return load_sources(cfg.training.train_sources, cfg.base_dir)


def needs_baseline(cfg: Any) -> bool:
    """The baseline is needed by the GBR rewards (s3 mode) and by the keep-baseline-zero filter."""
    t = cfg.training
    return t.keep_baseline_zero or (t.mode == "s3" and t.reward in ("gbr", "acc_plus_gbr"))


def baseline_key(cfg: Any, index_fingerprint: str) -> dict[str, Any]:
    """What a cached baseline depends on: generator (model + fingerprint), prompt, retriever, k, metric."""
    from generator_adapters import Generator

    gen = Generator(cfg.generator_resolved)
    fp: Any = gen.fingerprint()
    gen.close()
    return {
        "generator": cfg.generator.model,
        "generator_fingerprint": fp,
        "retriever": cfg.retriever.backend,
        "index": index_fingerprint,
        "k": cfg.retriever.k,
        "metric": cfg.eval.metric,
        "use_judge": cfg.eval.use_judge,
        "judge": cfg.judge.model if cfg.eval.use_judge or cfg.eval.metric == "judge" else None,
    }


def _key_hash(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def ensure_index(cfg: Any, data_dir: Path) -> Path:
    """The index directory: retriever.index when configured (built over corpus.jsonl if absent), else data_dir/index."""
    from searcher import retrieval

    index_dir = cfg.resolve(cfg.retriever.index) if cfg.retriever.index else data_dir / "index"
    if not Path(index_dir).exists() or not any(Path(index_dir).iterdir()):
        corpus = data_dir / "corpus.jsonl"
        if not corpus.is_file():
            raise S3Error(f"cannot build the index {index_dir}: {corpus} is missing (run `s3 prepare-training`)")
        retrieval.build_index(corpus, cfg.retriever.backend, Path(index_dir), cfg.retriever, overwrite=True)
    return Path(index_dir)


def _index_fingerprint(index_dir: Path) -> str:
    meta = index_dir / "index.json"
    if meta.is_file():
        return hashlib.sha256(meta.read_bytes()).hexdigest()[:16]
    return str(index_dir.resolve())


def make_accuracy(cfg: Any) -> Any:
    """An async batch function (questions, documents, golden) -> list[float | None]: the frozen generator answers
    (batched, concurrent, cached) and the configured metric (eval.metric; GenAcc calls the judge only when the span
    check fails) scores. A failed generator or judge call gives None."""
    from eval import metrics
    from generator_adapters import Generator

    gen = Generator(cfg.generator_resolved)
    judge = None
    if cfg.eval.metric == "judge" or (cfg.eval.metric == "genacc" and cfg.eval.use_judge):
        from generator_adapters import Judge

        judge = Judge(cfg.judge_resolved)

    async def accuracy(questions: list[str], documents: list[list[Document]], golden: list[list[str]]) -> list[float | None]:
        answers = await gen.answer(questions, documents)
        preds: list[str | None] = [a.text if a.ok else None for a in answers]
        m = cfg.eval.metric
        if m == "span":
            scores = metrics.span_check(preds, golden)
        elif m == "em":
            scores = metrics.exact_match(preds, golden)
        elif m == "genacc":
            scores = await asyncio.to_thread(metrics.genacc, preds, golden, judge)
        else:
            scores = await asyncio.to_thread(metrics.genacc, preds, golden, judge, judge_only=True)
        # a failed generation is missing, whatever the metric returns for it
        return [None if p is None or s is None else float(s) for p, s in zip(preds, scores, strict=True)]

    accuracy.generator = gen  # type: ignore[attr-defined]
    return accuracy


@dataclass
class TrainingSet:
    directory: Path
    examples: list[QAExample]
    baseline: dict[str, float]
    index_dir: Path
    manifest: dict[str, Any]


def prepare_training(cfg: Any, out_dir: Path | None = None, log: Any = print) -> dict[str, Any]:
    """Build (or complete) the training directory; return the manifest. Every step is skipped when done already."""
    from searcher import retrieval

    out = Path(out_dir) if out_dir else training_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    qpath, cpath = out / "questions.jsonl", out / "corpus.jsonl"
    sources: list[dict[str, Any]] = []
    if not qpath.is_file() or not cpath.is_file():
        docs, qs, sources = _load_sources(cfg)
        if cfg.training.max_questions:
            qs = qs[: cfg.training.max_questions]
        _write_jsonl_atomic(cpath, [{"id": d.id, "contents": d.contents} for d in docs])
        _write_jsonl_atomic(qpath, [q.model_dump() for q in qs])
        _write_json_atomic(out / "sources.json", sources)
        log(f"prepare-training: {len(qs)} questions, {len(docs)} paragraphs -> {out}")
    elif (out / "sources.json").is_file():
        sources = json.loads((out / "sources.json").read_text())
    questions = [QAExample.model_validate(r) for r in _read_jsonl(qpath)]
    counts: dict[str, int] = {"loaded": len(questions)}

    if cfg.training.drop_yes_no:
        questions = [q for q in questions if not is_yes_no(q.golden_answers)]
    counts["after_drop_yes_no"] = len(questions)

    index_dir = ensure_index(cfg, out)
    if not needs_baseline(cfg):
        # nothing reads the baseline (no GBR reward, no baseline filter): skip the generator calls
        manifest0: dict[str, Any] = {
            "counts": counts, "baseline": "skipped (reward needs none, keep_baseline_zero=false)",
            "index": str(index_dir), "sources": sources,
            "filters": {"drop_yes_no": cfg.training.drop_yes_no, "keep_baseline_zero": False,
                        "keep_answerable": cfg.training.keep_answerable},
        }
        if cfg.training.keep_answerable:
            key0 = baseline_key(cfg, _index_fingerprint(index_dir))
            questions, manifest0["answerable"] = _keep_answerable(cfg, out, questions, index_dir, key0, log)
            counts["after_keep_answerable"] = len(questions)
        _write_jsonl_atomic(out / "train.jsonl", [q.model_dump() for q in questions])
        _write_json_atomic(out / "manifest.json", manifest0)
        log(f"prepare-training: counts {counts} (baseline skipped)")
        return manifest0
    key = baseline_key(cfg, _index_fingerprint(index_dir))
    khash = _key_hash(key)
    bpath = out / "baseline.jsonl"
    cached = _cached_acc(bpath, khash)
    todo = [q for q in questions if q.id not in cached or cached[q.id] is None]  # failed ones are retried
    hits = len(questions) - len(todo)
    if todo:
        retriever = retrieval.load_retriever(cfg.retriever, index_dir)
        accuracy = make_accuracy(cfg)
        bs = cfg.training.baseline_batch
        for start in range(0, len(todo), bs):
            batch = todo[start : start + bs]
            docs = retriever.search([q.question for q in batch], cfg.retriever.k)
            acc = asyncio.run(accuracy([q.question for q in batch], docs, [q.golden_answers for q in batch]))
            with bpath.open("a", encoding="utf-8") as fh:
                for q, a, ds in zip(batch, acc, docs, strict=True):
                    cached[q.id] = a
                    fh.write(json.dumps({"id": q.id, "acc": a, "key": khash, "doc_ids": [d.id for d in ds]}) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            log(f"prepare-training: baseline {min(start + bs, len(todo))}/{len(todo)}")
    counts["baseline_failed"] = sum(1 for q in questions if cached.get(q.id) is None)
    questions = [q for q in questions if cached.get(q.id) is not None]
    counts["after_baseline_ok"] = len(questions)
    if cfg.training.keep_baseline_zero:
        questions = [q for q in questions if cached[q.id] == 0.0]
    counts["after_keep_baseline_zero"] = len(questions)
    answerable: dict[str, Any] | None = None
    if cfg.training.keep_answerable:
        questions, answerable = _keep_answerable(cfg, out, questions, index_dir, key, log)
        counts["after_keep_answerable"] = len(questions)
    _write_jsonl_atomic(out / "train.jsonl", [q.model_dump() for q in questions])
    manifest = {
        "counts": counts,
        "baseline_key": key,
        "baseline_key_hash": khash,
        "baseline_cache": {"hits": hits, "computed": len(todo), "hit_rate": hits / max(hits + len(todo), 1)},
        "baseline_mean_acc": (
            sum(float(v) for v in cached.values() if v is not None) / max(1, sum(v is not None for v in cached.values()))
        ),
        "index": str(index_dir),
        "sources": sources,
        "filters": {"drop_yes_no": cfg.training.drop_yes_no, "keep_baseline_zero": cfg.training.keep_baseline_zero,
                    "keep_answerable": cfg.training.keep_answerable},
    }
    if answerable is not None:
        manifest["answerable"] = answerable
    _write_json_atomic(out / "manifest.json", manifest)
    log(f"prepare-training: counts {counts}")
    return manifest


def _keep_answerable(
    cfg: Any, out: Path, questions: list[QAExample], index_dir: Path, key: dict[str, Any], log: Any
) -> tuple[list[QAExample], dict[str, Any]]:
    """training.keep_answerable: drop the training questions the generator gets wrong even from their gold supporting
    paragraphs, Acc(G(Q, D_gold)) = 0: whatever the searcher finds, every rollout of such a question gets the same
    reward (a zero-variance group). The last training.heldout_questions are never filtered (the held-out comparison
    keeps the natural mix), and a question without gold paragraphs is kept (nothing to judge it by).
    Acc(G(Q, D_gold)) is cached in gold.jsonl like the baseline (key: generator, prompt, metric)."""
    from searcher import retrieval

    held = cfg.training.heldout_questions
    pool, kept_out = (questions[:-held], questions[-held:]) if 0 < held < len(questions) else (questions, [])
    gkey = {k: v for k, v in key.items() if k not in ("retriever", "index", "k")} | {"context": "gold supporting paragraphs"}
    ghash = _key_hash(gkey)
    gpath = out / "gold.jsonl"
    cached = _cached_acc(gpath, ghash)
    with_gold = [q for q in pool if q.supporting_ids]
    todo = [q for q in with_gold if cached.get(q.id) is None]
    if todo:
        retriever = retrieval.load_retriever(cfg.retriever, index_dir)
        accuracy = make_accuracy(cfg)
        bs = cfg.training.baseline_batch
        for start in range(0, len(todo), bs):
            batch = todo[start : start + bs]
            docs = [retriever.get(q.supporting_ids) for q in batch]
            acc = asyncio.run(accuracy([q.question for q in batch], docs, [q.golden_answers for q in batch]))
            with gpath.open("a", encoding="utf-8") as fh:
                for q, a in zip(batch, acc, strict=True):
                    cached[q.id] = a
                    fh.write(json.dumps({"id": q.id, "acc": a, "key": ghash}) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            log(f"prepare-training: gold-context accuracy {min(start + bs, len(todo))}/{len(todo)}")
    kept = [q for q in pool if not q.supporting_ids or cached.get(q.id) == 1.0]
    stats = {
        "key": gkey, "key_hash": ghash, "judged": len(with_gold), "no_gold_kept": len(pool) - len(with_gold),
        "failed_dropped": sum(1 for q in with_gold if cached.get(q.id) is None),
        "gold_acc_mean": sum(float(cached[q.id] or 0.0) for q in with_gold if cached.get(q.id) is not None)
        / max(1, sum(1 for q in with_gold if cached.get(q.id) is not None)),
        "heldout_unfiltered": len(kept_out),
    }
    return kept + kept_out, stats


def load_training_set(cfg: Any, directory: Path | None = None) -> TrainingSet:
    """Load a prepared training directory. Every training question must have a cached baseline under the CURRENT
    key (generator, prompt, retriever, k, metric): otherwise an error, never a silent fallback."""
    d = Path(directory) if directory else training_dir(cfg)
    mpath, tpath, bpath = d / "manifest.json", d / "train.jsonl", d / "baseline.jsonl"
    for p in (mpath, tpath):
        if not p.is_file():
            raise S3Error(f"training data not prepared: {p} is missing (run `s3 prepare-training`)")
    manifest = json.loads(mpath.read_text())
    examples = [QAExample.model_validate(r) for r in _read_jsonl(tpath)]
    if not examples:
        raise S3Error(f"{tpath} has no training question left after the filters {manifest.get('counts')}")
    index_dir = Path(manifest["index"])
    baseline: dict[str, float] = {}
    if cfg.training.mode == "s3" and cfg.training.reward in ("gbr", "acc_plus_gbr"):
        khash = _key_hash(baseline_key(cfg, _index_fingerprint(index_dir)))
        if bpath.is_file():
            for r in _read_jsonl(bpath):
                if r.get("key") == khash and r.get("acc") is not None:
                    baseline[r["id"]] = float(r["acc"])
        missing = [e.id for e in examples if e.id not in baseline]
        if missing:
            raise S3Error(
                f"{len(missing)} of {len(examples)} training questions have no cached naive-RAG baseline for the "
                f"current generator/prompt/retriever/k/metric (e.g. {missing[0]!r}); run `s3 prepare-training` again"
            )
    return TrainingSet(directory=d, examples=examples, baseline=baseline, index_dir=index_dir, manifest=manifest)
