"""The transfer attempts after training (docs/transfer.md), stage by stage, the command line of benchmarks/transfer.py;
every stage resumes where it stopped.

    .venv/bin/python benchmarks/transfer.py select    # held-out reward of every checkpoint -> the chosen one
    .venv/bin/python benchmarks/transfer.py evaluate  # s3 eval on the dev slices: 4 methods (+ the equal-budget cap)
    .venv/bin/python benchmarks/transfer.py report    # paired bootstrap table, diagnostics, curves
    .venv/bin/python benchmarks/transfer.py ablation  # the held-out table: what each lever did (no model is run)
    .venv/bin/python benchmarks/transfer.py all

select: `training.run.evaluate.heldout_rewards` (the training reward, greedy) on the held-out 10% for the untrained policy
and every checkpoint kept in the run; the checkpoint with the highest held-out Acc of the searcher's documents is
chosen (ties: the earlier one) and its LoRA adapter copied to searcher/policies/smollm2-135m-hotpotqa (the
searcher s3 ships). Only that one is
evaluated on the dev slices; selection.md lists every checkpoint evaluated anywhere.

evaluate: for hotpotqa_dev500 (first 300 questions) and musique_dev200 (first 100), each over its own paragraphs (bm25),
`s3 eval` runs the methods below (no_retrieval, naive_rag, untrained, trained) with the config's generator,
GenAcc = span check or the judge (judge model named in the report), the searcher with the loop settings it was trained
with; the two searchers also under the equal-budget cap (searcher.context_cap = retriever.k). Run directories:
<work>/eval/<dataset>/<method>/ (results.jsonl, contexts.jsonl, summary.json).

--other-generator MODEL (evaluate, repeatable): the same searchers with a generator they were not trained with, on
hotpotqa_dev500 (naive RAG, untrained, trained; the judge unchanged): <work>/eval_generators/<model>/; the report adds
a table for each. Order: the four main methods, then the other generators, then the equal-budget caps (a cut run has
the comparisons the claims need first; run again = resume).

report: benchmarks/results/transfer/{report.md, report.json, curves.png, eval.png} and the run's small record files
(metrics.jsonl, heldout.jsonl, heldout_questions.jsonl, distill_summary.json: what ablation and the plots read once the
run directory is gone): GenAcc and EM with bootstrap 95%
intervals, paired differences (trained - naive RAG, trained - untrained), support recall, mean documents; what the
searcher learned (turns, queries, selections, stops; a few real trajectories before and after; flat GRPO groups and KL
over training; gain from more documents or better ones).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

from experiments.s3cli import run_s3
from experiments.transfer import methods as tm
from experiments.transfer.checks import plot_genacc, rows_sha256
from s3core.io import stored

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
DEFAULT_RESULTS = ROOT / "benchmarks" / "results" / "transfer"
RESULTS = DEFAULT_RESULTS  # the attempt's results directory (--results)
DATASETS = {  # name: (format, raw file, questions evaluated)
    "hotpotqa_dev500": ("hotpotqa", SHARED / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl", 300),
    "musique_dev200": ("musique", SHARED / "musique_dev200" / "musique.json", 100),
    # issue 31's evaluation adds the third slice issue 22 named (the first attempt ran without it: its report skips it)
    "2wiki_dev200": ("2wiki", SHARED / "2wiki_dev200" / "wikihop.json", 100),
}


def _jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a log file; a line torn by a kill is passed over."""
    from s3core.io import read_log_jsonl

    return list(read_log_jsonl(path))  # [] when there is none (path or path.gz)


def _from_heldout(r: dict[str, Any], source: str) -> dict[str, Any]:
    """A row of the trainer's heldout.jsonl (the committed ones too) as a row of the selection table: the one
    held-out row type's summary (training.run.evaluate.HeldoutScore, `s3 train-eval`'s keys; None where nothing scored)."""
    from training.run.evaluate import HeldoutScore

    return {"policy": r["checkpoint"], "step": r["step"], **HeldoutScore.from_row(r).summary(), "source": source,
            **({"wins_losses": r["wins_losses"]} if "wins_losses" in r else {})}


def _num(v: Any, digits: int = 3) -> str:
    """A table cell: the number, or '-' where there is none (None, NaN)."""
    return f"{v:.{digits}f}" if isinstance(v, int | float) and v == v else "-"


def _selection_line(label: str, r: dict[str, Any], chosen: str) -> str:
    return (f"| {label} | {_num(r['reward_mean'])} | {_num(r['acc_s3_mean'])} | {_num(r['acc_rag_mean'])} | "
            f"{_num(r['turns_mean'], 2)} | {_num(r['docs_mean'], 2)} | {r['source']} | {chosen} |")


