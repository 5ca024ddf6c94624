"""ray.learners = 2 through the real trainer (issue 21) on the session's Ray cluster (2 CPUs, every node on 127.0.0.1):
two Learner actors in one gloo group, a rollout worker and a reward worker, over the real bm25 index of
../shared/data/train_hotpotqa_musique100. The policy is a tiny random Llama (1 layer, hidden 16) with SmolLM2's
tokenizer, saved as a plain HF dir: the trainer's real code paths (padding, shared-prefix forward, the KL reference,
masked GRPO, AdamW, checkpoints) at seconds a step. The reward is R1-Searcher's stage-1 format reward (no generator).

- one update with 2 learners equals the single learner's update on the same rollouts and rewards within 1e-5 (every
  parameter), the two ranks hold identical parameters and optimizer state;
- a full step: rollouts on the worker, weight sync from rank 0 (timed), the worker holds rank 0's weights;
- `s3 train` with 2 learners SIGKILLed (with its Ray cluster) after a checkpoint and the run resumed: every rank holds
  the checkpoint's weights and optimizer state, the run continues at the same step with the same data order, and the
  checkpoint is the single learner's format;
- LoRA: the ranks start from rank 0's adapter and stay identical; rank 0 checkpoints adapter/ and the merged policy/.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, tiny_policy_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("learners")
    (root / "tiny").symlink_to(tiny_policy_dir, target_is_directory=True)
    return root


_SETS = [
    "training.data.max_questions=8", "training.rollout.batch_size=2", "training.rollout.group_size=2", "training.algorithm=grpo",
    "training.reward=r1_searcher_stage1", "training.data.keep_baseline_zero=false", "training.update.kl_coef=0.05",
    "training.rollout.temperature=1.0", "training.update.learning_rate=0.001", "training.learner.micro_batch_size=1",
    "training.checkpoint.every=1", "training.total_steps=4", "searcher.max_new_tokens=16", "searcher.doc_token_budget=24",
]


def _trainer(root: Path, name: str, *extra: str) -> Any:
    from s3.config import load_config
    from training.run.trainer import make_trainer

    cfg = load_config(SMOKE, [*_SETS, f"training.base_model={root / 'tiny'}", f"training.data.dir={root / 'data'}",
                              f"training.output_dir={root / name}", *extra])
    return make_trainer(cfg, log=lambda s: None)


TWO = ("training.backend=ray", "ray.learners=2", "ray.rollout_workers=1", "ray.reward_workers=1")


def _max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def _adam_moments(state: dict[str, Any]) -> list[Any]:
    return [s[k] for _, s in sorted(state["optimizer"]["state"].items()) for k in ("exp_avg", "exp_avg_sq")]


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_two_learners_update_equals_the_single_learners_and_a_full_step_syncs_rank0(ray_cluster, root: Path,  # type: ignore[no-untyped-def]
                                                                                     algorithm: str) -> None:
    """GRPO, and PPO (its critic's value head is all-reduced and stepped with the policy); then (GRPO) a full step."""
    from s3runtime.raycluster import node_addresses
    from training.rollouts.ray_backend import weights_checksum

    assert node_addresses() == ["127.0.0.1"]
    one = _trainer(root, f"one_{algorithm}", f"training.algorithm={algorithm}")
    two = _trainer(root, f"two_{algorithm}", f"training.algorithm={algorithm}", *TWO)
    try:
        from training.learn.learner import Learner
        from training.learn.learner_group import LearnerGroup

        assert isinstance(one.learner, Learner) and isinstance(two.learner, LearnerGroup)  # the ranks hold the model
        assert two.learner.nodes() == ["127.0.0.1", "127.0.0.1"]
        start = one.learner.state_dict()  # the policy's parameters, and PPO's value head (value_head.*)
        rank0, rank1 = two.learner.state_dicts()
        assert _max_diff(rank0, start) == 0 and _max_diff(rank1, start) == 0  # the same starting point

        idx = one.order.batch_indices(0)
        examples = [one.examples[i] for i in idx for _ in range(one.tc.rollout.group_size)]
        results = one.rollout(examples)
        rewards = [1.0, 0.0, 0.25, 0.75]  # both groups have an advantage; 4 rows, micro-batches of 1: 2 per rank
        s1, rows1, tok1 = one.update(results, rewards)
        s2, rows2, tok2 = two.update(results, rewards)
        assert rows1 == rows2 == [0, 1, 2, 3] and tok1 == tok2 > 0
        rank0, rank1 = two.learner.state_dicts()
        single = one.learner.state_dict()
        assert _max_diff(single, start) > 1e-4  # the update moved the parameters (AdamW, lr 1e-3)
        diff = _max_diff(rank0, single)
        print(f"max |2 learners - 1 learner| over every parameter after one update: {diff:.3g}")
        assert diff < 1e-5
        assert _max_diff(rank1, rank0) == 0  # the same averaged gradient, the same step on every rank
        keys = ["losses/total", "losses/policy", "losses/kl", "losses/grad_norm", "rollout/logprob_gap_mean_abs"]
        for k in keys + (["losses/value"] if algorithm == "ppo" else []):
            assert s2[k] == pytest.approx(s1[k], rel=1e-4, abs=1e-6), k
        if algorithm == "ppo":  # the critic moved, and moved alike
            assert float((rank0["value_head.weight"] - start["value_head.weight"]).abs().max()) > 5e-6  # critic lr 1e-5
        st0, st1 = two.learner.call_all("state")
        assert all(torch.equal(a, b) for a, b in zip(_adam_moments(st0), _adam_moments(st1), strict=True))
        assert _max_diff({str(i): t for i, t in enumerate(_adam_moments(st0))},
                         {str(i): t for i, t in enumerate(_adam_moments(one.learner.state()))}) < 1e-5

        if algorithm == "ppo":
            return
        # a full step of the 2-learner run: rollouts on the worker, the update on the ranks, rank 0's weights synced
        row = two.train_step()
        assert row["charts/weight_sync_s"] > 0 and row["charts/learning_rate"] == pytest.approx(1e-3)
        assert row["reward/samples_in_update"] == 4 and row["losses/grad_norm"] > 0
        [held] = two.executor.rollouts.call_all("weights_checksum")
        rank0_sum = sum(float(v.double().sum()) for k, v in two.learner.state_dicts()[0].items()
                        if k != "lm_head.weight")  # tied to the embeddings: one tensor, counted once by parameters()
        assert held == pytest.approx(rank0_sum, rel=0, abs=1e-6)
        assert abs(held - weights_checksum(one.learner.model)) > 1e-6  # not the single learner's: the group moved on
    finally:
        two.close()
        one.close()


def _train_cmd(root: Path, name: str, *extra: str) -> list[str]:
    """`s3 train` as _trainer configures it."""
    cmd = [sys.executable, "-m", "s3.cli", "train", "--config", str(SMOKE)]
    for o in [*_SETS, f"training.base_model={root / 'tiny'}", f"training.data.dir={root / 'data'}",
              f"training.output_dir={root / name}", *extra]:
        cmd += ["--set", o]
    return cmd


def test_two_learner_run_killed_after_a_checkpoint_resumes_every_rank_with_the_same_data_order(ray_cluster, root: Path) -> None:  # type: ignore[no-untyped-def]
    """First life: `s3 train` with 2 learners (PPO: its advantages r - V move the weights and the AdamW moments from the
    first step) in a subprocess with its own Ray cluster, SIGKILLed with its whole process group (driver, Ray,
    learners) once a checkpoint is complete. Second life: a trainer on the same run directory."""
    from searcher.policy.transformers_policy import TransformersPolicy
    from training.rundir import STATE_FILE, read_metrics

    extra = (*TWO, "training.algorithm=ppo", "training.total_steps=3")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own local cluster, not the session's
    p = subprocess.Popen(_train_cmd(root, "resume", *extra), cwd=ROOT, env={**env, "PYTHONUNBUFFERED": "1"},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    latest = root / "resume" / "checkpoints" / "latest"
    deadline = time.time() + 600
    try:
        while time.time() < deadline and p.poll() is None and not latest.is_file():
            time.sleep(0.2)
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the run and everything it started (its Ray cluster, the learner actors)
        p.wait()
    name = latest.read_text().strip()
    done = int(name.split("_")[1])
    assert 1 <= done < 3, name
    ckpt = root / "resume" / "checkpoints" / name
    # the single learner's checkpoint format: a plain HF policy/ (what `s3 serve --policy` loads) + trainer_state.pt
    saved = TransformersPolicy.load(str(ckpt / "policy")).model.state_dict()
    state = torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=False)
    assert state["step"] == done and state["value_head"] is not None
    assert any(float(m.abs().max()) > 0 for m in _adam_moments(state))  # the first step moved the optimizer

    resumed = _trainer(root, "resume", *extra)
    try:
        assert resumed.resumed_from == str(ckpt) and resumed.step == done
        for rank in resumed.learner.state_dicts():  # every rank: the checkpoint's weights (and critic)
            assert _max_diff({k: v for k, v in rank.items() if not k.startswith("value_head.")}, saved) == 0
            assert torch.equal(rank["value_head.weight"], state["value_head"]["weight"])
        for st in resumed.learner.call_all("state"):  # and its optimizer / scheduler state
            assert all(torch.equal(a, b) for a, b in zip(_adam_moments(st), _adam_moments(state), strict=True))
            assert st["scheduler"] == state["scheduler"]
        resumed.train()
        order = [resumed.order.batch_indices(s) for s in range(3)]
    finally:
        resumed.close()
    rows = read_metrics(root / "resume")
    assert [r["step"] for r in rows] == [1, 2, 3]
    ids = [e.id for e in resumed.examples]
    # the same data order as an uninterrupted run: each step's batch is the seeded permutation's
    assert [r["data/question_ids"] for r in rows] == [[ids[i] for i in b] for b in order]
    fresh = _trainer(root, "order_check")  # a new run's order: a pure function of (seed, step)
    try:
        assert [fresh.order.batch_indices(s) for s in range(3)] == order
    finally:
        fresh.close()


def test_two_lora_learners_start_from_rank0s_adapter_stay_identical_and_checkpoint_it(ray_cluster, root: Path) -> None:  # type: ignore[no-untyped-def]
    """LoRA (what configs/gpu_cluster.toml selects): each rank draws its own random adapter, the group takes rank 0's
    when it forms; after an update the ranks are still bit-equal (the reference = the adapters disabled), rank 0's
    checkpoint holds adapter/ and a merged plain policy/, and rank 0's merged weights reached the rollout worker."""
    from searcher.policy.transformers_policy import TransformersPolicy
    from training.learn.weight_sync import learner_weights

    t = _trainer(root, "lora", *TWO, "training.learner.lora=true", "training.learner.lora_r=2", "training.learner.lora_alpha=4")
    try:
        rank0, rank1 = t.learner.state_dicts()
        assert any("lora_A" in k for k in rank0) and _max_diff(rank0, rank1) == 0  # rank 0's adapter everywhere
        examples = [t.examples[i] for i in t.order.batch_indices(0) for _ in range(t.tc.rollout.group_size)]
        results = t.rollout(examples)  # on the rollout worker
        t.update(results, [1.0, 0.0, 0.25, 0.75])  # rewards with an advantage (the format reward is flat here)
        assert t.executor.sync() > 0  # rank 0's merged weights -> the object store -> the worker
        t.step = 1
        t.save_checkpoint()
        rank0, rank1 = t.learner.state_dicts()
        assert _max_diff(rank0, rank1) == 0
        assert any(float(v.abs().max()) > 0 for k, v in rank0.items() if "lora_B" in k)  # the adapter trained
        [held] = t.executor.rollouts.call_all("weights_checksum")
    finally:
        t.close()
    ckpt = root / "lora" / "checkpoints" / "step_000001"
    assert (ckpt / "adapter" / "adapter_config.json").is_file() and (ckpt / "policy" / "config.json").is_file()
    merged = TransformersPolicy.load(str(ckpt / "policy")).model
    from training.rollouts.ray_backend import weights_checksum

    assert weights_checksum(merged) == pytest.approx(held, rel=0, abs=1e-6)  # the engine got the merged weights
    adapter = TransformersPolicy.load(str(ckpt / "adapter")).model
    plain = dict(learner_weights(adapter))  # the adapter on its base, merged out of place: the same policy
    assert _max_diff({k: plain[k] for k in merged.state_dict()}, merged.state_dict()) < 1e-6
