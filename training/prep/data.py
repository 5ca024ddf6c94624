"""Training data: `s3 prepare-training`.

From QA files (here ../shared/data/train_hotpotqa_musique100, via dataprep/) to a training directory:

    corpus.jsonl        the paragraphs of every source question (the retrieval corpus)
    questions.jsonl     every question loaded (FlashRAG shape)
    index/              the retriever index over corpus.jsonl (when retriever.index is not set)
    baseline.jsonl      the cached naive-RAG baseline Acc(G(Q, D_RAG)) per question; every row carries the cache
                        key (generator, prompt, retriever, k, metric) and rows with another key are ignored, so a
                        change of generator recomputes instead of silently reusing. Appended per batch: resumable.
    train.jsonl         the questions kept for training
    preparation.json    what loading did: questions and paragraphs loaded, paragraphs removed because an evaluation
                        slice has them (training.data.exclude_sources) and the questions whose gold paragraphs went with them
    manifest.json       counts after each filter, the cache key, source files

Filters (s3 §3.2): drop yes/no and true/false answers; keep questions whose baseline is 0 (configurable). A question
whose baseline call failed is dropped and counted (it is never scored as 0). At training time a question without a
cached baseline is an error (`load_training_set`), never a silent fallback. Optionally (training.data.keep_answerable) the
complementary filter: drop training questions the generator gets wrong even from their gold supporting paragraphs
(cached in gold.jsonl), whose rollouts would all get the same reward.

Acc is the evaluation layer's (eval/accuracy.py): the baseline, the gold-context accuracy and the training rewards
are scored exactly as `s3 eval` scores a row.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataprep.training_sources import load_sources
from eval.accuracy import Accuracy
from eval.build import build_accuracy
from eval.config import EvalConfig
from generator_adapters.budget import Budget, require_known_prices
from generator_adapters.build import build_generator
from generator_adapters.client import run_sync
from generator_adapters.config import GeneratorConfig, JudgeConfig
from s3core.errors import S3Error
from s3core.io import (
    append_jsonl,
    path_from,
    read_jsonl,
    repair_tail,
    text_sha256,
    write_json_atomic,
    write_jsonl_atomic,
)
from s3core.types import Document, QAExample
from searcher.build import build_retriever
from searcher.config import RetrieverConfig
from searcher.retrieval import build_index
from searcher.retrieval.base import Retriever
from searcher.trained import index_fingerprint
from training.config import TrainingData, TrainSettings
from training.rewards import reward_spec

Log = Callable[[str], object]  # where progress lines go (print by default)

__all__ = [
    "Preparation",
    "TrainingSet",
    "baseline_key",
    "data_filters",
    "is_yes_no",
    "load_training_set",
    "make_accuracy",
    "prepare_training",
    "prepared_training_set",
    "rows_with_todays_topk",
    "training_dir",
]

YES_NO = {"yes", "no", "true", "false"}


def is_yes_no(answers: list[str]) -> bool:
    """True when every gold answer is yes/no/true/false (case, spaces and final punctuation ignored).

    >>> is_yes_no(["Yes"]), is_yes_no(["no."]), is_yes_no(["True ", "false"]), is_yes_no(["Yes Minister"])
    (True, True, True, False)
    """
    return bool(answers) and all(a.strip().strip(".!").strip().lower() in YES_NO for a in answers)


def training_dir(cfg: TrainSettings) -> Path:
    """The prepared training directory: training.data.dir, else <output_dir>/data."""
    t = cfg.training
    return cfg.resolve(t.data.dir or Path(t.output_dir) / "data")


def _exclude(
    docs: list[Document], qs: list[QAExample], exclude: list[str], base_dir: Path
) -> tuple[list[Document], list[QAExample], dict[str, int]]:
    """training.data.exclude_sources: remove their paragraphs from the training corpus (paragraph ids depend only on the
    paragraph, so a paragraph two files share has one id) and drop the training questions whose gold supporting
    paragraphs were among them."""
    banned = {d.id for d in load_sources(exclude, base_dir).corpus}
    kept_docs = [d for d in docs if d.id not in banned]
    kept_qs = [q for q in qs if not banned.intersection(q.supporting_ids)]
    return kept_docs, kept_qs, {
        "excluded_paragraphs": len(docs) - len(kept_docs),
        "dropped_gold_excluded": len(qs) - len(kept_qs),
    }


def baseline_key(cfg: TrainSettings, index_fingerprint: str) -> dict[str, Any]:
    """What a cached baseline depends on: generator (model + fingerprint), prompt, retriever, k, metric."""
    generator = cfg.generator_resolved
    return _baseline_key(generator.model, _generator_fingerprint(generator), cfg.judge_resolved, cfg.eval,
                         cfg.retriever, index_fingerprint, _start_of(cfg))


def _generator_fingerprint(generator: GeneratorConfig) -> dict[str, Any]:
    gen = build_generator(generator)
    fp = gen.fingerprint()
    gen.close()
    return fp


def _start_of(cfg: TrainSettings) -> dict[str, Any] | None:
    """searcher.start's part of the baseline key: None for naive RAG's top-k (the key of every cache written before
    the setting existed), else what the script's documents depend on."""
    sc = cfg.searcher
    if sc.start == "top_k":
        return None
    return {"start": sc.start, "start_cap": sc.start_cap, "k": sc.k}