def select(config: str) -> dict[str, Any]:
    """The checkpoint with the highest held-out Acc(searcher docs): from the trainer's own held-out evaluations
    (RUN_DIR/heldout.jsonl, training.heldout.every) when the run has them, else by evaluating every checkpoint kept;
    the untrained base model is evaluated here. Its adapter goes to searcher/policies/smollm2-135m-hotpotqa."""
    from s3.config import load_config
    from searcher.trained import relocate_record
    from training.run.evaluate import heldout_rewards

    cfg = load_config(config, [tm.ON_VLLM])  # the untrained base's rollouts on vLLM
    run = _run_dir(config)
    # the run and its snapshot are gone once the choice is made (and the policy of an attempt that is not the best
    # leaves the tree too: benchmarks/results/README.md names the commit that has it)
    if not (run / "checkpoints").is_dir() and not (RESULTS / "run").is_dir() and (RESULTS / "selected.json").is_file():
        chosen = json.loads((RESULTS / "selected.json").read_text())
        print(f"select: {chosen['policy']} was chosen before ({RESULTS / 'selection.md'}); the run is no longer here")
        return dict(chosen)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "selection.jsonl"
    done = {r["policy"]: r for r in _jsonl(out)}
    base = cfg.training.base_model
    def adapter_of(name: str) -> Path | None:
        return next((d for d in (run / "checkpoints" / name / "adapter", RESULTS / "run" / "checkpoints" / name / "adapter",
                                 Path(name)) if d.is_dir()), None)

    # the trainer's own held-out evaluations (the last row per step wins); a row whose checkpoint was never written
    # (the run was cut between the two) cannot be chosen
    in_training = {int(r["step"]): r for r in _jsonl(run / "heldout.jsonl")}
    if in_training:
        from training.rundir import choose_heldout

        rows = [r for _, r in sorted(in_training.items())]
        pick = choose_heldout([r for r in rows if adapter_of(r["checkpoint"]) is not None])
        if pick is None:
            raise SystemExit(f"no held-out evaluation in {run}/heldout.jsonl has a score and a checkpoint to copy")
        trained = [_from_heldout(r, "s3 train (rollout engine, greedy)") for r in rows]
        todo = [base] if base not in done else []
    else:
        ckpts = sorted((run / "checkpoints").glob("step_*"))
        if not ckpts:
            raise SystemExit(f"no checkpoints in {run}/checkpoints: train first (s3 train --config {config})")
        names = [str(c / "adapter" if (c / "adapter").is_dir() else c / "policy") for c in ckpts]
        todo = [p for p in [base, *names] if p not in done]
        trained, pick = [], ""
    if todo:
        with out.open("a") as f:
            for row in heldout_rewards(cfg, todo):
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
                f.flush()
                done[row["policy"]] = row
    if not in_training:
        trained = [{**done[p], "source": f"transfer.py select ({EVAL_POLICY}, greedy)"} for p in names]
        finite = [r for r in trained if isinstance(r["acc_s3_mean"], int | float) and r["acc_s3_mean"] == r["acc_s3_mean"]]
        if not finite:
            raise SystemExit("no checkpoint has a held-out Acc (every generator call failed?)")
        pick = max(finite, key=lambda r: (r["acc_s3_mean"], -trained.index(r)))["policy"]
    best = next(r for r in trained if r["policy"] == pick)
    name = best["policy"]
    adapter = adapter_of(name)
    if adapter is None:
        raise SystemExit(f"the chosen checkpoint {name} is neither in {run}/checkpoints nor in the snapshot")
    policy_dir = ROOT / "searcher/policies/smollm2-135m-hotpotqa"  # where the product finds it (searcher.default_policy)
    if policy_dir.exists():
        shutil.rmtree(policy_dir)
    shutil.copytree(adapter, policy_dir, ignore=shutil.ignore_patterns(*TOKENIZER_FILES))  # loads with its base's
    relocate_record(adapter, policy_dir)  # its searcher.json's index path is relative to where the record lives
    _policy_card(policy_dir, name, best, cfg, config)
    lines = [
        f"Held-out questions: the last {cfg.training.heldout.questions} of the prepared training set (never trained on);",
        "greedy decoding, the training reward. Every checkpoint evaluated anywhere is listed here; only the chosen one",
        "was evaluated on the dev slices.", "",
        "| policy | held-out reward | Acc(searcher docs) | Acc(naive RAG) | turns | docs | evaluated by | chosen |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    b = done[base]
    lines.append(_selection_line(f"{base} (untrained)", {**b, "source": f"transfer.py select ({EVAL_POLICY}, greedy)"}, ""))
    for r in trained:
        label = r["policy"] if in_training else str(Path(r["policy"]).parent.name)
        lines.append(_selection_line(label, r, "yes" if r is best else ""))
    # discarded segments of the run (RESULTS/*_segment/, each with a README saying why): evaluated, never chosen
    for seg in sorted(RESULTS.glob("*_segment")):
        for r in _jsonl(seg / "heldout.jsonl"):
            if r["step"] <= cfg.training.sft.steps:
                continue  # the warm-up the segment shares with the run: listed once, above
            row = _from_heldout(r, f"s3 train, a discarded segment ({seg.name}/README.md)")
            lines.append(_selection_line(f"{seg.name}/{r['checkpoint']}", row, "not eligible"))
    (RESULTS / "selection.md").write_text("\n".join(lines) + "\n")
    # paths relative to the repository, so the file reads the same in any clone
    chosen = {"policy": name, "adapter": os.path.relpath(adapter.resolve(), ROOT), "copied_to": str(policy_dir.relative_to(ROOT)), "heldout": best,
              "untrained": b}
    (RESULTS / "selected.json").write_text(json.dumps(chosen, indent=1))
    print("\n".join(lines))
    return chosen


def _policy_card(policy_dir: Path, name: str, heldout: dict[str, Any], cfg: Any, config: str) -> None:
    """policy/README.md: what the adapter is and how to load it (in place of PEFT's empty model card)."""
    s, t = cfg.searcher, cfg.training
    config = os.path.relpath(Path(config).resolve(), ROOT)
    here = os.path.relpath(policy_dir.resolve(), ROOT)
    acc = heldout.get("acc_s3_mean")
    (policy_dir / "README.md").write_text(f"""# The transfer experiment's trained searcher

A LoRA adapter (r = {t.learner.lora_r}, alpha = {t.learner.lora_alpha}) on `{t.base_model}`: checkpoint `{name}` of
`s3 train --config {config}` ({t.algorithm.upper()}, reward `{t.reward}`), chosen on the
{t.heldout.questions} held-out training questions (Acc with its documents {acc if acc is None else round(acc, 3)};
`../selection.md` lists every checkpoint evaluated). `searcher.json` holds the loop it was trained with (begin-with-search
top-{cfg.retriever.k}, {s.max_turns} turns x k = {s.k}, up to {s.max_select} documents selected per turn); `s3 search`
and `s3 serve` apply it.

    s3 search --policy {here} --index <any index> "a question"
    s3 serve --policy {here} --index <any index>

loads it on top of the offline base model (transformers; `--set searcher.policy=vllm` for the vLLM engine, which
merges it into the base first). Without `--index` it uses the training index named in `searcher.json` (rebuilt by
`s3 prepare-training --config {config}`). How it does on unseen questions: `../report.md`.
""")


# ---------------------------------------------------------------------------------------------------- across machines
# A session's machine keeps nothing but the repository: `snapshot` copies what the run needs to resume (the newest
# checkpoint's adapter and optimizer state, the best held-out checkpoint's adapter, the warm-up's reference adapter,
# the metrics) into benchmarks/results/transfer/run/ to be committed; `restore` puts it back where the config's
# training.output_dir is, so `s3 train --config configs/transfer.toml` resumes on a fresh clone. Once the run has
# ended and `select` has copied its policy, run/ is removed from the tree (benchmarks/results/README.md). The prepared
# training data lives in benchmarks/results/transfer/data/ (its baseline cache is committed; corpus and index are
# rebuilt by `s3 prepare-training` from ../shared/data in seconds).
EVAL_POLICY = tm.ON_VLLM.split("=")[1]  # the searcher's engine in the dev-slice evaluation (methods.py)
# the run's small record files: report copies them next to itself, so they outlive the run directory (and its
# searcher.json, re-based)
RECORD_FILES = ("metrics.jsonl", "heldout.jsonl", "heldout_questions.jsonl", "distill_summary.json")
RUN_FILES = (*RECORD_FILES, "config.json", "searcher.json", "distill.jsonl")
CKPT_FILES = ("trainer_state.pt",)
# not carried: the tokenizer files an adapter folder repeats (a LoRA adapter loads with its base model's tokenizer)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "vocab.json", "merges.txt")
WEIGHTS = "adapter_model.safetensors"
SAME_AS_REFERENCE = "SAME_AS_REFERENCE"  # in a snapshot's adapter/: its weights are reference/'s, stored once


def _run_dir(config: str) -> Path:
    from s3.config import load_config

    cfg = load_config(config)
    run = cfg.resolve(cfg.training.output_dir)
    assert run is not None
    return run


def _copy_adapter(src: Path, dst: Path, reference: Path | None = None) -> None:
    """An adapter folder without its tokenizer files; weights byte-identical to `reference`'s (the warm-up's end is
    both the KL reference and, often, the best checkpoint) are not copied but marked SAME_AS_REFERENCE."""
    import filecmp

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*TOKENIZER_FILES))
    if reference is not None and (reference / WEIGHTS).is_file() and (dst / WEIGHTS).is_file() \
            and filecmp.cmp(reference / WEIGHTS, dst / WEIGHTS, shallow=False):
        (dst / WEIGHTS).unlink()
        (dst / SAME_AS_REFERENCE).write_text(f"{WEIGHTS} is reference/{WEIGHTS}\n")


