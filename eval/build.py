"""The evaluation layer's typed build layer: Acc, and every piece of an `s3 eval` run, from the config sections.

    accuracy = build_accuracy(cfg.generator_resolved, cfg.judge_resolved, cfg.eval)  # what training uses too
    dataset, components, config = build_run(cfg, opts)  # cfg: any EvalSettings (s3.config.S3Config is one)

The retriever, the policy and the searcher come from searcher/build.py, the generator and the judge from
generator_adapters/build.py. `build_run` also records the run's identity (run.json, eval/rundir.py): what was built,
with the hashes that make two runs comparable (questions, corpus, contexts file, prompt, GGUF).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from eval.accuracy import Accuracy, Prediction, Scores
from eval.config import EvalConfig, EvalSettings
from eval.contexts import (
    ContextFn,
    ContextOut,
    agent_contexts,
    contexts_sha256,
    fixed_contexts,
    lookup_documents,
    no_contexts,
    read_contexts_file,
    retriever_contexts,
)
from eval.harness import AnswerFn, Components, Dataset, EvalOptions, ScoreFn, load_dataset
from eval.rundir import TRAJECTORIES_FILE
from generator_adapters.budget import Budget, require_known_prices
from generator_adapters.build import build_generator, build_judge, check_key
from generator_adapters.config import GeneratorConfig, JudgeConfig
from generator_adapters.generator import Generator
from generator_adapters.judge import Judge
from s3core.errors import ConfigError, DataFormatError, S3Error
from s3core.io import JsonObject, file_sha256
from s3core.types import Document, QAExample
from searcher.build import build_configured_searcher, build_retriever
from searcher.config import RetrieverConfig
from searcher.identity import gguf_sha256, relative
from searcher.retrieval.base import Retriever
from searcher.retrieval.metrics import supporting_ids_in_index

log = logging.getLogger("s3.eval")


def build_accuracy(
    generator: GeneratorConfig | None, judge: JudgeConfig, eval: EvalConfig, *, judge_only: bool = False
) -> Accuracy:
    """Acc(G(Q, D)) as [eval] configures it. The judge is built only where GenAcc asks it: eval.metric = "genacc"
    with eval.use_judge, eval.metric = "judge" (judge-only), or `judge_only` (a multiple-choice dataset).
    `generator=None`: no frozen generator (an agent answers itself); the Accuracy only scores answers."""
    uses_judge = judge_only or eval.metric == "judge" or (eval.metric == "genacc" and eval.use_judge)
    return Accuracy(
        build_generator(generator) if generator is not None else None,
        build_judge(judge) if uses_judge else None,
        eval.metric,
        judge_only=judge_only,
    )


def build_run(cfg: EvalSettings, opts: EvalOptions) -> tuple[Dataset, Components, JsonObject]:
    """Assemble the real pieces of `s3 eval` from the configuration (plus the options): the dataset, the context
    source of the method, Acc (generator and judge), and the run's identity for run.json."""
    method = opts.method
    generator = None
    if method != "search_r1":  # the Search-R1 agent answers itself
        generator = cfg.generator_resolved
        if opts.generator:
            generator = generator.model_copy(update={"model": opts.generator})
        check_key(generator, "generator")  # a key that is not configured: one error now, before anything loads
    dataset = load_dataset(opts.dataset, opts.limit)
    rcfg = cfg.retriever
    index_dir = opts.index or cfg.resolve(rcfg.index)
    needs_index = method in ("naive_rag", "title_following", "search_r1", "search_r1_ret") or (method == "searcher" and opts.contexts is None)
    if needs_index and index_dir is None:
        raise ConfigError(f"--method {method} needs a retrieval index: pass --index DIR or set retriever.index")
    retriever = None
    if index_dir is not None and (needs_index or "index" in opts.given):
        retriever = build_retriever(rcfg, index_dir)

    config: JsonObject = {
        "dataset": {"name": dataset.name, "format": dataset.manifest.get("format"), "dir": relative(dataset.dir, opts.out),
                    "questions_sha256": dataset.questions_sha256,
                    "n_questions": len(dataset.questions), "limit": opts.limit},
        "method": method,
        "batch_size": opts.batch_size,
    }
    if retriever is not None and method != "no_retrieval":
        _check_same_corpus(index_dir, dataset)
    if retriever is not None:
        config["retriever"] = _retriever_fingerprint(rcfg, retriever, index_dir, dataset)
        config["retriever"]["index"] = relative(index_dir, opts.out) if index_dir is not None else None
        coverage = supporting_ids_in_index(retriever, [q.supporting_ids for q in dataset.questions])
        if coverage is not None and method != "no_retrieval":
            held, total = coverage
            config["retriever"]["supporting_ids_in_index"] = round(held / total, 4)
            if held == 0:
                log.warning(f"warning: none of the {total} supporting ids of {dataset.name} is in the index "
                            f"{index_dir}: it was built from another corpus, so support recall will be 0")
            elif held < total:
                log.warning(f"warning: {total - held} of {total} supporting ids of {dataset.name} are not in the index")

    contexts: ContextFn
    if method == "no_retrieval":
        contexts = no_contexts
    elif method == "naive_rag":
        assert retriever is not None  # needs_index above
        contexts = retriever_contexts(retriever, rcfg.k)
    elif method == "searcher" and opts.contexts is not None:
        contexts = _contexts_file(opts.contexts, dataset, retriever)
        config["contexts"] = {"file": relative(opts.contexts, opts.out), "sha256": contexts_sha256(opts.contexts)}
        if "retriever" not in config:
            config["retriever"] = {"backend": "contexts-file", "k": None,
                                   "corpus_sha256": file_sha256(dataset.corpus_path) if dataset.corpus_path else None}
    else:
        assert retriever is not None  # needs_index above
        s = cfg.searcher
        if method == "title_following":
            s = s.model_copy(update={"kind": "title_following", "policy_path": None})  # the method names the script
        agent = build_configured_searcher(s, retriever, k0=rcfg.k,
                                          agent="search_r1" if method.startswith("search_r1") else "s3")
        contexts = agent_contexts(agent, own_answer=(method == "search_r1"),
                                  trajectories=None if opts.dry_run else opts.out / TRAJECTORIES_FILE)
        config["searcher"] = agent.identity(opts.out)  # searcher/base.py: what ran, paths relative to the run
        if method == "search_r1":
            config["generator"] = {"model": f"{s.model} (search_r1 agent)", "prompt_sha256": "search_r1"}

    accuracy = build_accuracy(generator, cfg.judge_resolved, cfg.eval, judge_only=dataset.judge_only)
    if accuracy.generator is not None:
        config["generator"] = _llm_fingerprint(accuracy.generator)
    if accuracy.judge is not None:
        config["judge"] = {**_llm_fingerprint(accuracy.judge),
                           "mode": "judge_only" if accuracy.judge_only else "span_or_judge"}
    else:
        config["judge"] = {"model": None, "mode": "span_only"}
    e = cfg.eval
    config["eval"] = {"metric": e.metric, "use_judge": e.use_judge, "bootstrap_samples": e.bootstrap_samples,
                      "seed": e.seed}

    budget_usd = opts.max_cost_usd if opts.max_cost_usd is not None else e.budget_usd
    budget = None
    if budget_usd is not None:
        setting = "--max-cost-usd" if opts.max_cost_usd is not None else "eval.budget_usd"
        require_known_prices(accuracy.clients(), setting)
        budget = Budget(budget_usd, setting=setting)
    comp = Components(
        contexts=contexts,
        answer=None if accuracy.generator is None else answerer(accuracy, no_context=method == "no_retrieval"),
        score=scorer(accuracy),
        cache_stats=accuracy.cache_stats,
        close=accuracy.close,
        has_contexts=method != "no_retrieval",
        usage=accuracy.usage,
        project=projector(accuracy, no_context=method == "no_retrieval"),
        budget=budget,
        unpriced=[f"{section}.model = {c.cfg.model!r}" for section, c in accuracy.clients().items()
                  if c is not None and c.price is None],
    )
    return dataset, comp, config


