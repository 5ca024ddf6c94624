"""Asynchronous RL (training.rollout.max_staleness, training/rollouts/pipeline.py) through the real trainer: a tiny random Llama
(1 layer, hidden 16) with SmolLM2's tokenizer as the policy (transformers: the learner samples itself), the real bm25
index over ../shared/data/train_hotpotqa_musique100, GRPO; the reward is a parity of a rollout's tokens (`LengthReward`:
no generator, and uneven, so the updates move the weights; Ray's reward workers keep R1-Searcher's format reward).

- max_staleness 0 is the synchronous loop: a reference loop written out here (rollout -> score -> update_rows ->
  learner.update -> step_scheduler -> sync) over the same parts gives the same metrics and the same weights, bit for
  bit (but the generating policy's own log-prob noise, `_same`), and its checkpoint holds nothing in flight;
- max_staleness 1 and 2 run: every batch of the data order is updated once, in order, with staleness
  min(step, s); the timeline has a row per step and plots;
- a staleness-1 run stopped after its step-2 checkpoint (batch 2 in flight, saved) and resumed by a new trainer gives
  the uninterrupted run's metrics and weights (to the generating policy's log-prob noise, `_same`);
- against the priced loopback API (acc_plus_gbr: one generator call per rollout) at staleness 1, a budget stops the
  run before the step whose scoring could pass it, with a step in flight; the refused batch is kept unscored and the
  resumed run with a higher budget scores it and finishes; the spend is the server's own token count at the prices;
- on Ray (1 rollout worker, 1 reward worker) at staleness 1 the rollouts run on the rollout thread while the learner
  updates, and the worker ends holding the learner's weights.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("training_data")]

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "smoke.toml"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

STEPS = 3
_SETS = [
    "training.data.max_questions=8", "training.rollout.batch_size=2", "training.rollout.group_size=2",
    "training.algorithm=grpo", "training.reward=r1_searcher_stage1", "training.data.keep_baseline_zero=false",
    "training.update.kl_coef=0.05", "training.rollout.temperature=1.0", "training.update.learning_rate=0.001",
    "training.learner.micro_batch_size=2", "training.checkpoint.every=2", f"training.total_steps={STEPS}",
    "searcher.max_new_tokens=16", "searcher.doc_token_budget=24",
    "training.learner.torch_threads=1",  # the same float sums in every run, whatever the machine's load
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, tiny_policy_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("async")
    (root / "tiny").symlink_to(tiny_policy_dir, target_is_directory=True)
    return root


class LengthReward:
    """A reward the random policy's rollouts earn unevenly (the format reward gives them all the same): the parity of
    the sum of a rollout's response token ids - a pure function of the rollout, so every run scores the same rollouts alike
    and GRPO's groups have advantages (the update moves the weights)."""

    accuracy = None  # no generator: no usage

    async def score(self, results: list[Any], examples: list[Any]) -> Any:
        from training.rewards import RewardBatch

        return RewardBatch(rewards=[float(sum(r.trajectory.response_ids) % 2) for r in results])


def _trainer(root: Path, name: str, *extra: str, reward: bool = False) -> Any:
    from s3.config import load_config
    from training.run.trainer import make_trainer

    cfg = load_config(SMOKE, [*_SETS, f"training.base_model={root / 'tiny'}", f"training.data.dir={root / 'data'}",
                              f"training.output_dir={root / name}", *extra])
    torch.manual_seed(0)  # the local learner samples from torch's global generator: each run from the same state
    t = make_trainer(cfg, log=lambda s: None)
    if cfg.training.backend == "local" and not reward:
        from training.rollouts.budget import BudgetedExecutor
        from training.rollouts.executors import LocalExecutor

        assert isinstance(t.executor, BudgetedExecutor) and isinstance(t.executor.inner, LocalExecutor)
        t.executor.inner.scorer = LengthReward()  # type: ignore[assignment]
    return t


def _weights(t: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in t.learner.model.state_dict().items()}


def _same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _timeless(row: dict[str, Any]) -> dict[str, Any]:
    """A metrics row without its wall times (charts/*_seconds, weight sync)."""
    return {k: v for k, v in row.items() if not (k.endswith("_seconds") or k.startswith("charts/weight_sync"))}


