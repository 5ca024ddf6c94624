"""`s3 analyze RUN_DIR...` (what searchers do: behaviour rates, per-turn value, over-/under-search, collapse) and
`s3 report RUN_DIR` (a static HTML trajectory browser of one run).

    s3 analyze runs/eval/untrained runs/eval/trained --out runs/analysis --probe --genacc-questions 40
    s3 analyze runs/eval/search_r1 --out runs/analysis_r1 --labels hand_labels.jsonl
    s3 analyze runs/train/grpo --out runs/analysis_train        # a training run: search/ metrics and collapse
    s3 report runs/eval/trained                                 # runs/eval/trained/report/index.html
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from s3core.io import stored

if TYPE_CHECKING:
    from eval.analysis import RunData, S3Analysis
    from eval.oversearch import R1Analysis
    from s3.config import S3Config


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "analyze", parents=[common], help="what searchers do: redundant turns, premature stops, per-turn recall / "
        "GenAcc, over-/under-search, hops, collapse (md, csv, png)",
        description="Analyse `s3 eval` runs of the searcher (s3 mode) and Search-R1 modes, and training runs "
        "(metrics.jsonl: search/ metrics and search collapse). Rates carry 95% bootstrap intervals over questions; "
        "several runs are compared side by side. Writes OUT/analysis.md, analysis.json, behavior.csv, per_turn.csv "
        "and PNG plots, and hops.csv only where questions carry an annotated hop count (MuSiQue's ids, Bamboogle; "
        "not HotpotQA or 2WikiMultihopQA: analysis.md then says there is none).",
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="`s3 eval` run folders and/or training run folders")
    p.add_argument("--out", required=True, metavar="DIR", help="where the report goes")
    p.add_argument("--dataset", default=None, metavar="DIR",
                   help="prepared dataset folder with the gold paragraphs (default: the one run.json names, else "
                   "RUN_DIR/../data)")
    p.add_argument("--index", default=None, metavar="DIR",
                   help="retrieval index for --probe / --genacc-questions / over-search (default: the run's)")
    p.add_argument("--probe", action="store_true",
                   help="judge premature stops: one bridge-query retrieval per stop (question + kept titles)")
    p.add_argument("--genacc-questions", type=int, default=0, metavar="N",
                   help="marginal GenAcc per turn on the first N questions of each searcher run (generator calls)")
    p.add_argument("--over-search-steps", type=int, default=None, metavar="N",
                   help="Search-R1 runs: measure over-search on the first N search steps (default all; 0 = skip)")
    p.add_argument("--labels", default=None, metavar="FILE",
                   help="Search-R1 runs: hand labels {key, label} per step; reports the judge's agreement")
    p.add_argument("--resamples", type=int, default=1000, metavar="N", help="bootstrap resamples (default 1000)")
    p.set_defaults(handler=_analyze)

    r = sub.add_parser(
        "report", parents=[common], help="static HTML trajectory browser of one eval run (works from file://)",
        description="Write RUN_DIR/report/index.html (or --out DIR/index.html): the run's summary and plots, and "
        "every question's trajectory — queries, retrieved documents with the gold ones marked, selections, stop "
        "decisions, the generator's answer and the judge's verdict — filterable by outcome, dataset and turns.",
    )
    r.add_argument("run", metavar="RUN_DIR", help="an `s3 eval` run folder (searcher or search_r1)")
    r.add_argument("--out", default=None, metavar="DIR", help="folder of index.html (default RUN_DIR/report)")
    r.add_argument("--dataset", default=None, metavar="DIR", help="prepared dataset folder (gold paragraphs, texts)")
    r.set_defaults(handler=_report)


def _index(run: RunData, given: str | None) -> Path:
    from eval.analysis import index_dir_of
    from s3core.errors import S3Error

    idx = Path(given) if given else index_dir_of(run)
    if idx is None or not idx.is_dir():
        raise S3Error(f"{run.dir}: no retrieval index found (run.json's is gone and RUN_DIR/../index is missing): "
                      "pass --index DIR (build it with `s3 index build`)")
    return idx


def _documents(cfg: S3Config, run: RunData, index: Path | None) -> Any:
    """ids -> Document, from the run's index (or the dataset's corpus.jsonl)."""
    from eval.contexts import lookup_documents
    from searcher.build import build_retriever

    retriever = build_retriever(cfg.retriever, index) if index is not None else None
    getter = getattr(retriever, "get", None)
    corpus = run.dataset_dir / "corpus.jsonl" if run.dataset_dir else None

    def docs(ids: set[str]) -> dict[str, Any]:
        return lookup_documents(ids, corpus, getter)

    return docs


def _s3_analysis(args: argparse.Namespace, cfg: S3Config, run: RunData, shared: dict[str, Any]) -> S3Analysis:
    from eval.analysis import PrefixGenAcc, analyze_s3, bridge_probe
    from searcher.build import build_retriever

    probe = genacc = None
    if args.probe or args.genacc_questions:
        idx = _index(run, args.index)
        docs = _documents(cfg, run, idx)
        if args.probe:
            retriever = build_retriever(cfg.retriever, idx)

            def titles(ids: list[str]) -> dict[str, str]:
                return {i: d.title or "" for i, d in docs(set(ids)).items()}

            probe = bridge_probe(retriever, run.k, titles)
        if args.genacc_questions:
            _same_model(run, "generator", cfg.generator_resolved.model)
            if "accuracy" not in shared:
                from eval.build import build_accuracy

                shared["accuracy"] = build_accuracy(cfg.generator_resolved, cfg.judge_resolved, cfg.eval)
            genacc = PrefixGenAcc(shared["accuracy"], docs, limit=args.genacc_questions)
    return analyze_s3(run, probe=probe, genacc=genacc, n_resamples=args.resamples)


def _same_model(run: RunData, section: str, model: str) -> None:
    from s3core.errors import S3Error

    used = (run.config.get(section) or {}).get("model")
    if used and str(used).split(" (")[0] != model:
        key = "generator.model" if section == "generator" else "searcher.model"
        raise S3Error(f"{run.dir} was run with {section} {used!r}, the configuration has {model!r}: "
                      f"pass --set {key}={str(used).split(' (')[0]} so the analysis asks the same model")


ANSWERS_FILE = "policy_answers.jsonl"


class _AnswerMemo:
    """The policy's greedy answers to over-search chats, kept in OUT/policy_answers.jsonl as they come (keyed by the
    model and the chat's sha256): an interrupted analysis resumes, and a rerun (hand labels added, another
    --resamples) makes no policy call. Failed calls are not kept (asked again next time)."""

    def __init__(self, path: Path, model: str) -> None:
        from s3core.io import read_jsonl, stored

        self.path, self.model = path, model
        kept = stored(path)  # or policy_answers.jsonl.gz, as benchmarks/results keeps it
        rows = read_jsonl(kept, torn_tail="skip") if kept.is_file() else []
        self.seen = {str(r["key"]): str(r["text"]) for r in rows if "key" in r and "text" in r}

    def _key(self, chat: list[dict[str, str]]) -> str:
        import hashlib
        import json

        return hashlib.sha256(json.dumps([self.model, chat], sort_keys=True).encode()).hexdigest()

    def get(self, chat: list[dict[str, str]]) -> str | None:
        return self.seen.get(self._key(chat))

    def put(self, answered: list[tuple[list[dict[str, str]], str]]) -> None:
        from s3core.io import append_jsonl, repair_tail

        rows = [{"key": self._key(c), "text": t} for c, t in answered]
        if not rows:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(self.path)  # a torn last line cut; a .gz unpacked first, so the appends extend its answers
        append_jsonl(self.path, rows)
        self.seen.update({str(r["key"]): str(r["text"]) for r in rows})


def _r1_analysis(args: argparse.Namespace, cfg: S3Config, run: RunData) -> R1Analysis:
    from eval.metrics import normalize_answer
    from eval.oversearch import agreement, analyze_search_r1

    answer = same = docs = None
    if args.over_search_steps != 0:
        from generator_adapters.build import build_judge
        from searcher.build import build_policy

        _same_model(run, "searcher", cfg.searcher.model)
        policy = build_policy(cfg.searcher)
        judge = build_judge(cfg.judge_resolved)
        docs = _documents(cfg, run, _index(run, args.index))
        memo = _AnswerMemo(Path(args.out) / ANSWERS_FILE, cfg.searcher.model)

        def answer(chats: list[list[dict[str, str]]]) -> list[str | None]:
            todo = [i for i, c in enumerate(chats) if memo.get(c) is None]
            if todo:
                outs = policy.generate([chats[i] for i in todo], stop=["</query_answer>"], max_new_tokens=32,
                                       temperature=0.0)
                memo.put([(chats[i], o.text) for i, o in zip(todo, outs, strict=True) if o.error is None])
            return [memo.get(c) for c in chats]

        def same(memory: list[str | None], context: list[str | None]) -> list[bool | None]:
            out: list[bool | None] = [None] * len(memory)
            ask = []
            for i, (m, c) in enumerate(zip(memory, context, strict=True)):
                if m is None or c is None:
                    continue
                if normalize_answer(m) == normalize_answer(c):
                    out[i] = True  # the same words: no judge call needed
                else:
                    ask.append(i)
            if ask:
                verdicts = judge.check([memory[i] for i in ask], [[context[i] or ""] for i in ask])
                for i, v in zip(ask, verdicts, strict=True):
                    out[i] = v
            return out

    a = analyze_search_r1(run, answer, same, docs, n_resamples=args.resamples, max_search_steps=args.over_search_steps)
    if args.labels:
        a.agreement = agreement(a.steps, Path(args.labels))
    return a


def _analyze(args: argparse.Namespace, cfg: S3Config) -> int:
    from eval.analysis import load_run, write_analysis
    from eval.oversearch import steps_jsonl
    from s3core.errors import S3Error
    from training.report.behavior import TrainingBehavior

    out = Path(args.out)
    dataset = Path(args.dataset) if args.dataset else None
    s3, r1, training = [], [], []
    shared: dict[str, Any] = {}
    for d in args.runs:
        path = Path(d)
        if stored(path / "metrics.jsonl").is_file() and not stored(path / "results.jsonl").is_file():
            training.append(TrainingBehavior.load(path))
            continue
        run = load_run(path, dataset)
        if run.method == "search_r1":
            r1.append(_r1_analysis(args, cfg, run))
        elif run.method == "searcher":
            s3.append(_s3_analysis(args, cfg, run, shared))
        else:
            raise S3Error(f"{path}: method {run.method!r} has no search behaviour to analyse (searcher or search_r1)")
    files = write_analysis(s3, r1, training, out)
    for a in r1:
        name = re.sub(r"[^A-Za-z0-9]+", "_", a.run.name)
        steps_jsonl(a, out / f"steps_{name}.jsonl")
    if "accuracy" in shared:
        shared["accuracy"].close()
    print(f"wrote {', '.join(str(p) for p in files.values())}")
    print((out / "analysis.md").read_text())
    return 0


def _report(args: argparse.Namespace, cfg: S3Config) -> int:
    from eval.browser import build_report

    run_dir = Path(args.run)
    report = build_report(run_dir, Path(args.out) if args.out else run_dir / "report",
                          Path(args.dataset) if args.dataset else None)
    page = report.path
    print(f"wrote {page}  (open it in a browser: file://{page.resolve()})")
    print(f"documents with text: {report.with_text} of {report.documents}"
          + ("" if report.hint is None else "  (see the warning above)"))
    return 0