def projector(accuracy: Accuracy, *, no_context: bool = False) -> Callable[[list[QAExample], list[ContextOut]], list[float]]:
    """The harness's projection: the most each question's paid calls can cost (`Accuracy.project`); a question whose
    context failed makes no call; an agent that answers itself (search_r1) only costs its judge call."""

    def project(qs: list[QAExample], ctxs: list[ContextOut]) -> list[float]:
        live = [i for i, c in enumerate(ctxs) if c.error is None]
        got = accuracy.project([qs[i].question for i in live], None if no_context else [ctxs[i].documents for i in live],
                               [qs[i].golden_answers for i in live], answers=accuracy.generator is not None)
        out = [0.0] * len(qs)
        for i, usd in zip(live, got, strict=True):
            out[i] = usd
        return out

    return project


def answerer(accuracy: Accuracy, *, no_context: bool = False) -> AnswerFn:
    """The harness's AnswerFn: G(Q, D) through `accuracy`; `no_context` asks without documents (no_retrieval)."""

    async def answer(qs: list[QAExample], ctxs: list[list[Document]]) -> list[Prediction]:
        return await accuracy.answer([q.question for q in qs], None if no_context else ctxs)

    return answer


def scorer(accuracy: Accuracy) -> ScoreFn:
    """The harness's ScoreFn: Acc's metrics of the answers; a question flagged `metadata.multiple_choice` is judged
    alone (a span match on an option letter means nothing)."""

    async def score(qs: list[QAExample], answers: list[str]) -> list[Scores]:
        return await accuracy.score(answers, [q.golden_answers for q in qs],
                                    multiple_choice=[bool(q.metadata.get("multiple_choice")) for q in qs])

    return score