def _baseline_key(model: str, generator_fingerprint: dict[str, Any], judge: JudgeConfig, e: EvalConfig,
                  retriever: RetrieverConfig, index_fingerprint: str,
                  start: dict[str, Any] | None = None) -> dict[str, Any]:
    return ({"start": start} if start is not None else {}) | {
        "generator": model,
        "generator_fingerprint": generator_fingerprint,
        "retriever": retriever.backend,
        "index": index_fingerprint,
        "k": retriever.k,
        "metric": e.metric,
        "use_judge": e.use_judge,
        "judge": judge.model if e.use_judge or e.metric == "judge" else None,
    }


def _key_hash(key: dict[str, Any]) -> str:
    return text_sha256(json.dumps(key, sort_keys=True, default=str))[:16]


def _index_fingerprint(index_dir: Path) -> str:
    """What the index is (searcher.trained.index_fingerprint: the same corpus rebuilt elsewhere matches), so a cached
    baseline survives a rebuild of the same index and not a change of corpus or parameters."""
    fp = index_fingerprint(index_dir)
    return fp[:16] if fp is not None else str(index_dir.resolve())


def _index_ref(index_dir: Path, data_dir: Path) -> str:
    """The manifest's index: relative to the training directory when inside it (the directory can move), else absolute."""
    try:
        return str(index_dir.resolve().relative_to(data_dir.resolve()))
    except ValueError:
        return str(index_dir.resolve())


def make_accuracy(cfg: TrainSettings) -> Accuracy:
    """Acc(G(Q, D)) as the configuration sets it (eval/accuracy.py): `await accuracy(questions, documents, golden)`
    -> list[float | None]; the frozen generator answers (batched, concurrent, cached) and eval.metric scores (GenAcc
    calls the judge only when the span check fails). A failed generator or judge call gives None."""
    return build_accuracy(cfg.generator_resolved, cfg.judge_resolved, cfg.eval)


def _cached_acc(path: Path, khash: str) -> dict[str, float | None]:
    """question id -> cached accuracy (None = the call failed: retried) from the rows of `path` written under `khash`."""
    if not path.is_file():
        return {}
    return {r["id"]: r["acc"] for r in read_jsonl(path, torn_tail="skip") if r.get("key") == khash}


def data_filters(cfg: TrainSettings) -> dict[str, bool | list[str]]:
    """The training.data filters a prepared directory was filtered with (its manifest's "filters")."""
    return _filters(cfg.training.data)


def _filters(d: TrainingData) -> dict[str, bool | list[str]]:
    out: dict[str, bool | list[str]] = {
        "drop_yes_no": d.drop_yes_no, "keep_baseline_zero": d.keep_baseline_zero, "keep_answerable": d.keep_answerable}
    if d.keep_copyable:  # only when on: directories prepared before the filter existed stay prepared
        out["keep_copyable"] = True
        if d.narrows_copyable():  # likewise: only when narrowed
            out["copyable_places"] = sorted(d.copyable_places)
    return out


def _pool_and_heldout(questions: list[QAExample], held: int) -> tuple[list[QAExample], list[QAExample]]:
    """(the questions a training filter applies to, the last `held` (training.heldout.questions), which it never
    touches)."""
    return (questions[:-held], questions[-held:]) if 0 < held < len(questions) else (questions, [])