def _copy_checkpoint(src: Path, dst: Path, resumable: bool, reference: Path | None = None) -> None:
    """A checkpoint's adapter/ (with its searcher.json) and, when `resumable`, its trainer_state.pt; not policy/
    (the merged weights: a LoRA run resumes from base + adapter)."""
    dst.mkdir(parents=True, exist_ok=True)
    _copy_adapter(src / "adapter", dst / "adapter", reference)
    if resumable:
        for name in CKPT_FILES:
            shutil.copy2(src / name, dst / name)


def snapshot(config: str, dest: Path | None = None) -> Path:
    """Copy the run's resumable minimum into `dest` (default RESULTS/run, replacing what was there): see the section
    comment."""
    dest = dest or RESULTS / "run"
    from training import rundir

    run = _run_dir(config)
    ckpts = run / rundir.CHECKPOINTS
    latest, best = rundir.pointer(run, "latest"), rundir.pointer(run, "best")
    if latest is None:
        raise SystemExit(f"no checkpoint in {ckpts}: nothing to snapshot")
    if not (ckpts / latest / "adapter").is_dir():
        raise SystemExit(f"{ckpts / latest} has no adapter/: snapshot is for LoRA runs (a full model is too big to commit)")
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "checkpoints").mkdir(parents=True)
    for name in RUN_FILES:
        if (run / name).is_file():
            shutil.copy2(run / name, tmp / name)
    reference = None
    if (run / "reference").is_dir():
        _copy_adapter(run / "reference", tmp / "reference")
        reference = tmp / "reference"
    _copy_checkpoint(ckpts / latest, tmp / "checkpoints" / latest, resumable=True, reference=reference)
    rundir.set_pointer(tmp, "latest", latest)
    if best is not None and best != latest and (ckpts / best / "adapter").is_dir():
        _copy_checkpoint(ckpts / best, tmp / "checkpoints" / best, resumable=False, reference=reference)
    if best is not None and (tmp / "checkpoints" / best).is_dir():  # never a pointer to what is not there
        rundir.set_pointer(tmp, "best", best)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file()) / 2**20
    print(f"snapshot of {run} at {latest} (best {best}) -> {dest} ({size:.1f} MiB): commit it")
    return dest


def _step_of(run: Path) -> int:
    """The step of a run directory's newest checkpoint, -1 when it has none."""
    from training.rundir import checkpoint_step, latest_checkpoint

    latest = latest_checkpoint(run)
    return checkpoint_step(latest) if latest is not None else -1


def restore(config: str, src: Path | None = None) -> Path | None:
    """Put a snapshot back as the run directory when the run there is missing or older; returns the run dir, or
    None when there was nothing to do."""
    src = src or RESULTS / "run"
    from training import rundir

    run = _run_dir(config)
    if rundir.latest_checkpoint(src) is None:
        print(f"no snapshot in {src}: a new run starts")
        return None
    have, snap = _step_of(run), _step_of(src)
    if have >= snap:
        print(f"{run} is at step {have}, the snapshot at {snap}: kept as it is")
        return None
    run.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, run / name)
    if (src / "reference").is_dir():
        if (run / "reference").exists():
            shutil.rmtree(run / "reference")
        shutil.copytree(src / "reference", run / "reference")
    for ck in sorted((src / "checkpoints").glob("step_*")):
        dst = run / "checkpoints" / ck.name
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(ck, dst)
        marker = dst / "adapter" / SAME_AS_REFERENCE
        if marker.is_file():
            shutil.copy2(src / "reference" / WEIGHTS, dst / "adapter" / WEIGHTS)
            marker.unlink()
    for which in ("latest", "best"):
        if (pointed := rundir.pointer(src, which)) is not None:
            rundir.set_pointer(run, which, pointed)
    print(f"restored {run} at step {snap} from {src}: `s3 train --config {config}` resumes there")
    return run


# the attempt's methods (METHODS in methods.py), in the order `evaluate` runs them: the comparison that matters first,
# the equal-budget caps (searcher.context_cap = k) last
ATTEMPT_METHODS = ("naive_rag", "trained", "untrained", "no_retrieval", "trained_cap", "untrained_cap")


def _methods(k: int) -> dict[str, list[str]]:
    """name -> the s3 eval arguments of that method (after --method): the METHODS table's, with the trained policy of
    this attempt's results (the searchers' rollouts on the vLLM engine, a LoRA policy merged into its base first: the
    same greedy trajectories as the transformers policy, 7.9x the questions/s, benchmarks/results/rollout_engines/)."""
    out = {}
    for name in ATTEMPT_METHODS:
        margs, sets, _ = tm.eval_args(name, RESULTS, str(RESULTS / "policy"), k=k)
        out[name] = [*margs, *[x for s in sets for x in ("--set", s)]]
    return out


