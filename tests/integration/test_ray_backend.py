"""training.backend = "ray" and eval.backend = "ray" on a real Ray cluster (the session's `ray_cluster`, 2 CPUs,
every node on 127.0.0.1), with the real SmolLM2-135M transformers policy, a real bm25 index over
../shared/data/train_hotpotqa_musique100 and the real offline generators (SmolLM2 for training, Qwen 0.5B for eval).

- one rollout worker + one reward worker: a Ray step equals a local step (greedy rollouts token for token, rewards,
  losses, updated parameters);
- two workers: the same rollouts (order aside); then a rollout worker and a reward worker SIGKILLed mid-step: the step
  completes, every expected sample enters the update exactly once, the metrics count the lost workers;
- a Ray-backend run resumed from its checkpoint continues at the same step and data order, its workers holding the
  checkpoint's weights;
- `s3 eval` on Ray workers writes the same rows as a local run (each with its own empty generator cache).
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.usefixtures("training_data")]

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "smoke.toml"
DATA = ROOT.parent / "shared" / "data" / "train_hotpotqa_musique100"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("ray")


def _fast(root: Path) -> list[str]:
    """Greedy, short rollouts; PPO with one rollout per question and R1-Searcher's stage-2 reward (the generator's
    answer F1 + a format penalty) so that the loss is not zero at step 0 (greedy GRPO groups are flat, and SmolLM2's
    GBR on these questions is 0); no KL term, so no reference model (a third of the update's forward passes)."""
    return [
        "training.data.max_questions=8", "training.rollout.batch_size=2", "training.rollout.group_size=1", "training.algorithm=ppo",
        "training.reward=r1_searcher_stage2", "training.rollout.temperature=0", "training.update.kl_coef=0", "searcher.max_new_tokens=24",
        "searcher.doc_token_budget=24", f"training.data.dir={root / 'data'}",
        f"generator.cache_path={root / 'cache.sqlite'}",
    ]


def _trainer(root: Path, name: str, *extra: str) -> Any:
    from s3.config import load_config
    from training.run.trainer import make_trainer

    cfg = load_config(SMOKE, [*_fast(root), f"training.output_dir={root / name}", *extra])
    return make_trainer(cfg, log=lambda s: None)


@pytest.fixture(scope="module")
def trainers(ray_cluster, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("raytrain")
    local = _trainer(root, "local")
    # a cache of its own: usage counts the answers paid for (cache hits apart), so both runs must pay for theirs
    on_ray = _trainer(root, "ray", "training.backend=ray", "ray.rollout_workers=1", "ray.reward_workers=1",
                      f"generator.cache_path={root / 'cache_ray.sqlite'}")
    yield local, on_ray, root
    on_ray.close()
    local.close()


def _capture(trainer: Any) -> dict[str, Any]:
    """What the trainer's next update receives (results, rewards, each reply's credits) and returns (stats)."""
    seen: dict[str, Any] = {}
    update = trainer.update

    def spy(results, rewards, credits=None):  # type: ignore[no-untyped-def]
        seen["results"], seen["rewards"], seen["credits"] = list(results), list(rewards), credits
        out = update(results, rewards, credits)
        seen["stats"] = out[0]
        return out

    trainer.update = spy
    return seen


def test_cluster_nodes_are_on_loopback(ray_cluster) -> None:  # type: ignore[no-untyped-def]
    from s3runtime.raycluster import node_addresses

    assert node_addresses() == ["127.0.0.1"]


def test_one_worker_ray_step_equals_local_step(trainers) -> None:  # type: ignore[no-untyped-def]
    local, on_ray, _ = trainers
    assert local.step == on_ray.step == 0
    a, b = _capture(local), _capture(on_ray)
    row_l, row_r = local.train_step(), on_ray.train_step()
    res_l, res_r = a["results"], b["results"]
    assert [r.question_id for r in res_l] == [r.question_id for r in res_r] and len(res_l) == 2
    for x, y in zip(res_l, res_r, strict=True):
        assert x.trajectory.prompt_ids == y.trajectory.prompt_ids
        assert x.trajectory.response_ids == y.trajectory.response_ids  # greedy: token for token
        assert x.trajectory.mask == y.trajectory.mask
        assert x.trajectory.logprobs == pytest.approx(y.trajectory.logprobs, abs=1e-4)
        assert [d.id for d in x.documents] == [d.id for d in y.documents]
    assert a["rewards"] == b["rewards"]
    assert any(r not in (None, 0.0) for r in a["rewards"]), "a zero reward everywhere would make the loss check empty"
    for key, value in a["stats"].items():
        assert b["stats"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    assert a["stats"]["losses/total"] != 0.0
    diff = max(float((p - q).detach().abs().max()) for p, q in zip(local.learner.model.parameters(), on_ray.learner.model.parameters(), strict=True))
    assert diff < 1e-6
    # generator usage summed over the reward workers = the local scorer's; the sync to the worker was timed
    for key in ("reward/generator_calls", "reward/prompt_tokens", "reward/completion_tokens"):
        assert row_r[key] == row_l[key] > 0, key
    assert row_r["charts/weight_sync_s"] > 0 and "charts/weight_sync_s" not in row_l
    assert row_r["ray/rollout_workers"] == 1 and row_r["ray/lost_rollout_workers"] == 0

    # the held-out evaluation (training.heldout.every) on the Ray workers' greedy agent = the local one's: same rows,
    # each in its run's heldout.jsonl (weights made bit-equal first so greedy decoding cannot part on a near-tie)
    with torch.no_grad():
        for p, q in zip(local.learner.model.parameters(), on_ray.learner.model.parameters(), strict=True):
            p.copy_(q)
    local.executor.sync(), on_ray.executor.sync()
    local.heldout = on_ray.heldout = local.examples[-2:]
    h_l, h_r = local.heldout_eval(), on_ray.heldout_eval()
    assert h_l.pop("charts/heldout_seconds") > 0 and h_r.pop("charts/heldout_seconds") > 0
    # as JSON: this reward has no naive-RAG term, so heldout/acc_rag is NaN on both sides (and NaN != NaN)
    assert json.dumps(h_r, sort_keys=True) == json.dumps(h_l, sort_keys=True)
    assert h_l["heldout/scored"] == 2.0 and h_l["heldout/generator_calls"] > 0
    per_question = []
    for t in (local, on_ray):
        assert [json.loads(x)["step"] for x in (t.run_dir / "heldout.jsonl").read_text().splitlines()] == [1]
        per_question.append([json.loads(x) for x in (t.run_dir / "heldout_questions.jsonl").read_text().splitlines()])
    # one row per question, the same on both sides, whose mean is the summary row's
    assert per_question[0] == per_question[1] and [r["id"] for r in per_question[0]] == [e.id for e in local.heldout]
    assert sum(r["reward"] for r in per_question[0]) / 2 == pytest.approx(h_l["heldout/reward"])
    assert all(r["step"] == 1 and r["doc_ids"] for r in per_question[0])


def test_two_workers_same_rollouts_and_lost_workers_redo_only_their_shards(trainers) -> None:  # type: ignore[no-untyped-def]
    from s3.config import load_config
    from training.rollouts.ray_backend import RayExecutor

    local, on_ray, root = trainers
    on_ray.executor.close()  # its CPUs go to the two-worker executor (2 CPUs in the test cluster)
    cfg2 = load_config(SMOKE, [*_fast(root), f"training.output_dir={root / 'ray'}", "training.backend=ray",
                               "ray.rollout_workers=2", "ray.reward_workers=2"])
    ex = RayExecutor(cfg2, loop_cfg=on_ray.loop_cfg, index_dir=on_ray.data.index_dir, agent_kind=on_ray.parts.agent_kind,
                     baseline=on_ray.data.baseline, end_to_end=False, learner=lambda: on_ray.learner.model, log=lambda s: None)
    on_ray.executor = ex
    assert ex.sync() is not None
    # both learners hold the same weights (after the previous test's step, or both untouched when run alone): equal
    # within float noise, then made bit-equal so greedy rollouts cannot part on a near-tie
    with torch.no_grad():
        for p, q in zip(local.learner.model.parameters(), on_ray.learner.model.parameters(), strict=True):
            assert torch.allclose(p, q, atol=1e-5)
            p.copy_(q)
    assert ex.sync() is not None
    idx = on_ray.order.batch_indices(on_ray.step)
    examples = [on_ray.examples[i] for i in idx for _ in range(on_ray.tc.rollout.group_size)]
    mine = local.rollout(examples)
    theirs = on_ray.rollout(examples)
    key = lambda r: (r.question_id, tuple(r.trajectory.response_ids))  # noqa: E731
    assert Counter(map(key, mine)) == Counter(map(key, theirs))

    # SIGKILL one rollout worker and one reward worker right after each got its shard of the step
    pids = {"rollout": ex.rollouts.pids(), "reward": ex.rewards.pids()}
    killed: list[str] = []

    def kill_first_worker(pool, w):  # type: ignore[no-untyped-def]
        if w == 0 and pool.kind not in killed:
            os.kill(pids[pool.kind][0], signal.SIGKILL)
            killed.append(pool.kind)

    ex.rollouts.on_submit = ex.rewards.on_submit = kill_first_worker
    seen = _capture(on_ray)
    row = on_ray.train_step()
    assert killed == ["rollout", "reward"]
    expected = [on_ray.examples[i].id for i in idx for _ in range(on_ray.tc.rollout.group_size)]
    used = [r.question_id for r in seen["results"]]
    assert Counter(used) == Counter(expected) and len(used) == len(expected)  # each sample exactly once
    assert [r is not None for r in seen["rewards"]] == [True] * len(expected)
    assert row["reward/samples_in_update"] == len(expected)
    assert row["ray/lost_rollout_workers"] == 1 and row["ray/lost_reward_workers"] == 1
    assert row["ray/redone_rollouts"] == 1 and row["ray/redone_rewards"] == 1  # only the lost shard (1 of 2 samples)
    assert ex.rollouts.pids()[0] != pids["rollout"][0] and ex.rewards.pids()[0] != pids["reward"][0]  # restarted
    from training.rundir import read_metrics

    assert read_metrics(on_ray.run_dir)[-1]["ray/lost_rollout_workers"] == 1
    # the restarted rollout worker got the learner's current weights back: greedy rollouts still equal local ones
    on_ray.executor.rollouts.on_submit = None
    with torch.no_grad():
        for p, q in zip(local.learner.model.parameters(), on_ray.learner.model.parameters(), strict=True):
            p.copy_(q)
    again = on_ray.rollout(examples)
    assert Counter(map(key, again)) == Counter(map(key, local.rollout(examples)))


def test_ray_run_resumes_from_its_checkpoint(trainers) -> None:  # type: ignore[no-untyped-def]
    from searcher.policy.transformers_policy import TransformersPolicy
    from training.rollouts.ray_backend import weights_checksum

    _local, on_ray, root = trainers
    if on_ray.step == 0:
        on_ray.train_step()
    base_checksum = weights_checksum(TransformersPolicy.load(on_ray.tc.base_model).model)
    on_ray.save_checkpoint()
    step, order = on_ray.step, on_ray.order.batch_indices(on_ray.step)
    on_ray.executor.close()  # the driver is gone; a new one starts on the same run directory
    resumed = _trainer(root, "ray", "training.backend=ray", "ray.rollout_workers=1", "ray.reward_workers=1")
    try:
        assert resumed.resumed_from and resumed.step == step and resumed.order.batch_indices(resumed.step) == order
        assert all(torch.equal(p, q) for p, q in zip(resumed.learner.model.parameters(), on_ray.learner.model.parameters(), strict=True))
        # its worker holds the checkpoint's weights, not base_model's (the updates moved them)

        [held] = resumed.executor.rollouts.call_all("weights_checksum")
        mine = weights_checksum(resumed.learner.model)
        # float64 sums of the same tensors (thread counts differ: the last digits may), far from base_model's
        assert held == pytest.approx(mine, rel=0, abs=1e-7) and abs(mine - base_checksum) > 1e-5
    finally:
        resumed.close()