def rows_with_todays_topk(
    rows: Iterable[dict[str, Any]], hashes: Collection[str], top_ids: Mapping[str, list[str]],
) -> tuple[dict[str, dict[str, Any]], int]:
    """The cached baseline rows a run may use: written under one of `hashes`, with an accuracy, and whose top-k
    document ids are today's for their question (`top_ids`: the generator saw exactly the context it would see now).
    Returns (the accepted rows by question id, the last one of a question wins; how many rows had other ids)."""
    accepted: dict[str, dict[str, Any]] = {}
    stale = 0
    for r in rows:
        if r.get("key") not in hashes or r.get("acc") is None or r.get("id") not in top_ids or not r.get("doc_ids"):
            continue
        if r["doc_ids"] == top_ids[r["id"]]:
            accepted[r["id"]] = r
        else:
            stale += 1
    return accepted, stale


@dataclass
class PrepSpend:
    """What a preparation may spend on paid generator / judge calls (`s3 prepare-training --max-cost-usd`, cumulative
    over its invocations: RUN/data/spend.json), or, with `dry_run`, what it would spend: every batch is projected
    (prompts measured, completions at max_tokens, cached answers free) and none is called."""

    limit_usd: float | None = None
    dry_run: bool = False
    projected_usd: float = 0.0
    projected_calls: int = 0

    def budget(self, out: Path) -> Budget:
        path = out / SPEND_FILE
        spent = float(json.loads(path.read_text()).get("spent_usd", 0.0)) if path.is_file() else 0.0
        return Budget(self.limit_usd, spent_usd=spent, setting="--max-cost-usd")


SPEND_FILE = "spend.json"  # what preparations of this directory have spent so far (a budget caps the sum)


@dataclass
class TrainingSet:
    directory: Path
    examples: list[QAExample]
    baseline: dict[str, float]
    index_dir: Path
    manifest: dict[str, Any]
    baseline_key: dict[str, Any] | None = None  # the key `baseline` was read under (None: the reward reads none)


def prepare_training(cfg: TrainSettings, out_dir: Path | None = None, log: Log = print,
                     spend: PrepSpend | None = None) -> dict[str, Any]:
    """Build (or complete) the training directory and return its manifest (`Preparation.prepare`). `spend`: a cap on
    the paid calls, or a dry run (the manifest is not written: the projection is in `spend`)."""
    return Preparation(cfg, out_dir, log, spend).prepare()


def prepared_training_set(cfg: TrainSettings, log: Log = print) -> TrainingSet:
    """The training set of [training.data], prepared first where it is not (`Preparation.prepared`)."""
    return Preparation(cfg, log=log).prepared()


def load_training_set(cfg: TrainSettings, directory: Path | None = None) -> TrainingSet:
    """Load a prepared training directory (`Preparation.load`): every training question must have a cached baseline
    under the CURRENT key, else an error, never a silent fallback."""
    return Preparation(cfg, directory).load()


