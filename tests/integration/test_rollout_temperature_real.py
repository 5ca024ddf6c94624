"""benchmarks/rollout_temperature.py on real components: a prepared training set (HotpotQA slice, bm25), the real s3
loop through the training executor's rollout path (LocalExecutor over a real transformers policy: the tiny random
Llama with SmolLM2's tokenizer, given as a --policy checkpoint folder), the real retrieval_gain scorer. The rows, the
report and the plot are written; the same seed samples the same rollouts at a temperature; a rerun resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_distill import DATA, SMOKE

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("training_data")]


pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_real_rollouts_per_temperature_resume_and_repeat(tmp_path: Path, tiny_policy_dir: Path) -> None:
    import experiments.rollout_temperature as rt
    from s3.config import load_config
    from training.prep.data import prepared_training_set

    sets = [
        f"training.data.sources={json.dumps([f'hotpotqa:{DATA}'])}", f"training.data.dir={tmp_path / 'data'}",
        "training.data.max_questions=10", "training.data.keep_baseline_zero=false", "training.heldout.questions=3",
        "training.reward=retrieval_gain", "training.invalid_penalty=0.1", f"training.base_model={tiny_policy_dir}",
        f"training.output_dir={tmp_path / 'run'}", "training.rollout.group_size=2", "searcher.max_turns=1",
        "searcher.max_new_tokens=8", "searcher.doc_token_budget=16",
    ]
    prepared_training_set(load_config(SMOKE, sets), log=lambda s: None)  # the lead's set is prepared already
    args = ["--config", str(SMOKE), *(x for s in sets for x in ("--set", s)), "--policy", str(tiny_policy_dir),
            "--questions", "2", "--chunk", "2"]
    out = tmp_path / "out"
    assert rt.main([*args, "--temperatures", "0.7", "1.5", "--out", str(out)]) == 0
    rows = [json.loads(x) for x in (out / rt.ROWS_FILE).read_text().splitlines()]
    assert len(rows) == 4 and {(r["temperature"], r["index"]) for r in rows} == {(t, i) for t in (0.7, 1.5) for i in (0, 1)}
    held = [r["id"] for r in rows if r["temperature"] == 0.7]
    run = json.loads((out / rt.RUN_FILE).read_text())
    assert run["question_ids"] == held and run["settings"]["group_size"] == 2
    for r in rows:  # scored by the real scorer: the format term is the invalid-turn fraction's
        assert len(r["rewards"]) == len(r["rollouts"]) == 2
        assert all(o["top_k"] and o["first_reply"] is not None for o in r["rollouts"])
        assert all(x is not None for x in r["rewards"])
        assert all(-0.1 <= f <= 0.0 for f in r["format_terms"])
    res = json.loads((out / rt.RESULTS_FILE).read_text())
    assert list(res["by_temperature"]) == ["0.7", "1.5"] and res["by_temperature"]["0.7"]["rollouts"] == 4
    assert res["questions"] == 2 and res["reward"] == "retrieval_gain"
    assert "| 0.7 |" in (out / rt.REPORT_FILE).read_text() and (out / rt.PLOT_FILE).stat().st_size > 0
    # a rerun finds everything done; the same seed in another folder samples the same rollouts
    assert rt.main([*args, "--temperatures", "0.7", "1.5", "--out", str(out)]) == 0
    assert len((out / rt.ROWS_FILE).read_text().splitlines()) == 4
    again = tmp_path / "again"
    assert rt.main([*args, "--temperatures", "0.7", "--out", str(again)]) == 0
    rows2 = [json.loads(x) for x in (again / rt.ROWS_FILE).read_text().splitlines()]
    first = [r for r in rows if r["temperature"] == 0.7]

    def same(r: dict) -> tuple:  # type: ignore[type-arg]
        return r["id"], r["rewards"], [o["first_reply"] for o in r["rollouts"]]

    assert [same(r) for r in rows2] == [same(r) for r in first]
    replies = {o["first_reply"] for r in first for o in r["rollouts"]}
    assert len(replies) > 1  # sampled: the group's members differ
