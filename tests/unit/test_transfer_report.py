"""The transfer experiment's report (experiments/transfer/attempt.py) on synthetic runs: the paired table, the training
trends, the diagnostics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def transfer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    import experiments.transfer.attempt

    monkeypatch.setattr(experiments.transfer.attempt, "RESULTS", tmp_path / "results")
    return experiments.transfer.attempt


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row(i: int, genacc: float, ids: list[str]) -> dict[str, Any]:
    return {"id": f"q{i}", "question": f"question {i}?", "golden_answers": [f"a{i}"], "context_ids": ids,
            "answer": "x", "metrics": {"genacc": genacc, "em": genacc}, "support_recall": 0.5, "turns": 1}


def test_report_pairs_methods_splits_gains_by_gold_and_reads_the_training_run(transfer: Any, tmp_path: Path) -> None:
    work, run = tmp_path / "work", tmp_path / "run"
    ds = work / "eval" / "hotpotqa_dev500"
    n = 20
    _write(ds / "data" / "questions.jsonl",
           [{"id": f"q{i}", "question": f"question {i}?", "metadata": {"supporting_ids": [f"g{i}"]}} for i in range(n)])
    # naive RAG: right on the first 5; trained: right on the first 10 and finds the gold paragraph on 5..9
    _write(ds / "naive_rag" / "results.jsonl", [_row(i, float(i < 5), [f"d{i}", f"g{i}" if i < 5 else "z"]) for i in range(n)])
    _write(ds / "trained" / "results.jsonl", [_row(i, float(i < 10), [f"g{i}" if i < 10 else "z"]) for i in range(n)])
    _write(ds / "untrained" / "results.jsonl", [_row(i, float(i < 4), ["z"]) for i in range(n)])
    for m in ("trained", "untrained"):
        _write(ds / m / "contexts.jsonl", [{
            "id": f"q{i}", "question": f"question {i}?", "turns": 1 if m == "trained" else 3,
            "documents": [{"id": f"g{i}", "title": f"Gold {i}"}],
            "steps": [{"turn": 0, "query": None, "selected_ids": []},
                      {"turn": 1, "query": f"question {i}?" if m == "untrained" else f"better {i}",
                       "selected_ids": [f"g{i}"], "search_complete": m == "trained"}]} for i in range(n)])
    _write(run / "metrics.jsonl",
           [{"step": s, "charts/sft": 1.0, "losses/sft_nll": 1.0 / s} for s in (1, 2)]
           + [{"step": s, "reward/mean": 0.1 * s, "reward/acc_s3": 0.05 * s, "reward/acc_rag": 0.2, "losses/kl": 0.01,
               "reward/flat_groups": 10 - s, "charts/step_seconds": 100.0 + s, "data/rl_coverage": s / 8}
              for s in range(3, 9)])
    _write(run / "heldout.jsonl",
           [{"step": s, "checkpoint": f"step_{s:06d}", "heldout/acc_s3": a, "heldout/acc_rag": 0.25,
             "heldout/reward": a - 0.25, "heldout/turns": 2.0, "heldout/docs": 4.5} for s, a in ((2, 0.2), (8, 0.3))])
    cfg = tmp_path / "transfer.toml"
    text = (ROOT / "configs" / "transfer.toml").read_text()
    assert 'output_dir = "../runs/transfer/grpo"' in text
    cfg.write_text(text.replace('output_dir = "../runs/transfer/grpo"', f'output_dir = "{run}"'))
    transfer.report(str(cfg), work)
    report = json.loads((tmp_path / "results" / "report.json").read_text())
    ds_out = report["datasets"]["hotpotqa_dev500"]
    paired = ds_out["paired"]["trained-naive_rag:GenAcc"]
    assert paired["diff"] == pytest.approx(0.25) and paired["wins"] == 5 and paired["losses"] == 0
    assert ds_out["diagnostics"]["gain_by_gold"]["more gold"] == {"n": 5, "genacc_diff": 1.0}
    assert ds_out["diagnostics"]["gain_by_gold"]["same gold"] == {"n": 15, "genacc_diff": 0.0}
    beh = ds_out["diagnostics"]["behaviour"]
    assert beh["untrained"]["query_is_the_question"] == 1.0 and beh["trained"]["query_is_the_question"] == 0.0
    assert beh["trained"]["stopped_before_last_turn"] == 1.0
    # trajectories are checked against the rows they claim to explain (trained: the gold paragraph on q0..q9 only)
    assert ds_out["diagnostics"]["trajectories_match_rows"] == {"untrained": [0, 20], "trained": [10, 20]}
    # neither searcher kept more than k = 3 documents: the caps were not run and read as the uncapped runs, said so
    assert ds_out["cap_is_uncapped"] == ["trained_cap", "untrained_cap"]
    assert ds_out["paired"]["trained_cap-naive_rag:GenAcc"]["diff"] == pytest.approx(0.25)
    assert "trained_cap, untrained_cap: not run" in (tmp_path / "results" / "report.md").read_text()
    train = report["training"]
    assert train["rl_steps"] == 6 and train["warmup_steps"] == 2 and train["rl_coverage"] == 1.0
    assert train["trends"]["reward/gbr"]["diff"] > 0 and train["step_seconds"]["median"] == pytest.approx(105.5)
    md = (tmp_path / "results" / "report.md").read_text()
    assert "trained - naive_rag" in md and "Real trajectories" in md and "Gold 5 (gold)" in md
    assert (tmp_path / "results" / "curves.png").stat().st_size > 1000
    assert (tmp_path / "results" / "eval.png").stat().st_size > 1000  # GenAcc and the paired differences, with CIs
    assert [r["step"] for r in train["heldout"]] == [2, 8] and "| 8 | 0.300 | 0.250 | 0.050 | 2.00 | 4.50 |" in md
    # the run's record files stay beside the report (the run directory does not outlive the experiment), and the
    # report reads them there once the run directory is gone
    assert (tmp_path / "results" / "heldout.jsonl").read_text() == (run / "heldout.jsonl").read_text()
    (tmp_path / "results" / "report.md").unlink()
    cfg.write_text(text.replace('output_dir = "../runs/transfer/grpo"', f'output_dir = "{tmp_path / "gone"}"'))
    transfer.report(str(cfg), work)
    assert json.loads((tmp_path / "results" / "report.json").read_text())["training"] == train
    assert (tmp_path / "results" / "report.md").read_text() == md


def test_snapshot_keeps_what_a_resume_needs_and_restore_puts_it_back_only_over_an_older_run(transfer: Any,
                                                                                              tmp_path: Path) -> None:
    """A session's machine keeps only the repository: the snapshot (committed) must let a fresh clone resume."""
    run = tmp_path / "runs" / "grpo"
    cfg = tmp_path / "exp.toml"
    cfg.write_text('[training]\noutput_dir = "runs/grpo"\n')
    ck = run / "checkpoints"
    for step in (10, 15, 20):
        d = ck / f"step_{step:06d}"
        (d / "adapter").mkdir(parents=True)
        (d / "adapter" / "adapter_model.safetensors").write_bytes(b"w%d" % step)
        (d / "adapter" / "tokenizer.json").write_text("{}")  # the base model's: not carried
        (d / "policy").mkdir()
        (d / "policy" / "model.safetensors").write_bytes(b"big merged weights")
        (d / "trainer_state.pt").write_bytes(b"s%d" % step)
    (ck / "latest").write_text("step_000020")
    (ck / "best").write_text("step_000010")
    (run / "reference").mkdir()
    (run / "reference" / "adapter_config.json").write_text("{}")
    (run / "reference" / "adapter_model.safetensors").write_bytes(b"w10")  # the warm-up's end = the best step
    (run / "reference" / "tokenizer.json").write_text("{}")
    (run / "metrics.jsonl").write_text('{"step": 20}\n')
    (run / "heldout.jsonl").write_text('{"step": 10}\n')
    (run / "distill_summary.json").write_text('{"kept": 3}')

    snap = transfer.snapshot(str(cfg), tmp_path / "snap")
    files = {str(p.relative_to(snap)) for p in snap.rglob("*") if p.is_file()}
    # no merged weights, no step 15, no tokenizer copies, and step 10's weights (= the reference's) stored once
    assert files == {"metrics.jsonl", "heldout.jsonl", "distill_summary.json", "reference/adapter_config.json",
                     "reference/adapter_model.safetensors", "checkpoints/latest", "checkpoints/best",
                     "checkpoints/step_000020/adapter/adapter_model.safetensors",
                     "checkpoints/step_000020/trainer_state.pt", "checkpoints/step_000010/adapter/SAME_AS_REFERENCE"}

    import shutil

    shutil.rmtree(tmp_path / "runs")  # a fresh clone
    assert transfer.restore(str(cfg), snap) == run
    assert (ck / "latest").read_text() == "step_000020" and (ck / "best").read_text() == "step_000010"
    assert (ck / "step_000020" / "trainer_state.pt").read_bytes() == b"s20"
    assert (ck / "step_000010" / "adapter" / "adapter_model.safetensors").read_bytes() == b"w10"
    assert not (ck / "step_000010" / "adapter" / "SAME_AS_REFERENCE").exists()
    assert (run / "distill_summary.json").is_file()
    assert (run / "reference" / "adapter_config.json").is_file() and (run / "heldout.jsonl").is_file()
    (ck / "latest").write_text("step_000025")  # the run went on past the snapshot: restore leaves it alone
    assert transfer.restore(str(cfg), snap) is None and (ck / "latest").read_text() == "step_000025"
    assert transfer.restore(str(cfg), tmp_path / "nothing") is None