def evaluate(config: str, work: Path, other_generators: tuple[str, ...] = ()) -> None:
    from s3.config import load_config

    cfg = load_config(config)
    if not (RESULTS / "policy").is_dir():
        raise SystemExit(f"no trained policy at {RESULTS / 'policy'}: run the select stage first (or, for an attempt "
                         "whose policy left the tree, restore it from the commit benchmarks/results/README.md names)")
    common = ["--config", config, "--set", "eval.metric=genacc", "--set", "eval.use_judge=true"]
    for name, (fmt, raw, _) in DATASETS.items():
        data, index = work / "eval" / name / "data", work / "eval" / name / "index"
        if not (data / "corpus.jsonl").is_file():  # questions.jsonl is committed (the report reads it), the corpus not
            run_s3("data", "prepare", fmt, "--input", str(raw), "--out", str(data))
        if not index.is_dir():
            run_s3("index", "build", "--config", config, "--corpus", str(data / "corpus.jsonl"), "--out", str(index))
    # method by method across the slices, in the order the claims need them: the four main methods, then the same
    # searchers with a generator they were not trained with, then the equal-budget caps. A session cut
    # mid-evaluation leaves whole comparisons behind, and the next run resumes the rest.
    methods = _methods(cfg.retriever.k)
    main = [m for m in methods if not m.endswith("_cap")]
    for method in main:
        _evaluate_method(work, common, method, methods[method], cfg.retriever.k)
    # "any frozen generator": the judge stays the config's, so the generator is the one thing that changes
    name, (_, _, limit) = OTHER_GENERATOR_SLICE, DATASETS[OTHER_GENERATOR_SLICE]
    data, index = work / "eval" / name / "data", work / "eval" / name / "index"
    for model in other_generators:
        for method in OTHER_GENERATOR_METHODS:
            out = _other_run_path(work, model, method)
            if _finished(out, limit):
                continue
            run_s3("eval", *common, "--set", f"generator.model={model}", "--dataset", str(data), "--index", str(index),
                   "--limit", str(limit), "--out", str(out), "--no-progress", "--method", *methods[method])
    for method in (m for m in methods if m not in main):
        _evaluate_method(work, common, method, methods[method], cfg.retriever.k)


def _evaluate_method(work: Path, common: list[str], method: str, margs: list[str], k: int) -> None:
    """One method on every dev slice, skipping the slices already finished (here or in --baselines-from) and the
    equal-budget caps that cannot bind (_cap_is_idle)."""
    for name, (_, _, limit) in DATASETS.items():
        data, index, out = work / "eval" / name / "data", work / "eval" / name / "index", _run_path(work, name, method)
        if _cap_is_idle(work, name, method, k, limit):
            print(f"= {name}/{method}: not run, the same as {_uncapped(method)} (it never kept more than {k} "
                  "documents, and the cap only stops admissions beyond that)", flush=True)
            continue
        if _finished(out, limit):
            if out.parent.parent.parent != work:  # --baselines-from: reused only when it ran the same setting
                mine, theirs = work / "eval" / name / "naive_rag" / "summary.json", out / "summary.json"
                if mine.is_file() and not _same_setting(json.loads(mine.read_text())["config"],
                                                        json.loads(theirs.read_text())["config"]):
                    raise SystemExit(f"{out} ran another setting than this evaluation: drop --baselines-from")
                print(f"= {name}/{method}: reused from {out}", flush=True)
            continue  # finished, nothing to retry: skip building its engines
        out = work / "eval" / name / method
        where = [] if margs[0] == "no_retrieval" else ["--index", str(index)]  # it takes no index
        run_s3("eval", *common, "--dataset", str(data), *where, "--limit", str(limit), "--out", str(out),
               "--no-progress", "--method", *margs)


def _uncapped(method: str) -> str:
    return method.removesuffix("_cap")


def _cap_is_idle(work: Path, name: str, method: str, k: int, limit: int | None = None) -> bool:
    """Whether `method` is an equal-budget cap (searcher.context_cap = k) that cannot change anything: its uncapped run
    (finished, when `limit` is given) never kept more than k documents on any question. The cap only stops admitting
    documents once k are kept (searcher/agent.py `_admit`); prompts and stops do not depend on it, and the searchers are
    decoded greedily, so the capped run would repeat the uncapped one question for question."""
    if not method.endswith("_cap"):
        return False
    run = _run_path(work, name, _uncapped(method))
    if limit is not None and not _finished(run, limit):
        return False
    return _within_budget(_rows(run), k)


def _within_budget(rows: dict[str, dict[str, Any]], k: int) -> bool:
    """Whether a run's rows exist and none kept more than k documents (an equal-budget cap of k would not bind)."""
    return bool(rows) and max(len(r["context_ids"]) for r in rows.values()) <= k


def _finished(out: Path, limit: int) -> bool:
    """Whether the eval run in `out` scored all `limit` questions with no failed call (nothing to resume or retry)."""
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    return summary.get("n_scored") == limit and not summary.get("n_failed")


# the slice and methods a generator the searcher was not trained with is evaluated on (evaluate --other-generator)
OTHER_GENERATOR_SLICE = "hotpotqa_dev500"
OTHER_GENERATOR_METHODS = ("naive_rag", "trained", "untrained")  # the pair that matters first: a cut run resumes


def _other_run_path(work: Path, model: str, method: str) -> Path:
    from eval.grid import slug

    return work / "eval_generators" / slug(model) / OTHER_GENERATOR_SLICE / method


BASELINE_METHODS = ("naive_rag", "no_retrieval")  # no searcher in them: another attempt's runs are the same runs
BASELINES: Path | None = None  # --baselines-from: a results directory whose baseline runs are reused