class Preparation:
    """One preparation (or load) of a training directory. The configuration is read here, once, into the plain
    values and sections the steps take; the retriever over the index is built on first use and shared by the steps
    (the baseline, its re-keying, the gold-context accuracy, keep_copyable and the run's distillation search one
    index)."""

    def __init__(self, cfg: TrainSettings, directory: Path | None = None, log: Log = print,
                 spend: PrepSpend | None = None) -> None:
        t = cfg.training
        self.out = Path(directory) if directory else training_dir(cfg)
        self.data = t.data  # [training.data]: sources, filters, the baseline's batch
        self.base_dir = cfg.base_dir  # the sources' paths resolve against it
        self.heldout = t.heldout.questions  # never filtered
        self.reward_reads_baseline = reward_spec(t.reward).reads_baseline(t.mode)  # the GBR rewards (their entries)
        self.needs_baseline = t.data.keep_baseline_zero or self.reward_reads_baseline  # ... and s3's filter
        self.retrieval = cfg.retriever
        self.start = _start_of(cfg)  # searcher.start: the baseline's documents are the searcher's D0
        self.searcher = cfg.searcher
        self.index_dir = cfg.resolve(cfg.retriever.index) if cfg.retriever.index else self.out / "index"
        self.generator, self.judge, self.eval = cfg.generator_resolved, cfg.judge_resolved, cfg.eval
        self.log, self.spend = log, spend
        self._retrievers: dict[Path, Retriever] = {}
        self._generator_fp: dict[str, Any] | None = None

    def prepared(self) -> TrainingSet:
        """The training set, prepared first where it is not (`s3 train`'s preparation stage, the same work as
        `s3 prepare-training`): missing, filtered under other training.data filters, or without today's baseline
        (another generator, prompt, index, k or metric). The caches make a repeated preparation cost no call it paid
        for before."""
        d, log = self.out, self.log
        why = None
        if not (d / "manifest.json").is_file() or not (d / "train.jsonl").is_file():
            why = "not prepared yet"
        else:
            try:
                data = self.load()
            except S3Error as e:
                why = str(e)
            else:
                wanted = _filters(self.data)
                if data.manifest.get("filters", wanted) == wanted:
                    log(f"train: preparation: {d} is prepared ({len(data.examples)} training questions)")
                    return data
                why = f"training.data filters {wanted} differ from the prepared {data.manifest.get('filters')}"
        log(f"train: preparation: preparing the training data in {d} ({why})")
        self.prepare()
        return self.load()

    def load(self) -> TrainingSet:
        """The prepared training directory. Every training question must have a cached baseline under the CURRENT
        key (generator, prompt, retriever, k, metric) when the reward reads it: otherwise an error, never a silent
        fallback."""
        d = self.out
        mpath, tpath, bpath = d / "manifest.json", d / "train.jsonl", d / "baseline.jsonl"
        for p in (mpath, tpath):
            if not p.is_file():
                raise S3Error(f"training data not prepared: {p} is missing (run `s3 prepare-training`)")
        try:
            manifest = json.loads(mpath.read_text())
            index_dir = Path(manifest["index"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            why = "has no \"index\"" if isinstance(e, KeyError | TypeError) else f"is not JSON ({e})"
            raise S3Error(f"training data not prepared: {mpath} {why} (`s3 prepare-training` prepares it again)") from None
        examples = [QAExample.model_validate(r) for r in read_jsonl(tpath)]
        if not examples:
            raise S3Error(f"{tpath} has no training question left after the filters {manifest.get('counts')}")
        if not index_dir.is_absolute():
            index_dir = d / index_dir  # inside the training directory: wherever the directory is (a clone, a copy)
        baseline: dict[str, float] = {}
        key = None
        if self.reward_reads_baseline:
            key = self.key(index_dir)
            baseline = {k: float(v) for k, v in _cached_acc(bpath, _key_hash(key)).items() if v is not None}
            missing = [e.id for e in examples if e.id not in baseline]
            if missing:
                raise S3Error(
                    f"{len(missing)} of {len(examples)} training questions have no cached naive-RAG baseline for the "
                    f"current generator/prompt/retriever/k/metric (e.g. {missing[0]!r}); run `s3 prepare-training` again"
                )
        return TrainingSet(directory=d, examples=examples, baseline=baseline, index_dir=index_dir, manifest=manifest,
                           baseline_key=key)

    def key(self, index_dir: Path) -> dict[str, Any]:
        """The cached baseline's key over `index_dir` (`baseline_key`; the generator's fingerprint taken once, the
        index's each time: a preparation may build the index between two keys)."""
        if self._generator_fp is None:
            self._generator_fp = _generator_fingerprint(self.generator)
        return _baseline_key(self.generator.model, self._generator_fp, self.judge, self.eval, self.retrieval,
                             _index_fingerprint(index_dir), self.start)

    def _baseline_documents(self) -> Callable[[Retriever, list[QAExample]], list[list[Document]]]:
        """The documents the baseline's generator call sees: naive RAG's top-k, or (searcher.start =
        'title_following') the title-following script's documents, the searcher's D0 either way, so GBR is the gain
        beyond what the searcher starts from."""
        k = self.retrieval.k
        if self.start is None:
            return lambda r, batch: r.search([q.question for q in batch], k)
        from searcher.base import Start
        from searcher.kinds import build_start

        starts: dict[int, Start] = {}

        def documents(r: Retriever, batch: list[QAExample]) -> list[list[Document]]:
            if id(r) not in starts:  # the start the searcher's loop begins from (searcher.start), the same settings
                starts[id(r)] = build_start(self.searcher, r, k)
            return starts[id(r)].documents([q.question for q in batch], self.searcher)

        return documents

    def prepare(self) -> dict[str, Any]:
        """Build (or complete) the training directory and return its manifest, in five steps, each skipped where it is
        done already:

            load        training.data.sources -> corpus.jsonl, questions.jsonl (exclude_sources, shuffle, max_questions)
            filter      drop yes/no answers (training.data.drop_yes_no); the index over corpus.jsonl
            baseline    naive RAG's Acc per question, cached (baseline.jsonl); keep the 0s (training.data.keep_baseline_zero)
            answerable  keep those answered from their gold paragraphs (gold.jsonl; training.data.keep_answerable)
            copyable    keep those whose missing gold title is visible (training.data.keep_copyable)

        With a spend cap, BudgetReached before a batch that could pass it (what is cached stays, and the same command
        with a higher cap resumes); in a dry run the corpus and index are built, no paid call is made, and the
        manifest is not written: the projection is in the spend."""
        d, out, spend = self.data, self.out, self.spend
        out.mkdir(parents=True, exist_ok=True)
        questions, counts, sources = self._load()
        if d.drop_yes_no:  # a coin flip's reward
            questions = [q for q in questions if not is_yes_no(q.golden_answers)]
        counts["after_drop_yes_no"] = len(questions)
        index_dir = self.ensure_index()
        manifest: dict[str, Any] = {"counts": counts}
        if self.needs_baseline:
            questions, entries = self._baseline(questions, counts)
            manifest |= entries
            key = entries["baseline_key"]
        else:  # nothing reads the baseline (no GBR reward, no baseline filter): no generator call for it
            manifest["baseline"] = "skipped (reward needs none, keep_baseline_zero=false)"
            key = self.key(index_dir) if d.keep_answerable else {}
        if d.keep_answerable:  # in a dry run every question is projected (which ones naive RAG fails is not known yet)
            questions, manifest["answerable"] = self._keep_answerable(questions, key)
            counts["after_keep_answerable"] = len(questions)
        if d.keep_copyable:
            questions, manifest["copyable"] = self._keep_copyable(questions)
            counts["after_keep_copyable"] = len(questions)
        manifest |= {"index": _index_ref(index_dir, out), "sources": sources, "filters": _filters(d)}
        if spend is not None and spend.dry_run:
            return manifest
        write_jsonl_atomic(out / "train.jsonl", [q.model_dump() for q in questions])
        write_json_atomic(out / "manifest.json", manifest)
        self.log(f"prepare-training: counts {counts}" + ("" if self.needs_baseline else " (baseline skipped)"))
        return manifest

    def ensure_index(self) -> Path:
        """The index directory: retriever.index when configured (built over corpus.jsonl if absent), else
        <directory>/index."""
        index_dir = self.index_dir
        if not index_dir.exists() or not any(index_dir.iterdir()):
            corpus = self.out / "corpus.jsonl"
            if not corpus.is_file():
                raise S3Error(f"cannot build the index {index_dir}: {corpus} is missing (run `s3 prepare-training`)")
            build_index(corpus, self.retrieval.backend, index_dir, self.retrieval, overwrite=True)
        return index_dir

    def retriever(self, index_dir: Path | None = None) -> Retriever:
        """The retriever ([retriever]) over `index_dir` (default: this preparation's index), built on first use and
        kept: one index is loaded once however many steps search it."""
        d = self.index_dir if index_dir is None else index_dir
        key = d.resolve()  # one index under two spellings (relative, absolute) is still loaded once
        if key not in self._retrievers:
            self._retrievers[key] = build_retriever(self.retrieval, d)
        return self._retrievers[key]

    def _load(self) -> tuple[list[QAExample], dict[str, int], list[dict[str, Any]]]:
        """Step 1: the questions and paragraphs of training.data.sources, less what an evaluation slice has
        (exclude_sources), shuffled (shuffle_seed), cut (max_questions), written once (corpus.jsonl, questions.jsonl,
        sources.json, preparation.json). Returns (the questions, the counts so far, the sources)."""
        d, out = self.data, self.out
        qpath, cpath, prep_path = out / "questions.jsonl", out / "corpus.jsonl", out / "preparation.json"
        sources: list[dict[str, Any]] = []
        if not qpath.is_file() or not cpath.is_file():
            docs, qs, sources = load_sources(d.sources, self.base_dir)
            prep = {"loaded_questions": len(qs), "loaded_paragraphs": len(docs)}
            if d.exclude_sources:
                docs, qs, excluded = _exclude(docs, qs, d.exclude_sources, self.base_dir)
                prep |= excluded
            if d.shuffle_seed is not None:
                random.Random(d.shuffle_seed).shuffle(qs)
            if d.max_questions:
                qs = qs[: d.max_questions]
            write_jsonl_atomic(cpath, [{"id": x.id, "contents": x.contents} for x in docs])
            write_jsonl_atomic(qpath, [q.model_dump() for q in qs])
            sources = [{**s, "path": path_from(out, s["path"])} for s in sources]  # the directory can move with its data
            write_json_atomic(out / "sources.json", sources)
            write_json_atomic(prep_path, prep)
            self.log(f"prepare-training: {len(qs)} questions, {len(docs)} paragraphs -> {out}")
        elif (out / "sources.json").is_file():
            sources = json.loads((out / "sources.json").read_text())
        prepared = json.loads(prep_path.read_text()) if prep_path.is_file() else {}
        questions = [QAExample.model_validate(r) for r in read_jsonl(qpath)]
        counts: dict[str, int] = {k: int(v) for k, v in prepared.items() if isinstance(v, int)} | {"loaded": len(questions)}
        return questions, counts, sources

    def _baseline(self, questions: list[QAExample], counts: dict[str, int]) -> tuple[list[QAExample], dict[str, Any]]:
        """Step 3: naive RAG's Acc(G(Q, D_RAG)) of every question, cached in baseline.jsonl under the key of what it
        depends on (rows of an index rebuilt with the same retrieval carried over: `_rekey`); the questions whose
        call failed dropped, and with training.data.keep_baseline_zero the training part kept where it is 0. Returns
        (the questions kept, the manifest's baseline_* entries). A dry run projects the calls and filters nothing."""
        key = self.key(self.index_dir)
        khash = _key_hash(key)
        bpath = self.out / "baseline.jsonl"
        cached = _cached_acc(bpath, khash)
        todo = [q for q in questions if q.id not in cached or cached[q.id] is None]  # failed ones are retried
        dry_run = self.spend is not None and self.spend.dry_run
        rekeyed = 0
        if todo and not dry_run:
            rekeyed = self._rekey(todo, key, cached)
            todo = [q for q in todo if cached.get(q.id) is None]
        hits = len(questions) - len(todo)
        used: dict[str, Any] | None = None
        if todo:
            used = self._compute_acc(todo, self._baseline_documents(), bpath, khash, cached, "baseline")
        entries = {
            "baseline_key": key,
            "baseline_key_hash": khash,
            "baseline_cache": {"hits": hits, "computed": len(todo), "hit_rate": hits / max(hits + len(todo), 1),
                               "rekeyed_same_doc_ids": rekeyed},
            "baseline_spend": used,  # this preparation's generator / judge spend (None: nothing was computed)
            "baseline_mean_acc": (
                sum(float(v) for v in cached.values() if v is not None) / max(1, sum(v is not None for v in cached.values()))
            ),
        }
        if dry_run:
            return questions, entries
        counts["baseline_failed"] = sum(1 for q in questions if cached.get(q.id) is None)
        questions = [q for q in questions if cached.get(q.id) is not None]
        counts["after_baseline_ok"] = len(questions)
        if self.data.keep_baseline_zero:  # s3's filter; the held-out questions keep the natural mix
            pool, kept_out = _pool_and_heldout(questions, self.heldout)
            questions = [q for q in pool if cached[q.id] == 0.0] + kept_out
        counts["after_keep_baseline_zero"] = len(questions)
        return questions, entries

    def _rekey(self, todo: list[QAExample], key: dict[str, Any], cached: dict[str, float | None]) -> int:
        """Carry cached baseline rows over an index rebuild whose fingerprint changed (index.json's self-description
        gains a field, a library writes its parameters differently) while the retrieval did not. A row written under
        the previous manifest's key is accepted when that key differs from today's in the index fingerprint only AND
        the row's top-k document ids are today's top-k for its question: the generator saw exactly the context it
        would see now. Accepted rows are appended under today's key (so `load` reads them) and put into `cached`; any
        other row is stale and its question recomputed. Returns how many were carried over."""
        mpath, bpath = self.out / "manifest.json", self.out / "baseline.jsonl"
        if not mpath.is_file() or not bpath.is_file() or self.start is not None:
            return 0  # (the title-following start's documents are not a top-k to compare: recomputed)
        old_key = json.loads(mpath.read_text()).get("baseline_key") or {}
        if not old_key or old_key.get("index") == key["index"] or {**old_key, "index": key["index"]} != key:
            return 0  # no previous key, the same key, or another generator / prompt / k / metric: nothing to carry
        old_hash, khash = _key_hash(old_key), _key_hash(key)
        wanted = {q.id: q for q in todo}
        rows = [r for r in read_jsonl(bpath, torn_tail="skip") if r.get("key") == old_hash and r.get("id") in wanted
                and r.get("acc") is not None and r.get("doc_ids")]  # retrieve only for the rows that could carry over
        ask = [wanted[i] for i in dict.fromkeys(r["id"] for r in rows)]
        if not ask:
            return 0
        k = self.retrieval.k
        top = self.retriever().search([q.question for q in ask], k)
        top_ids = {q.id: [d.id for d in docs] for q, docs in zip(ask, top, strict=True)}
        accepted, _ = rows_with_todays_topk(rows, {old_hash}, top_ids)
        carried = [{**r, "key": khash} for r in accepted.values()]
        repair_tail(bpath)
        append_jsonl(bpath, carried)
        cached.update({r["id"]: float(r["acc"]) for r in carried})
        self.log(f"prepare-training: the index fingerprint changed ({old_key['index']} -> {key['index']}); "
                 f"{len(carried)} of {len(ask)} cached baseline rows have today's top-{k} document ids and were "
                 f"carried over, {len(ask) - len(carried)} are recomputed")
        return len(carried)

    def _compute_acc(
        self,
        todo: list[QAExample],
        documents: Callable[[Retriever, list[QAExample]], list[list[Document]]],
        path: Path,
        khash: str,
        cached: dict[str, float | None],
        what: str,
    ) -> dict[str, Any]:
        """Acc(G(Q, D)) of the `todo` questions, D = documents(retriever, batch), in batches of
        training.data.baseline_batch; each batch is appended to the cache `path` under `khash` (resumable) and into
        `cached`. Returns what the calls spent (Accuracy.usage(): paid calls, tokens, dollars, cache hits; `cost_usd`
        None when a price is unknown)."""
        spend, log = self.spend, self.log
        retriever = self.retriever()
        accuracy = build_accuracy(self.generator, self.judge, self.eval)
        try:
            bs = self.data.baseline_batch
            budget = spend.budget(path.parent) if spend is not None and not spend.dry_run else None
            if spend is not None and (spend.dry_run or spend.limit_usd is not None):
                require_known_prices(accuracy.clients(), "--max-cost-usd")  # an unknown price is refused, never taken as 0
            repair_tail(path)  # a line torn by a kill: cut before appending
            for start in range(0, len(todo), bs):
                batch = todo[start : start + bs]
                docs = documents(retriever, batch)
                qs, golds = [q.question for q in batch], [q.golden_answers for q in batch]
                usd = float(sum(accuracy.project(qs, docs, golds))) if spend is not None else 0.0
                if spend is not None and spend.dry_run:
                    spend.projected_usd += usd
                    spend.projected_calls += len(batch)
                    continue
                if budget is not None:
                    budget.check(usd, f"prepare-training: {what} of questions {start + 1}-{start + len(batch)} of {len(todo)}")
                    budget.reserve(usd)
                before = float(accuracy.usage().get("cost_usd") or 0.0)
                try:
                    acc = run_sync(accuracy(qs, docs, golds))
                finally:
                    if budget is not None:
                        budget.settle(usd, float(accuracy.usage().get("cost_usd") or 0.0) - before)
                        write_json_atomic(path.parent / SPEND_FILE, {"spent_usd": budget.spent_usd})
                rows = [{"id": q.id, "acc": a, "key": khash, "doc_ids": [d.id for d in ds]}
                        for q, a, ds in zip(batch, acc, docs, strict=True)]
                append_jsonl(path, rows)
                cached.update({q.id: a for q, a in zip(batch, acc, strict=True)})
                log(f"prepare-training: {what} {min(start + bs, len(todo))}/{len(todo)}")
            usage: dict[str, Any] = {k: v for k, v in accuracy.usage().items() if k not in ("generator_calls",)}
            if usage.get("unknown_cost_calls"):
                usage["cost_usd"] = None
        finally:
            accuracy.close()  # its clients, whatever stopped it (a budget, a failed call, a kill)
        cost = "unknown (no price)" if usage.get("cost_usd") is None else f"${usage['cost_usd']:.6f}"
        log(f"prepare-training: {what} cost {cost} for {int(usage.get('paid_calls', 0))} paid calls, "
            f"{int(usage.get('cache_hits', 0))} cache hits")
        return usage

    def _keep_answerable(self, questions: list[QAExample], key: dict[str, Any]) -> tuple[list[QAExample], dict[str, Any]]:
        """Step 4, training.data.keep_answerable: drop the training questions the generator gets wrong even from their
        gold supporting paragraphs, Acc(G(Q, D_gold)) = 0: whatever the searcher finds, every rollout of such a
        question gets the same reward (a zero-variance group). The last training.heldout.questions are never filtered
        (the held-out comparison keeps the natural mix), and a question without gold paragraphs is kept (nothing to
        judge it by). Acc(G(Q, D_gold)) is cached in gold.jsonl like the baseline (key: generator, prompt, metric)."""
        pool, kept_out = _pool_and_heldout(questions, self.heldout)
        gkey = {k: v for k, v in key.items() if k not in ("retriever", "index", "k")} | {"context": "gold supporting paragraphs"}
        ghash = _key_hash(gkey)
        gpath = self.out / "gold.jsonl"
        cached = _cached_acc(gpath, ghash)
        with_gold = [q for q in pool if q.supporting_ids]
        todo = [q for q in with_gold if cached.get(q.id) is None]
        if todo:
            self._compute_acc(todo, lambda r, batch: [r.get(q.supporting_ids) for q in batch], gpath, ghash, cached,
                              "gold-context accuracy")
        kept = [q for q in pool if not q.supporting_ids or cached.get(q.id) == 1.0]
        stats = {
            "key": gkey, "key_hash": ghash, "judged": len(with_gold), "no_gold_kept": len(pool) - len(with_gold),
            "failed_dropped": sum(1 for q in with_gold if cached.get(q.id) is None),
            "gold_acc_mean": sum(float(cached[q.id] or 0.0) for q in with_gold if cached.get(q.id) is not None)
            / max(1, sum(1 for q in with_gold if cached.get(q.id) is not None)),
            "heldout_unfiltered": len(kept_out),
        }
        return kept + kept_out, stats

    def _keep_copyable(self, questions: list[QAExample]) -> tuple[list[QAExample], dict[str, Any]]:
        """Step 5, training.data.keep_copyable: keep the training questions whose naive-RAG top-k lacks a gold
        paragraph the copyable teacher could ask for (its title visible in the question or a top-k document:
        training/prep/oracle.py `copyable_gold`), where it is visible in one of training.data.copyable_places
        (`missing_gold_place`). On the others no visible title adds gold, and a searcher's search there can only cost.
        The last training.heldout.questions are never filtered; no generator call."""
        from training.prep.oracle import GOLD_PLACES, missing_gold_place

        pool, kept_out = _pool_and_heldout(questions, self.heldout)
        retriever = self.retriever()
        tops = retriever.search([q.question for q in pool], self.retrieval.k)
        keep = set(self.data.copyable_places)
        kept: list[QAExample] = []
        places = dict.fromkeys(GOLD_PLACES, 0)
        for q, top in zip(pool, tops, strict=True):
            place = missing_gold_place(q.question, top, retriever.get(q.supporting_ids))
            places[place] += 1
            if place in keep:
                kept.append(q)
        return kept + kept_out, {"pool": len(pool), "kept": len(kept), "heldout_unfiltered": len(kept_out),
                                 "places": places}