def test_every_evaluated_method_is_a_valid_s3_eval_call(transfer: Any) -> None:
    """The evaluate stage's --set overrides are real config keys and the equal-budget cap binds (a misspelt key stops
    a 2-hour evaluation halfway); no_retrieval is the one method without an index."""
    from eval.harness import METHODS
    from s3.config import load_config

    cfgfile = str(ROOT / "configs" / "transfer.toml")
    k = load_config(cfgfile).retriever.k
    methods = transfer._methods(k)
    assert list(methods)[:2] == ["naive_rag", "trained"]  # the comparison that matters runs first
    for name, margs in methods.items():
        assert margs[0] in METHODS
        sets = [margs[i + 1] for i, a in enumerate(margs) if a == "--set"]
        cfg = load_config(cfgfile, sets)
        if name.endswith("_cap"):
            assert cfg.searcher.max_contexts == k
        elif margs[0] == "searcher":
            assert cfg.searcher.max_contexts == cfg.searcher.max_select * cfg.searcher.max_turns == 9
            assert cfg.searcher.policy == "vllm"


def test_another_generator_runs_the_same_searchers_and_gets_its_own_table(transfer: Any, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """evaluate --other-generator: naive RAG, untrained and trained on hotpotqa_dev500 with only the generator changed
    (a finished run is not repeated); report: a table and paired differences per generator."""
    from s3.config import load_config

    cfgfile = str(ROOT / "configs" / "transfer.toml")
    work = tmp_path / "work"
    (transfer.RESULTS / "policy").mkdir(parents=True)
    limits = {name: limit for name, (_, _, limit) in transfer.DATASETS.items()}
    for name in transfer.DATASETS:  # every main method already finished: only the other generator's runs are made
        _write(work / "eval" / name / "data" / "corpus.jsonl", [{"id": "d"}])
        (work / "eval" / name / "index").mkdir(parents=True)
        for method in transfer._methods(3):
            (work / "eval" / name / method).mkdir(parents=True)
            (work / "eval" / name / method / "summary.json").write_text(json.dumps({"n_scored": limits[name]}))
    model = "local/qwen2.5-coder-1.5b-instruct"
    done = transfer._other_run_path(work, model, "naive_rag")
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps({"n_scored": limits[transfer.OTHER_GENERATOR_SLICE]}))
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(transfer, "run_s3", lambda *a: calls.append(a))
    transfer.evaluate(cfgfile, work, (model,))
    assert [c[c.index("--out") + 1] for c in calls] == [
        str(transfer._other_run_path(work, model, m)) for m in ("trained", "untrained")]
    for c in calls:
        sets = [c[i + 1] for i, a in enumerate(c) if a == "--set"]
        cfg = load_config(cfgfile, sets)
        assert cfg.generator.model == model and cfg.judge_resolved.model == load_config(cfgfile).judge_resolved.model
        assert c[c.index("--dataset") + 1].endswith("hotpotqa_dev500/data") and "--index" in c
    assert f"searcher.policy_path={transfer.RESULTS / 'policy'}" in calls[0] and "searcher.policy_path=null" in calls[1]

    n = 10
    for m, right in (("naive_rag", 3), ("untrained", 3), ("trained", 6)):
        run = transfer._other_run_path(work, model, m)
        _write(run / "results.jsonl", [_row(i, float(i < right), ["d"]) for i in range(n)])
        (run / "summary.json").write_text(json.dumps({"n_scored": n, "config": {"generator": {"model": model}}}))
    transfer.report(cfgfile, work)
    report = json.loads((transfer.RESULTS / "report.json").read_text())
    other = report["other_generators"][model]
    assert other["paired"]["trained-naive_rag:GenAcc"]["diff"] == pytest.approx(0.3)
    assert other["methods"]["untrained"]["genacc"]["mean"] == pytest.approx(0.3)
    assert f"## hotpotqa_dev500, generator {model}" in (transfer.RESULTS / "report.md").read_text()