def _same_setting(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two eval runs' recorded settings make the same baseline: questions, retriever (index content, k),
    generator, judge, metric."""
    def part(c: dict[str, Any]) -> Any:
        r = c.get("retriever") or {}
        return (c.get("dataset", {}).get("questions_sha256"), c.get("dataset", {}).get("limit"), r.get("k"),
                r.get("corpus_sha256"), r.get("index_params"), c.get("generator"), c.get("judge"), c.get("eval"))
    return part(a) == part(b)


def _run_path(work: Path, name: str, method: str) -> Path:
    """Where a method's eval run is: under `work`, or for a baseline method the --baselines-from directory's run when
    `work` has none of its own."""
    own = work / "eval" / name / method
    if BASELINES is not None and method in BASELINE_METHODS and not stored(own / "results.jsonl").is_file():
        other = BASELINES / "eval" / name / method
        if (other / "summary.json").is_file():
            return other
    return own


def _rows(run: Path) -> dict[str, dict[str, Any]]:
    from eval.rundir import read_results

    return read_results(run / "results.jsonl")  # {} when the run kept none


def report(config: str, work: Path) -> None:
    from s3.config import load_config

    cfg = load_config(config)
    out: dict[str, Any] = {"judge": cfg.judge_resolved.model, "generator": cfg.generator_resolved.model, "datasets": {}}
    lines = [
        f"Generator {cfg.generator_resolved.model}; GenAcc = span check, else the judge {cfg.judge_resolved.model}; "
        f"bm25 over each dataset's own paragraphs; naive RAG top-{cfg.retriever.k}; searcher "
        f"{cfg.searcher.model} (k0={cfg.retriever.k}, k={cfg.searcher.k}, {cfg.searcher.max_turns} turns, "
        f"max_select={cfg.searcher.max_select}: #MaxContexts {cfg.searcher.max_select * cfg.searcher.max_turns}; "
        f"'cap' = the equal budget, {cfg.retriever.k}). 95% intervals: bootstrap over questions (paired for differences).",
        "",
    ]
    for name in DATASETS:
        runs = {m: _rows(_run_path(work, name, m)) for m in _methods(cfg.retriever.k)}
        if not any(runs.values()):
            continue
        idle = [m for m in runs  # the uncapped rows are in `runs` already: no second read of their results
                if m.endswith("_cap") and not runs[m] and _within_budget(runs[_uncapped(m)], cfg.retriever.k)]
        for m in idle:  # a cap that cannot bind: its numbers are the uncapped run's, said so under the table
            runs[m] = runs[_uncapped(m)]
        ds: dict[str, Any] = {"methods": {}, "paired": {}}
        lines += [f"## {name}", "", "| method | n | GenAcc [95% CI] | EM [95% CI] | support recall | mean docs | turns |",
                  "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
        lines += _method_tables(runs, ds, (("trained", "naive_rag"), ("trained", "untrained"),
                                           ("trained_cap", "naive_rag"), ("trained_cap", "untrained_cap")))
        if idle:
            ds["cap_is_uncapped"] = idle
            lines += [f"{', '.join(idle)}: not run, the uncapped run's rows: it never kept more than "
                      f"{cfg.retriever.k} documents, and the cap only stops admissions beyond that (greedy decoding).",
                      ""]
        out["datasets"][name] = ds
        diag_lines, out["datasets"][name]["diagnostics"] = _diagnostics(work / "eval" / name, runs, cfg.searcher.max_turns)
        lines += diag_lines
    for gen_dir in sorted((work / "eval_generators").glob("*")) if (work / "eval_generators").is_dir() else []:
        runs = {m: _rows(gen_dir / OTHER_GENERATOR_SLICE / m) for m in OTHER_GENERATOR_METHODS}
        if not any(runs.values()):
            continue
        summaries = [gen_dir / OTHER_GENERATOR_SLICE / m / "summary.json" for m in OTHER_GENERATOR_METHODS]
        model = next((json.loads(f.read_text())["config"]["generator"]["model"] for f in summaries if f.is_file()),
                     gen_dir.name)  # a run cut before its summary: the folder's name
        ds = {"generator": model, "methods": {}, "paired": {}}
        lines += [f"## {OTHER_GENERATOR_SLICE}, generator {model} (the searcher was trained with "
                  f"{cfg.generator_resolved.model}; the judge is the same)", "",
                  "| method | n | GenAcc [95% CI] | EM [95% CI] | support recall | mean docs | turns |",
                  "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
        lines += _method_tables(runs, ds, (("trained", "naive_rag"), ("trained", "untrained")))
        out.setdefault("other_generators", {})[model] = ds
    train_lines, out["training"] = _training(cfg)
    lines = train_lines + lines
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "report.json").write_text(json.dumps(out, indent=1))
    (RESULTS / "report.md").write_text("\n".join(lines) + "\n")
    if out["datasets"]:
        _plot_eval(out["datasets"], RESULTS / "eval.png")
    print("\n".join(lines))


def _method_tables(runs: dict[str, dict[str, dict[str, Any]]], ds: dict[str, Any],
                   pairs: tuple[tuple[str, str], ...]) -> list[str]:
    """The rows of the per-method table (after its header) and the paired-difference table of `runs` (method -> eval
    rows); the numbers go to ds["methods"] and ds["paired"]."""
    from eval.stats import mean_ci, paired_diff_ci

    def fmt_ci(x: dict[str, Any]) -> str:
        return f"{x['mean']:.3f} [{x['ci95'][0]:.3f}, {x['ci95'][1]:.3f}]" if x["mean"] is not None else "-"

    lines: list[str] = []
    genacc: dict[str, dict[str, float | None]] = {}
    em: dict[str, dict[str, float | None]] = {}
    for m, rows in runs.items():
        if not rows:
            continue
        genacc[m] = {i: r["metrics"].get("genacc") for i, r in rows.items()}
        em[m] = {i: r["metrics"].get("em") for i, r in rows.items()}
        g, e = mean_ci(list(genacc[m].values())), mean_ci(list(em[m].values()))
        sr = [r["support_recall"] for r in rows.values() if r.get("support_recall") is not None]
        docs = [len(r["context_ids"]) for r in rows.values()]
        turns = [r["turns"] for r in rows.values() if r.get("turns") is not None]
        ds["methods"][m] = {"n": g["n"], "genacc": g, "em": e, "support_recall": sum(sr) / len(sr) if sr else None,
                            "mean_docs": sum(docs) / len(docs), "turns": sum(turns) / len(turns) if turns else None}
        lines.append(f"| {m} | {g['n']} | {fmt_ci(g)} | {fmt_ci(e)} | "
                     f"{ds['methods'][m]['support_recall'] or 0:.3f} | {ds['methods'][m]['mean_docs']:.2f} | "
                     f"{ds['methods'][m]['turns'] or 0:.2f} |")
    lines += ["", "| paired difference | metric | n | diff [95% CI] | wins / losses |", "| --- | --- | ---: | --- | --- |"]
    for a, b in pairs:
        for metric, table in (("GenAcc", genacc), ("EM", em)):
            if a in table and b in table:
                d = paired_diff_ci(table[a], table[b])
                ds["paired"][f"{a}-{b}:{metric}"] = d
                if d["diff"] is not None:
                    lines.append(f"| {a} - {b} | {metric} | {d['n']} | {d['diff']:+.3f} [{d['ci95'][0]:+.3f}, "
                                 f"{d['ci95'][1]:+.3f}] | {d['wins']} / {d['losses']} |")
    return [*lines, ""]


def _loop_of(record: Path) -> str:
    """'k0:k:turns, budget' of a searcher.json (begin-with-search top-k0, k documents a search, turns, doc tokens)."""
    if not record.is_file():
        return "?"
    r = json.loads(record.read_text())
    sr = r["searcher"]
    return f"{r['retriever']['k']}/{sr['k']}:{sr['max_select']}:{sr['max_turns']}, {sr['doc_token_budget']} tokens"


def ablation(config: str) -> list[str]:
    """RESULTS/ablation.md: what each lever did on the held-out questions, from evaluations already made (no model is
    run here): the previous attempt (--baselines-from: its untrained base and its chosen checkpoint) and this one (its
    untrained base, the end of the warm-up, the chosen RL checkpoint, the last). The held-out set is the same when the
    rows' Acc(naive RAG) agree (the same prepared data and split); a difference of one question is 1/n."""
    import math

    from s3.config import load_config
    from training.rundir import choose_heldout, heldout_rows, metrics_rows

    cfg = load_config(config)
    n_q = cfg.training.heldout.questions
    rows: list[tuple[str, str, dict[str, Any]]] = []  # (what, loop, selection-table row)

    def attempt(results: Path, run: Path, label: str) -> None:
        base = next((r for r in _jsonl(results / "selection.jsonl") if "/" not in r["policy"]
                     and not r["policy"].startswith("step_")), None)
        # the loop it trained with: the policy's record, else the run's, else the copy report() left in results (an
        # attempt whose policy left the tree)
        loop = _loop_of(next((f for f in (results / "policy" / "searcher.json", run / "searcher.json",
                                          results / "searcher.json") if f.is_file()), results / "searcher.json"))
        if base:
            rows.append((f"{label}: untrained {base['policy']}", loop, base))
        def record(name: str) -> list[dict[str, Any]]:  # the run's file, else the copy report() left in results
            return _jsonl(run / name) or _jsonl(results / name)

        held = {int(r["step"]): r for r in heldout_rows(run) or heldout_rows(results)}
        # per question (runs from stop 33 on): wins and losses; an evaluation redone after a kill wrote its rows again
        per_question = {(int(q["step"]), q["id"]): q for q in record("heldout_questions.jsonl")}
        for q in per_question.values():
            if int(q["step"]) in held and q.get("acc_s3") is not None and q.get("acc_rag") is not None:
                wl = held[int(q["step"])].setdefault("wins_losses", [0, 0])
                wl[0] += q["acc_s3"] > q["acc_rag"]
                wl[1] += q["acc_s3"] < q["acc_rag"]
        if not held:
            return
        metrics = metrics_rows(run) or metrics_rows(results)  # the last row per step
        sft = max((int(r["step"]) for r in metrics if r.get("charts/sft")), default=0)
        if sft in held:
            rows.append((f"{label}: + warm-up ({sft} supervised steps)", loop,
                         _from_heldout(held[sft], "s3 train")))
        rl = [r for s, r in sorted(held.items()) if s > sft]
        chosen = choose_heldout(rl)
        for r in rl:
            if r["checkpoint"] == chosen:
                rows.append((f"{label}: + RL, chosen (step {r['step']} of {max(held)})", loop,
                             _from_heldout(r, "s3 train")))
        if rl and rl[-1]["checkpoint"] != chosen:
            rows.append((f"{label}: + RL, last (step {rl[-1]['step']})", loop, _from_heldout(rl[-1], "s3 train")))

    if BASELINES is not None:
        attempt(BASELINES, BASELINES / "run", BASELINES.name)
    attempt(RESULTS, _run_dir(config), RESULTS.name)
    rag = {round(r["acc_rag_mean"], 6) for _, _, r in rows if isinstance(r.get("acc_rag_mean"), int | float)}
    lines = ["# Held-out ablation", "",
             f"The last {n_q} questions of the prepared training set (never trained on, the natural mix), greedy, the "
             f"generator {cfg.generator_resolved.model}; every number is an evaluation already in the runs "
             "(selection.jsonl, heldout.jsonl). " + (
                 "Acc(naive RAG) is the same in every row: the same questions." if len(rag) == 1 else
                 f"Acc(naive RAG) differs between rows ({sorted(rag)}): not the same questions, compare within an "
                 "attempt only."),
             f"A binomial standard error at these accuracies is ~{math.sqrt(0.2 * 0.8 / n_q):.3f} (one question = "
             f"{1 / n_q:.3f}): a difference needs ~{2 * math.sqrt(0.2 * 0.8 / n_q):.2f} to be more than noise "
             "(somewhat less for two policies on the same questions).", "",
             "| policy | loop (k0/k:select:turns) | Acc(searcher docs) | Acc(naive RAG) | searcher - naive | "
             "questions won / lost vs naive | turns | docs |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for what, loop, r in rows:
        a, b = r.get("acc_s3_mean"), r.get("acc_rag_mean")
        diff = f"{a - b:+.3f}" if isinstance(a, int | float) and isinstance(b, int | float) else "-"
        wl = "{} / {}".format(*r["wins_losses"]) if "wins_losses" in r else "-"
        lines.append(f"| {what} | {loop} | {_num(a)} | {_num(b)} | {diff} | {wl} | {_num(r['turns_mean'], 2)} | "
                     f"{_num(r['docs_mean'], 2)} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ablation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return lines


def _plot_eval(datasets: dict[str, Any], path: Path) -> None:
    """eval.png: per dev slice, GenAcc of every method and the paired differences of the trained searcher with theirs."""
    plot_genacc([(name, max((m["n"] for m in ds["methods"].values()), default=0),
                  [(m, v["genacc"]) for m, v in ds["methods"].items()],
                  [(k.split(":")[0].replace("-", " - "), d) for k, d in ds["paired"].items() if k.endswith(":GenAcc")])
                 for name, ds in datasets.items()], path, highlight="trained")


def _training(cfg: Any) -> tuple[list[str], dict[str, Any]]:
    """The training run: coverage, reward and GBR trends (first vs last RL steps, with their noise), flat GRPO groups
    and KL over time, wall time per step; metrics.jsonl and curves.png copied next to the report."""
    import statistics

    from training.report.plots import format_trend, plot_run, reward_trend
    from training.run.evaluate import HeldoutScore
    from training.rundir import read_metrics

    run = cfg.resolve(cfg.training.output_dir)
    if run is None or not stored(run / "metrics.jsonl").is_file():
        run = RESULTS  # the run directory is gone (another machine, a fresh clone): the copies an earlier report left
    rows = read_metrics(run) if stored(run / "metrics.jsonl").is_file() else []
    if not rows:
        return [], {}
    RESULTS.mkdir(parents=True, exist_ok=True)
    if run.resolve() != RESULTS.resolve():  # the run's small record files stay with the report
        from searcher.trained import relocate_record

        for name in RECORD_FILES:
            if (run / name).is_file():
                shutil.copyfile(run / name, RESULTS / name)
        relocate_record(run, RESULTS)  # searcher.json: the loop it trained with (its index path re-based)
    plot_run(run, RESULTS / "curves.png")
    for r in rows:  # GBR of the step: Acc with the searcher's documents minus Acc with naive RAG's
        if r.get("reward/acc_s3") is not None and r.get("reward/acc_rag") is not None:
            r["reward/gbr"] = float(r["reward/acc_s3"]) - float(r["reward/acc_rag"])
    rl = [r for r in rows if not r.get("charts/sft")]
    third = max(1, len(rl) // 3)

    def avg(rs: list[dict[str, Any]], key: str) -> float | None:
        xs = [float(r[key]) for r in rs if r.get(key) is not None]
        return sum(xs) / len(xs) if xs else None

    secs = [float(r["charts/step_seconds"]) for r in rl if r.get("charts/step_seconds") is not None]
    info: dict[str, Any] = {
        "steps": len(rows), "rl_steps": len(rl), "warmup_steps": len(rows) - len(rl),
        "rl_coverage": max((float(r.get("data/rl_coverage") or 0.0) for r in rl), default=0.0),
        "trends": {k: reward_trend(rows, k) for k in ("reward/mean", "reward/gbr", "reward/acc_s3", "search/docs")},
        "step_seconds": {"median": statistics.median(secs), "min": min(secs), "max": max(secs)} if secs else None,
    }
    for key in ("reward/flat_groups", "losses/kl", "search/turns", "search/invalid_action_rate"):
        info[key] = {"first_third": avg(rl[:third], key), "last_third": avg(rl[-third:], key)}
    lines = ["## Training", "",
             f"{info['warmup_steps']} oracle warm-up steps, then {info['rl_steps']} RL steps; share of the training "
             f"questions that were in at least one RL rollout batch: {info['rl_coverage']:.3f}. Curves: curves.png; "
             "every step: metrics.jsonl.", ""]
    if info["step_seconds"]:
        s = info["step_seconds"]
        lines.append(f"- wall time per RL step: median {s['median']:.0f} s (range {s['min']:.0f}-{s['max']:.0f} s)")
    lines += [f"- {format_trend(t)}" for t in info["trends"].values()]
    if cfg.training.invalid_penalty:
        readmes = [f"{seg.name}/README.md" for seg in sorted(RESULTS.glob("*_segment"))]
        segments = f"; what changed between the run's segments: {', '.join(readmes)}" if readmes else ""
        lines.append(f"- reward/mean includes the format term (training.invalid_penalty = {cfg.training.invalid_penalty}: "
                     f"minus that x the rollout's share of invalid turns{segments}); reward/gbr and reward/acc_s3 never "
                     "include it")
    for key in ("reward/flat_groups", "losses/kl", "search/turns", "search/invalid_action_rate"):
        a, b = info[key]["first_third"], info[key]["last_third"]
        if a is not None and b is not None:
            note = ("  (a share of the turns after begin-with-search, of which there are few once the searcher stops "
                    "searching: see search/turns)" if key == "search/invalid_action_rate" else "")
            lines.append(f"- {key}: first third of the RL steps {a:.4g} -> last third {b:.4g}{note}")
    held = {int(r["step"]): r for r in _jsonl(run / "heldout.jsonl")}  # the trainer's held-out evaluations
    if held:
        info["heldout"] = [held[k] for k in sorted(held)]
        lines += ["", f"Held-out evaluations during training ({cfg.training.heldout.questions} questions never trained on, "
                  "greedy, the training reward; the checkpoint is chosen here):", "",
                  "| after step | Acc(searcher docs) | Acc(naive RAG) | reward | turns | docs |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        scores = {k: HeldoutScore.from_row(r) for k, r in sorted(held.items())}
        lines += [f"| {k} | {_num(h.acc_s3)} | {_num(h.acc_rag)} | {_num(h.reward)} | {_num(h.turns, 2)} | "
                  f"{_num(h.docs, 2)} |" for k, h in scores.items()]
    return [*lines, ""], info


def _behaviour(ctx: dict[str, dict[str, Any]], max_turns: int) -> dict[str, Any]:
    """What a searcher did on a dataset, from its contexts.jsonl rows."""
    rows = list(ctx.values())
    steps = [s for r in rows for s in r.get("steps", []) if s.get("turn", 0) > 0]
    queries = [s for s in steps if s.get("query")]
    copies = sum(1 for r in rows for s in r.get("steps", []) if s.get("turn", 0) > 0 and s.get("query")
                 and s["query"].strip().lower() == (r.get("question") or "").strip().lower())
    stopped = sum(1 for r in rows if r.get("turns", 0) < max_turns)
    return {
        "questions": len(rows),
        "turns": sum(r.get("turns", 0) for r in rows) / max(1, len(rows)),
        "queries_per_question": len(queries) / max(1, len(rows)),
        "query_is_the_question": copies / max(1, len(queries)),
        "selected_per_turn": sum(len(s.get("selected_ids") or []) for s in steps) / max(1, len(steps)),
        "selection_fallback": sum(1 for s in steps if s.get("selection_fallback")) / max(1, len(steps)),
        "invalid_action": sum(1 for s in steps if s.get("invalid_reason")) / max(1, len(steps)),
        "stopped_before_last_turn": stopped / max(1, len(rows)),
    }


def _questions_file(data: Path) -> Path:
    """A dev slice's prepared questions: data/questions.jsonl, or where the attempt did not commit its own copy, the
    one of --baselines-from or of the first attempt holding the same questions (the sha256 in data/manifest.json):
    the repository keeps one copy of each question file."""
    own, manifest = stored(data / "questions.jsonl"), data / "manifest.json"
    if own.is_file() or not manifest.is_file():
        return own
    sha = json.loads(manifest.read_text()).get("questions_sha256")
    for results in dict.fromkeys(r for r in (BASELINES, DEFAULT_RESULTS) if r is not None):
        copy = stored(results / "eval" / data.parent.name / "data" / "questions.jsonl")  # or questions.jsonl.gz
        if sha and copy.is_file() and rows_sha256(copy) == sha:
            return copy
    return own


def _gold(data: Path) -> dict[str, set[str]]:
    return {q["id"]: set((q.get("metadata") or {}).get("supporting_ids") or []) for q in _jsonl(_questions_file(data))}


def _diagnostics(ds_dir: Path, runs: dict[str, dict[str, dict[str, Any]]], max_turns: int) -> tuple[list[str], dict[str, Any]]:
    """Before vs after (untrained vs trained searcher): behaviour, document precision, whether a gain over naive RAG
    comes with more gold documents or the same ones, and a few real trajectories."""
    gold = _gold(ds_dir / "data")
    ctx = {m: {r["id"]: r for r in _jsonl(ds_dir / m / "contexts.jsonl")} for m in ("untrained", "trained")}
    out: dict[str, Any] = {"behaviour": {m: _behaviour(c, max_turns) for m, c in ctx.items() if c}}
    lines = ["### What the searcher does, before (untrained) and after (trained) training", ""]
    # the trajectories must be the evaluated ones: the same documents, in order, as each scored row
    match = out["trajectories_match_rows"] = {
        m: [sum(1 for i, r in runs.get(m, {}).items()
                if i in c and [d["id"] for d in c[i]["documents"]] == r.get("context_ids")), len(runs.get(m, {}))]
        for m, c in ctx.items() if c}
    if match:
        lines += ["Trajectories (contexts.jsonl) naming the same documents as the evaluated rows: "
                  + ", ".join(f"{m} {n} of {total}" for m, (n, total) in match.items()), ""]
    if out["behaviour"]:
        keys = list(next(iter(out["behaviour"].values())))
        lines += ["| | " + " | ".join(out["behaviour"]) + " |", "| --- |" + " ---: |" * len(out["behaviour"])]
        lines += [f"| {k} | " + " | ".join(f"{b[k]:.3f}" for b in out["behaviour"].values()) + " |" for k in keys]
        lines.append("")

    def gold_found(row: dict[str, Any]) -> int:
        return len(set(row.get("context_ids") or []) & gold.get(row["id"], set()))

    prec: dict[str, Any] = {}
    for m, rows in runs.items():
        docs = sum(len(r.get("context_ids") or []) for r in rows.values())
        if rows and docs and m != "no_retrieval":
            prec[m] = {"gold_per_question": sum(gold_found(r) for r in rows.values()) / len(rows),
                       "precision": sum(gold_found(r) for r in rows.values()) / docs}
    out["documents"] = prec
    if prec:
        lines += ["| method | gold documents per question | share of documents that are gold |", "| --- | ---: | ---: |"]
        lines += [f"| {m} | {p['gold_per_question']:.3f} | {p['precision']:.3f} |" for m, p in prec.items()]
        lines.append("")
    # more documents or better ones: split the paired trained - naive RAG comparison by gold documents found
    split: dict[str, Any] = {}
    tr, nv = runs.get("trained") or {}, runs.get("naive_rag") or {}
    for i in tr.keys() & nv.keys():
        a, b = tr[i]["metrics"].get("genacc"), nv[i]["metrics"].get("genacc")
        if a is None or b is None:
            continue
        g = gold_found(tr[i]) - gold_found(nv[i])
        cell = "more gold" if g > 0 else "same gold" if g == 0 else "less gold"
        c = split.setdefault(cell, {"n": 0, "diff_sum": 0.0})
        c["n"] += 1
        c["diff_sum"] += float(a) - float(b)
    for c in split.values():
        c["genacc_diff"] = c.pop("diff_sum") / c["n"]
    out["gain_by_gold"] = split
    if split:
        lines += ["Trained searcher vs naive RAG, questions split by whether the searcher's documents hold more gold "
                  "paragraphs than naive RAG's (a gain only where it holds more gold = better documents; a gain at "
                  "the same gold count = more/other context helped):", "",
                  "| questions where the trained searcher found | n | GenAcc trained - naive |", "| --- | ---: | ---: |"]
        lines += [f"| {k} | {v['n']} | {v['genacc_diff']:+.3f} |" for k, v in sorted(split.items())]
        lines.append("")
    # a few real trajectories: two the trained searcher gets right and naive RAG wrong, two the other way round
    picks: list[tuple[str, str]] = []
    for want, label in ((1.0, "trained right, naive RAG wrong"), (0.0, "trained wrong, naive RAG right")):
        ids = sorted(i for i in tr.keys() & nv.keys() if tr[i]["metrics"].get("genacc") == want
                     and nv[i]["metrics"].get("genacc") == 1.0 - want and i in ctx["trained"] and i in ctx["untrained"])
        picks += [(i, label) for i in ids[:2]]
    if picks:
        lines += ["### Real trajectories (untrained -> trained)", ""]
    for i, label in picks:
        lines += [f"**{label}** — {tr[i]['question']} (gold: {', '.join(tr[i]['golden_answers'][:2])}; naive RAG "
                  f"answered {nv[i]['answer']!r}, trained {tr[i]['answer']!r})", ""]
        for m in ("untrained", "trained"):
            c = ctx[m][i]
            titles = {d["id"]: d.get("title") or d["id"] for d in c.get("documents", [])}
            turns = []
            for s in c.get("steps", []):
                sel = ", ".join(titles.get(x, x) + (" (gold)" if x in gold.get(i, set()) else "")
                                for x in s.get("selected_ids") or [])
                what = f"search {s['query']!r}" if s.get("query") else "begin with the question"
                turns.append(f"turn {s['turn']}: {what} -> keep [{sel}]" + (" -> stop" if s.get("search_complete") else "")
                             + (f" (invalid: {s['invalid_reason']})" if s.get("invalid_reason") else ""))
            lines += [f"- {m}: " + "; ".join(turns)]
        lines.append("")
    return lines, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, epilog=tm.help_table("attempt"),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=("snapshot", "restore", "select", "evaluate", "report", "ablation", "all"))
    ap.add_argument("--config", default=str(ROOT / "configs" / "transfer.toml"))
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                    help="the attempt's results directory (selection, policy/, report, eval/); default "
                         "benchmarks/results/transfer (issue 22's run)")
    ap.add_argument("--work", type=Path, default=None,
                    help="where the eval runs go (default: --results; eval/<dataset>/<method>/: committed, so an "
                         "evaluation cut by the end of a session resumes on the next machine; the datasets' corpora and "
                         "indexes are rebuilt)")
    ap.add_argument("--baselines-from", type=Path, default=None,
                    help="another attempt's results directory: its naive_rag and no_retrieval runs are read instead of "
                         "run again (checked: same questions, index, k, generator, judge, metric)")
    ap.add_argument("--other-generator", action="append", default=[], metavar="MODEL",
                    help=f"evaluate: also run {', '.join(OTHER_GENERATOR_METHODS)} on {OTHER_GENERATOR_SLICE} with this "
                         "generator, one the searcher was not trained with (e.g. local/qwen2.5-coder-1.5b-instruct); "
                         "repeatable; <work>/eval_generators/<model>/. The report adds a table for each one run")
    args = ap.parse_args()
    global RESULTS, BASELINES
    RESULTS, BASELINES = args.results.resolve(), args.baselines_from.resolve() if args.baselines_from else None
    args.work = args.work.resolve() if args.work else RESULTS
    if args.stage == "snapshot":
        snapshot(args.config)
        return 0
    if args.stage == "restore":
        restore(args.config)
        return 0
    if args.stage in ("select", "all"):
        select(args.config)
    if args.stage in ("evaluate", "all"):
        evaluate(args.config, args.work, tuple(args.other_generator))
    if args.stage in ("report", "all"):
        report(args.config, args.work)
    if args.stage in ("ablation", "all"):
        ablation(args.config)
    return 0