def _contexts_file(path: Path, dataset: Dataset, retriever: Retriever | None) -> ContextFn:
    """The documents a contexts file names per question, their texts from the index (or the dataset's corpus)."""
    raw = read_contexts_file(path, [q.id for q in dataset.questions])
    wanted_ids = {str(d["id"]) for docs in raw.values() for d in docs}
    if retriever is None and dataset.corpus_path is None:
        raise DataFormatError(f"{dataset.dir} has no corpus.jsonl to look context texts up in: pass --index DIR")
    if retriever is not None:
        texts = lookup_documents(wanted_ids, None, retriever.get)
    else:
        texts = lookup_documents(wanted_ids, dataset.corpus_path, None)
    return fixed_contexts({q: [texts[str(d["id"])] for d in docs] for q, docs in raw.items()})


# ----------------------------------------------------------------------------------------------- run identity


def _llm_fingerprint(llm: Generator | Judge) -> JsonObject:
    """What run.json records of the generator or the judge: its fingerprint (model, api_base, prompt, decoding, GGUF),
    with the identity keys prompt_sha256, temperature, max_tokens and gguf_sha256 at the top level."""
    fp = llm.fingerprint()
    fp["prompt_sha256"] = fp.pop("prompt_hash")
    fp["temperature"] = fp["decoding"]["temperature"]
    fp["max_tokens"] = fp["decoding"]["max_tokens"]
    if not fp.get("gguf_sha256"):
        fp["gguf_sha256"] = gguf_sha256(str(fp["model"]), fp.get("api_base"))
    return fp


def _check_same_corpus(index_dir: Path | None, dataset: Dataset) -> None:
    """A dataset that brings its corpus is evaluated over an index of that corpus: an index whose manifest records
    another corpus sha256 is refused before the first call (its documents would be scored against these questions)."""
    if index_dir is None or dataset.corpus_path is None or not dataset.corpus_path.is_file():
        return
    from searcher.retrieval.store import read_manifest

    try:
        corpus = read_manifest(index_dir).corpus
    except S3Error:
        return  # not a local index of ours (prebuilt, remote): build_retriever already said what is wrong
    if corpus is None or not corpus.sha256:
        return
    want = file_sha256(dataset.corpus_path)
    if corpus.sha256 != want:
        raise ConfigError(
            f"the index {index_dir} was built from another corpus ({corpus.path or '?'}, sha256 {corpus.sha256[:12]}...) "
            f"than the dataset's {dataset.corpus_path} (sha256 {want[:12]}...): build its index with `s3 index build "
            f"--corpus {dataset.corpus_path} --out DIR` and pass --index DIR"
        )


def _retriever_fingerprint(
    cfg: RetrieverConfig, retriever: Retriever, index_dir: Path | None, dataset: Dataset
) -> JsonObject:
    fp: JsonObject = {"backend": retriever.backend, "k": cfg.k, "index": str(index_dir) if index_dir else None}
    corpus_sha = None
    if index_dir is not None:
        with contextlib.suppress(Exception):
            from searcher.retrieval.store import read_manifest

            m = read_manifest(index_dir)
            corpus_sha = m.corpus.sha256 if m.corpus else None
            fp["index_params"] = m.params
            fp["doc_count"] = m.doc_count
    if corpus_sha is None and dataset.corpus_path is not None:
        corpus_sha = file_sha256(dataset.corpus_path)
    fp["corpus_sha256"] = corpus_sha
    return fp
