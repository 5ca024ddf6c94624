"""experiments/async_rl.py (benchmarks/async_rl.py, issue 47): the launch configurations, the steady-state
throughput read from the log lines, medians / ranges / ratios and the table, the cost check against the fake API's
own counts, the timeline bars and plot; and one real `s3 train` launch through `launch` against the real priced
loopback server, whose cost check is exact."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from experiments import async_rl as A


def test_train_sets_per_part() -> None:
    api = "http://127.0.0.1:9/v1"
    fake = A.train_sets(A.Condition("fake", 0), Path("/r"), Path("/d"), 4, api)
    assert "training.rollout.max_staleness=0" in fake and f"generator.api_base={api}" in fake
    assert "generator.cache_path=none" in fake and "training.backend=ray" not in fake
    assert f"generator.input_cost_per_mtok={A.IN_PRICE}" in fake and "training.total_steps=4" in fake
    local = A.train_sets(A.Condition("local", 2), Path("/r"), Path("/d"), 4, None)
    assert "training.rollout.max_staleness=2" in local and "generator.cache_path=none" in local
    assert not any(s.startswith(("generator.model", "generator.api_base")) for s in local)
    ray = A.train_sets(A.Condition("ray", 1), Path("/r"), Path("/d"), 4, api, rollout_workers=2)
    assert {"training.backend=ray", "ray.rollout_workers=2"} <= set(ray)
    with pytest.raises(ValueError, match="address"):
        A.train_sets(A.Condition("fake", 1), Path("/r"), Path("/d"), 4, None)
    with pytest.raises(ValueError, match="unknown part"):
        A.train_sets(A.Condition("gpu", 1), Path("/r"), Path("/d"), 4, api)
    # every override is a real config key: the smoke config loads with them
    from s3.config import load_config

    cfg = load_config(A.SMOKE, ray)
    assert cfg.training.rollout.max_staleness == 1 and cfg.ray.rollout_workers == 2
    assert cfg.generator.model == "openai/fake" and cfg.training.rollout.batch_size == 1


def test_interleaved_order_and_names() -> None:
    conds = [A.Condition("fake", 0), A.Condition("fake", 1), A.Condition("fake", 2)]
    order = [(i, c.name) for i, c in A.interleave(conds, 3)]
    assert order[:4] == [(0, "fake/sync"), (0, "fake/async1"), (0, "fake/async2"), (1, "fake/sync")]
    assert len(order) == 9


def test_throughput_steady_state() -> None:
    at = {1: 30.0, 2: 34.0, 3: 38.0, 4: 42.0, 5: 42.5}  # step 1 = warm-up, step 5 = the drain
    assert A.throughput(at) == pytest.approx(3 / 12)
    assert A.throughput(at, drain=0) == pytest.approx(4 / 12.5)
    assert A.throughput({}) is None and A.throughput({1: 1.0, 2: 2.0}) is None
    assert A.parse_step("step 2/5 reward 0.000 invalid 1.00 turns 1.00 3.1s\n") == 2
    assert A.parse_step("step 2/5 warm-up nll 1.2 turns 1 3.1s") is None
    assert A.parse_step("train: checkpoint /x/step_000002") is None


def _launch(name: str, i: int, at: dict[int, float], run_dir: Path, update: float) -> A.Launch:
    run_dir.mkdir(parents=True)
    with (run_dir / "metrics.jsonl").open("w") as fh:
        for s in at:
            fh.write(json.dumps({"step": s, "charts/update_seconds": update, "charts/wait_seconds": 1.0}) + "\n")
    return A.Launch(name, i, str(run_dir), 0, step_at=at)


def test_summary_ratio_and_table(tmp_path: Path) -> None:
    sync = [_launch("fake/sync", i, {1: 0, 2: 2 * d, 3: 4 * d, 4: 4 * d + 1}, tmp_path / f"s{i}", 1.0)
            for i, d in enumerate((1.0, 1.25, 2.0))]  # 0.5, 0.4, 0.25 steps/s
    fast = [_launch("fake/async1", i, {1: 0, 2: d, 3: 2 * d, 4: 2 * d + 1}, tmp_path / f"a{i}", 1.5)
            for i, d in enumerate((1.0, 1.25, 2.0))]  # 1.0, 0.8, 0.5 steps/s
    summary = A.summarize([sync[0], fast[0], sync[1], fast[1], sync[2], fast[2]])
    assert list(summary) == ["fake/sync", "fake/async1"]
    assert summary["fake/sync"]["steps_per_s"] == {"median": 0.4, "min": 0.25, "max": 0.5, "n": 3}
    assert summary["fake/async1"]["steps_per_s"]["median"] == 0.8
    assert summary["fake/async1"]["update_seconds"] == 1.5
    assert A.ratios(summary) == {"fake/async1": 2.0}
    md = A.table(summary)
    assert "| fake/async1 | 3 | 0.800 | 0.500-1.000 | 2.00x | 1.50 | 1.00 |" in md
    failed = A.Launch("fake/async1", 3, str(tmp_path / "none"), 1)
    assert A.summarize([*sync, failed])["fake/async1"]["failed"] == 1


def test_cost_check_against_the_server() -> None:
    rows = [{"step": 1, "reward/cost_usd": 2.5e-4, "cost/paid_calls": 3.0, "cost/usd_total": 2.5e-4},
            {"step": 2, "reward/cost_usd": 1.0e-5, "cost/paid_calls": 1.0, "cost/usd_total": 2.6e-4}]
    api = {"answered": 4.0, "prompt_tokens": 100.0, "completion_tokens": 0.0}  # 100 x 2.5 / 1e6 = 2.5e-4
    bad = A.cost_check(rows, api)
    assert bad["api_usd"] == pytest.approx(2.5e-4) and bad["run_usd"] == pytest.approx(2.6e-4) and not bad["exact"]
    api["completion_tokens"] = 1.0  # + 1 x 10 / 1e6
    good = A.cost_check(rows, api)
    assert good["exact"] and good["run_calls"] == good["api_calls"] == 4
    assert not A.cost_check(rows, {**api, "answered": 5.0})["exact"]  # a call the run did not count
    assert A.delta({"answered": 2.0}, {"answered": 6.0}) == {"answered": 4.0}


def test_timeline_bars_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rows = [{"step": 1, "batch": 0, "rollout": [100.0, 101.0], "reward": [101.0, 102.0], "wait": [100.0, 102.0],
             "update": [102.0, 103.0], "sync": [103.0, 103.0]},
            {"step": 2, "batch": 1, "rollout": [102.0, 103.0], "reward": [103.0, 104.0], "wait": [103.0, 104.0],
             "update": [104.0, 105.0], "sync": [105.0, 105.5]}]
    bars = A.timeline_bars(rows)
    assert (2, "reward", 3.0, 1.0) in bars and (1, "update", 2.0, 1.0) in bars and len(bars) == 10
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "timeline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    png = A.plot_timelines({"sync": tmp_path / "a", "async": tmp_path / "b"}, tmp_path / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.integration
@pytest.mark.slow
def test_one_real_launch_is_timed_and_its_cost_exact(tmp_path: Path, tiny_policy_dir: Path,
                                                     training_data: Path) -> None:
    """`launch` on the real `s3 train` (the tiny random policy, batch 1 x group 2, 3 steps, async at staleness 1)
    against the real priced loopback server: every step's log line is timed, and the run's cost and calls are the
    server's own."""
    pytest.importorskip("torch")
    from generator_adapters.testing import FakeLLMServer

    with FakeLLMServer(reply="varied", usage="tiktoken", latency_s=0.05) as srv:
        cond = A.Condition("fake", 1)
        sets = [*A.train_sets(cond, tmp_path / "run", tmp_path / "data", 3, srv.api_base),
                f"training.base_model={tiny_policy_dir}", "searcher.max_new_tokens=8", "searcher.doc_token_budget=16"]
        assert A.prepare(sets) == 0  # the data and its naive-RAG baseline calls first: the launch's calls are its steps'
        before = A.server_snapshot(srv)
        x = A.launch(cond.name, 0, sets, tmp_path / "run", python=sys.executable, timeout_s=240, log=lambda s: None)
        x.server = A.delta(before, A.server_snapshot(srv))
    assert x.rc == 0, x.tail
    assert sorted(x.step_at) == [1, 2, 3] and x.step_at[1] < x.step_at[2] < x.step_at[3]
    tp = x.throughput(drain=0)
    assert tp is not None and tp > 0
    rows = A.metrics(x.run_dir)
    assert [r["rollout/staleness"] for r in rows] == [0.0, 1.0, 1.0]  # batch 0 before any update, then one behind
    check = A.cost_check(rows, x.server)
    assert check["exact"] and check["run_calls"] > 0, check