def test_evaluate_runs_the_main_methods_then_the_other_generator_then_the_caps(transfer: Any, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The order the claims need them in: a cut evaluation has the four main methods and the other generator's
    comparison before the equal-budget caps."""
    cfgfile = str(ROOT / "configs" / "transfer.toml")
    work = tmp_path / "work"
    (transfer.RESULTS / "policy").mkdir(parents=True)
    for name in transfer.DATASETS:
        _write(work / "eval" / name / "data" / "corpus.jsonl", [{"id": "d"}])
        (work / "eval" / name / "index").mkdir(parents=True)
    model = "local/qwen2.5-coder-1.5b-instruct"
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(transfer, "run_s3", lambda *a: calls.append(a))
    transfer.evaluate(cfgfile, work, (model,))
    outs = [c[c.index("--out") + 1] for c in calls]
    main = [str(work / "eval" / name / m) for m in ("naive_rag", "trained", "untrained", "no_retrieval")
            for name in transfer.DATASETS]
    other = [str(transfer._other_run_path(work, model, m)) for m in transfer.OTHER_GENERATOR_METHODS]
    caps = [str(work / "eval" / name / m) for m in ("trained_cap", "untrained_cap") for name in transfer.DATASETS]
    assert outs == main + other + caps


def test_a_cap_that_cannot_bind_is_not_run(transfer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The equal-budget cap of a searcher that never kept more than k documents would repeat its uncapped run: it is
    skipped; one that kept more (or whose uncapped run is unfinished) runs."""
    cfgfile = str(ROOT / "configs" / "transfer.toml")
    work = tmp_path / "work"
    (transfer.RESULTS / "policy").mkdir(parents=True)
    for name, (_, _, limit) in transfer.DATASETS.items():
        _write(work / "eval" / name / "data" / "corpus.jsonl", [{"id": "d"}])
        (work / "eval" / name / "index").mkdir(parents=True)
        for method in ("naive_rag", "trained", "untrained", "no_retrieval"):
            docs = {"trained": 3, "untrained": 9}.get(method, 3)
            run = work / "eval" / name / method
            _write(run / "results.jsonl", [_row(i, 0.0, [f"d{j}" for j in range(docs if i == 0 else 1)])
                                           for i in range(limit)])
            (run / "summary.json").write_text(json.dumps({"n_scored": limit}))
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(transfer, "run_s3", lambda *a: calls.append(a))
    transfer.evaluate(cfgfile, work)
    assert [c[c.index("--out") + 1] for c in calls] == [str(work / "eval" / name / "untrained_cap")
                                                        for name in transfer.DATASETS]
    # an unfinished uncapped run says nothing yet: its cap runs
    name, (_, _, limit) = next(iter(transfer.DATASETS.items()))
    (work / "eval" / name / "trained" / "summary.json").write_text(json.dumps({"n_scored": limit - 1}))
    assert not transfer._cap_is_idle(work, name, "trained_cap", 3, limit)
    assert transfer._cap_is_idle(work, name, "trained_cap", 3)  # the report reads whatever rows there are


def test_ablation_reads_both_attempts_held_out_rows_and_splits_warm_up_from_rl(transfer: Any, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The held-out ablation is assembled from evaluations already made: each attempt's untrained base, the end of
    its warm-up, its chosen RL checkpoint (the best Acc after the warm-up) and its last."""
    prev, run = tmp_path / "prev", tmp_path / "run"

    def held(step: int, acc: float) -> dict[str, Any]:
        return {"step": step, "checkpoint": f"step_{step:06d}", "heldout/acc_s3": acc, "heldout/acc_rag": 0.2,
                "heldout/reward": acc, "heldout/turns": 1.0, "heldout/docs": 2.0}

    base = {"policy": "smollm2-135m-instruct", "acc_s3_mean": 0.2, "acc_rag_mean": 0.2, "reward_mean": 0.0,
            "turns_mean": 3.0, "docs_mean": 3.5}
    _write(prev / "selection.jsonl", [base, {**base, "policy": "step_000020", "acc_s3_mean": 0.9}])
    _write(prev / "heldout.jsonl", [held(8, 0.19), held(20, 0.25), held(70, 0.2)])
    _write(prev / "metrics.jsonl", [{"step": s, "charts/sft": 1.0} for s in range(1, 9)])
    _write(transfer.RESULTS / "selection.jsonl", [{**base, "acc_s3_mean": 0.15}])
    _write(run / "heldout.jsonl", [held(16, 0.18), held(20, 0.17), held(30, 0.3), held(40, 0.29), held(60, 0.22)])
    _write(run / "metrics.jsonl", [{"step": s, "charts/sft": 1.0} for s in range(1, 17)] + [{"step": 17}])
    _write(run / "heldout_questions.jsonl", [{"step": 30, "id": f"q{i}", "acc_s3": a, "acc_rag": b}
                                             for i, (a, b) in enumerate(((1, 0), (1, 0), (0, 1), (1, 1), (0, 0), (1, 0)))]
           + [{"step": 30, "id": "q5", "acc_s3": 0, "acc_rag": 0}])  # q5 again (a redone evaluation): the last row counts
    # the loop it trained with (k0/k:select:turns): the run's searcher.json; the previous attempt has none here
    (run / "searcher.json").write_text(json.dumps({"searcher": {"k": 8, "max_select": 3, "max_turns": 3,
                                                               "doc_token_budget": 96}, "retriever": {"k": 3}}))
    monkeypatch.setattr(transfer, "BASELINES", prev)
    monkeypatch.setattr(transfer, "_run_dir", lambda config: run)
    lines = transfer.ablation(str(ROOT / "configs" / "transfer2.toml"))
    table = [ln for ln in lines if ln.startswith("| ") and "policy" not in ln and "---" not in ln]
    got = [(ln.split(" | ")[0][2:], ln.split(" | ")[2]) for ln in table]
    assert got == [("prev: untrained smollm2-135m-instruct", "0.200"), ("prev: + warm-up (8 supervised steps)", "0.190"),
                   ("prev: + RL, chosen (step 20 of 70)", "0.250"), ("prev: + RL, last (step 70)", "0.200"),
                   ("results: untrained smollm2-135m-instruct", "0.150"),
                   ("results: + warm-up (16 supervised steps)", "0.180"),
                   ("results: + RL, chosen (step 30 of 60)", "0.300"), ("results: + RL, last (step 60)", "0.220")]
    assert "the same questions" in lines[2] and (transfer.RESULTS / "ablation.md").is_file()
    assert [ln.split(" | ")[5] for ln in table] == ["-"] * 6 + ["2 / 1", "-"]  # per question: step 30 only
    assert [ln.split(" | ")[1] for ln in table] == ["?"] * 4 + ["3/8:3:3, 96 tokens"] * 4
    # once the run directory is gone (and no policy/ is left), the copies report() left beside it give the same table
    for name in ("heldout.jsonl", "heldout_questions.jsonl", "metrics.jsonl", "searcher.json"):
        (transfer.RESULTS / name).write_text((run / name).read_text())
    monkeypatch.setattr(transfer, "_run_dir", lambda config: tmp_path / "gone")
    assert transfer.ablation(str(ROOT / "configs" / "transfer2.toml")) == lines


def test_select_after_the_run_is_gone_keeps_the_choice_made(transfer: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`transfer.py all` on a machine without the run (and with its snapshot removed) goes on to the evaluation with
    the policy chosen before; with neither a run nor a choice it says what is missing."""
    monkeypatch.setattr(transfer, "_run_dir", lambda config: tmp_path / "gone")
    config = str(ROOT / "configs" / "transfer2.toml")
    with pytest.raises(SystemExit, match="no checkpoints"):
        transfer.select(config)
    (transfer.RESULTS / "selected.json").write_text(json.dumps({"policy": "step_000030", "heldout": {}}))
    # an attempt whose policy left the tree (transfer2's): the choice stands, the evaluation says what is missing
    assert transfer.select(config)["policy"] == "step_000030"
    with pytest.raises(SystemExit, match=r"no trained policy at .*results/policy: run the select stage first"):
        transfer.evaluate(config, tmp_path / "work")
    (transfer.RESULTS / "policy").mkdir(parents=True)
    assert transfer.select(config)["policy"] == "step_000030"


def test_an_attempt_without_its_own_question_file_reads_the_one_with_the_same_sha(transfer: Any, tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The repository keeps one copy of a dev slice's questions.jsonl: a second attempt's data/ holds only the manifest,
    and its report's gold documents come from the first attempt's copy when the manifest's sha256 matches it."""
    from s3core.io import file_sha256

    first, second = tmp_path / "first", tmp_path / "second"
    _write(first / "eval" / "musique_dev200" / "data" / "questions.jsonl",
           [{"id": "q1", "metadata": {"supporting_ids": ["a", "b"]}}, {"id": "q2", "metadata": {}}])
    monkeypatch.setattr(transfer, "DEFAULT_RESULTS", first)
    data = second / "eval" / "musique_dev200" / "data"
    data.mkdir(parents=True)
    sha = file_sha256(first / "eval" / "musique_dev200" / "data" / "questions.jsonl")
    (data / "manifest.json").write_text(json.dumps({"questions_sha256": sha}))
    assert transfer._gold(data) == {"q1": {"a", "b"}, "q2": set()}
    (data / "manifest.json").write_text(json.dumps({"questions_sha256": "0" * 64}))  # other questions: not borrowed
    assert transfer._gold(data) == {}
    _write(data / "questions.jsonl", [{"id": "q9", "metadata": {"supporting_ids": ["z"]}}])  # its own copy wins
    assert transfer._gold(data) == {"q9": {"z"}}