def _same(k: str, a: Any, b: Any) -> bool:
    """Equal; NaN equals NaN. The log-probs the policy reports while it generates are not reproducible to the last bit
    (two identical runs differ by ~1e-8 in rollout/logprob_gap_*, with equal tokens, rewards and losses), and with
    stale batches the update's behaviour weight (training.update.offpolicy) reads them: what derives from them is
    compared to 1e-6."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if k.startswith(("rollout/logprob_gap", "losses/", "rollout/is_")) and isinstance(a, float):
        return bool(a == pytest.approx(b, rel=1e-5, abs=1e-6))
    return bool(a == b)


def _equal_rows(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b)
    for ra, rb in zip(a, b, strict=True):
        ra, rb = _timeless(ra), _timeless(rb)
        assert ra.keys() == rb.keys()
        for k in ra:
            assert _same(k, ra[k], rb[k]), (ra["step"], k, ra[k], rb[k])


@pytest.fixture(scope="module")
def runs(root: Path) -> dict[int, Any]:
    """Uninterrupted runs at max_staleness 0, 1 and 2: their metrics rows and final weights."""
    from training.rundir import read_metrics

    out: dict[int, Any] = {}
    for s in (0, 1, 2):
        t = _trainer(root, f"s{s}", f"training.rollout.max_staleness={s}")
        try:
            assert t.train()["steps"] == STEPS
            out[s] = (read_metrics(t.run_dir), _weights(t), t.run_dir)
        finally:
            t.close()
    return out


def test_staleness_0_is_the_synchronous_loop_bit_for_bit(root: Path, runs: dict[int, Any]) -> None:
    from training.run.step import update_rows
    from training.rundir import latest_checkpoint

    rows, weights, run_dir = runs[0]
    ref = _trainer(root, "reference")
    try:
        start = _weights(ref)
        for step in range(STEPS):  # the synchronous loop, written out
            idx = ref.order.batch_indices(step)
            examples = [ref.examples[i] for i in idx for _ in range(ref.tc.rollout.group_size)]
            results = ref.executor.rollout(examples, step)
            scored = ref.executor.score(results, examples)
            update, _ = update_rows(ref.tc, results, scored.rewards, ref._pad)
            assert update is not None
            report = ref.learner.update(update)
            ref.learner.step_scheduler()
            ref.executor.sync()
            row = rows[step]
            assert row["data/question_ids"] == [ref.examples[i].id for i in idx]
            assert row["rollout/staleness"] == 0.0 and row["rollout/staleness_max"] == 0.0
            scored_r = [r for r in scored.rewards if r is not None]
            assert row["reward/mean"] == sum(scored_r) / len(scored_r)
            for k, v in report.stats.items():  # the same update, bit for bit (but the engine's log-prob noise: _same)
                assert _same(k if k.startswith("rollout/logprob_gap") else "exact", row[k], v), (step, k, row[k], v)
        assert not _same_weights(start, weights)  # the updates moved the policy
        assert _same_weights(_weights(ref), weights)
    finally:
        ref.close()
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and not (ckpt / "inflight.pt").exists()  # nothing in flight in a synchronous run


@pytest.mark.parametrize("s", [1, 2])
def test_staleness_s_updates_every_batch_once_in_order_within_the_bound(runs: dict[int, Any], s: int) -> None:
    from training.report.plots import plot_timeline
    from training.rundir import read_timeline

    rows, _, run_dir = runs[s]
    sync_rows = runs[0][0]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["data/question_ids"] for r in rows] == [r["data/question_ids"] for r in sync_rows]  # same data order
    assert [r["rollout/staleness"] for r in rows] == [float(min(k, s)) for k in range(STEPS)]
    assert all(r["reward/samples_in_update"] > 0 and math.isfinite(r["losses/total"]) for r in rows)
    tl = read_timeline(run_dir)
    assert [(r["step"], r["batch"], r["version"]) for r in tl] == [(k + 1, k, max(0, k - s)) for k in range(STEPS)]
    for r in tl:  # each batch is rolled out, then scored, before its update starts
        assert r["rollout"][0] <= r["rollout"][1] <= r["reward"][0] <= r["reward"][1] <= r["update"][0] <= r["update"][1]
    # the learner samples itself: batch k+s is rolled out before update k starts (with the weights of k updates)
    for k in range(STEPS - s):
        assert tl[k + s]["rollout"][1] <= tl[k]["update"][0]
    png = plot_timeline(run_dir)
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"


def test_a_resumed_staleness_1_run_is_the_uninterrupted_one(root: Path, runs: dict[int, Any]) -> None:
    from training.rundir import latest_checkpoint, read_inflight, read_metrics

    t = _trainer(root, "resumed", "training.rollout.max_staleness=1")
    try:
        assert t.train(max_steps=2)["steps"] == 2
    finally:
        t.close()
    ckpt = latest_checkpoint(root / "resumed")
    assert ckpt is not None and ckpt.name == "step_000002"
    (saved,) = read_inflight(ckpt)  # batch 2, rolled out with the weights of 1 update and scored
    assert saved["step"] == 2 and saved["version"] == 1 and saved["scored"] is not None
    t = _trainer(root, "resumed", "training.rollout.max_staleness=1")
    try:
        assert t.step == 2
        assert t.train()["steps"] == STEPS
        weights = _weights(t)
    finally:
        t.close()
    rows, uninterrupted, _ = runs[1]
    _equal_rows(read_metrics(root / "resumed"), rows)
    assert all(torch.allclose(weights[k], uninterrupted[k], rtol=0, atol=1e-6) for k in weights)


@pytest.mark.slow
def test_ray_rollouts_and_rewards_run_while_the_learner_updates(ray_cluster, root: Path) -> None:  # type: ignore[no-untyped-def]
    from training.rollouts.ray_backend import weights_checksum
    from training.rundir import read_metrics, read_timeline

    t = _trainer(root, "ray", "training.rollout.max_staleness=1", "training.backend=ray", "ray.rollout_workers=1",
                 "ray.reward_workers=1")
    try:
        assert t.pipeline is None
        assert t.train()["steps"] == 3
        assert t.pipeline is not None and t.pipeline.background_rollouts
        (worker,) = t.executor.rollouts.actors
        assert ray_cluster.get(worker.weights_checksum.remote()) == pytest.approx(weights_checksum(t.learner.model))
        rows, tl = read_metrics(t.run_dir), read_timeline(t.run_dir)
    finally:
        t.close()
    assert [r["rollout/staleness"] for r in rows] == [0.0, 1.0, 1.0]
    assert all(r["ray/rollout_workers"] == 1.0 and r["ray/lost_rollout_workers"] == 0.0 for r in rows)
    for k in range(2):  # batch k+1 is rolled out with the weights of k updates: after sync k-1, before sync k ends
        assert tl[k + 1]["version"] == k
        assert tl[k + 1]["rollout"][1] <= tl[k]["sync"][1]


def test_the_budget_stops_an_overlapped_run_before_the_step_that_could_pass_it_and_it_resumes(root: Path) -> None:
    from generator_adapters.testing import FakeLLMServer
    from training.rundir import latest_checkpoint, read_inflight, read_metrics

    in_price, out_price = 2.5, 10.0

    def priced(srv: FakeLLMServer, name: str, budget: float) -> Any:
        return _trainer(root, name, "training.rollout.max_staleness=1", "training.reward=acc_plus_gbr",
                        f"training.data.dir={root / 'data_priced'}", "generator.model=openai/fake",
                        f"generator.api_base={srv.api_base}", "generator.cache_path=none", "generator.max_tokens=12",
                        f"generator.input_cost_per_mtok={in_price}", f"generator.output_cost_per_mtok={out_price}",
                        f"training.budget_usd={budget}", reward=True)

    with FakeLLMServer(reply="varied", usage="tiktoken") as srv:
        t = priced(srv, "budget", 10.0)  # its preparation paid for the naive-RAG baseline
        tokens0 = dict(srv.usage_totals)
        try:
            assert t.train(max_steps=1)["stopped"] is None
            ex = t.executor
            spent = ex.budget.spent_usd  # step 1, and batch 2 scored ahead of its step
            (row1,) = read_metrics(t.run_dir)
            assert 0 < row1["cost/usd_step"] < spent and row1["rollout/staleness"] == 0.0
            calls = srv.stats()["answered"]
            ex.budget.limit_usd = cap = spent + 0.5 * row1["cost/usd_step"]  # batch 3's bound cannot fit
            out = t.train()
        finally:
            t.close()
        assert out["stopped"] is not None and "budget reached: step 3" in out["stopped"] and out["steps"] == 2
        assert srv.stats()["answered"] == calls, "the refused batch made a call"
        rows = read_metrics(root / "budget")
        assert [r["step"] for r in rows] == [1, 2] and rows[-1]["cost/usd_total"] == pytest.approx(spent)
        assert spent <= cap
        ckpt = latest_checkpoint(root / "budget")
        assert ckpt is not None and ckpt.name == "step_000002"
        (kept,) = read_inflight(ckpt)
        assert kept["step"] == 2 and kept["scored"] is None  # rolled out, never scored: kept for the resume

        t = priced(srv, "budget", 10.0)
        try:
            assert t.step == 2
            assert t.train()["steps"] == STEPS
        finally:
            t.close()
        rows = read_metrics(root / "budget")
        assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
        assert [r["rollout/staleness"] for r in rows] == [0.0] + [1.0] * (STEPS - 1)
        total = sum(r["cost/usd_step"] for r in rows)
        assert rows[-1]["cost/usd_total"] == pytest.approx(total, rel=1e-9)
        pt = srv.usage_totals["prompt_tokens"] - tokens0.get("prompt_tokens", 0)
        ct = srv.usage_totals["completion_tokens"] - tokens0.get("completion_tokens", 0)
        assert total == pytest.approx((pt * in_price + ct * out_price) / 1e6, rel=1e-9)  # every call counted once
