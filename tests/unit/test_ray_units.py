"""The Ray backends' own logic, without a cluster: sharding, seeds, merging, usage sums, and the error a missing Ray
install gives (the real cluster: tests/integration/test_ray_backend.py, test_ray_eval.py)."""

from __future__ import annotations

import doctest
import sys

import pytest

from s3core.errors import ConfigError


def test_doctests() -> None:
    from s3runtime import raycluster
    from training.rollouts import executors, ray_backend

    for mod in (raycluster, executors, ray_backend):
        assert doctest.testmod(mod).failed == 0, mod.__name__


def test_shards_cover_every_sample_once_in_order() -> None:
    from training.rollouts.ray_backend import shard_bounds

    for n in range(1, 12):
        for parts in range(1, 5):
            b = shard_bounds(n, parts)
            assert [i for lo, hi in b for i in range(lo, hi)] == list(range(n))
            sizes = [hi - lo for lo, hi in b]
            assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1 and len(b) == min(n, parts)


def test_shard_seeds_differ_by_step_and_shard_and_repeat() -> None:
    from training.rollouts.ray_backend import shard_seed

    seeds = {shard_seed(0, s, j) for s in range(50) for j in range(8)}
    assert len(seeds) == 400 and shard_seed(3, 7, 1) == shard_seed(3, 7, 1)


def test_merged_reward_batches_keep_order_and_missing() -> None:
    from training.rewards import RewardBatch
    from training.rollouts.ray_backend import _merge

    m = _merge([RewardBatch([1.0, None], acc_s3=[1.0, None], acc_rag=[0.0, 0.0], generator_failures=1),
                RewardBatch([0.0], acc_s3=[0.0], acc_rag=[0.0])])
    assert m.rewards == [1.0, None, 0.0] and m.acc_s3 == [1.0, None, 0.0] and m.generator_failures == 1
    assert _merge([RewardBatch([0.5]), RewardBatch([1.0])]).acc_s3 is None


def test_backend_ray_without_ray_is_a_config_error_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from s3runtime.config import RayConfig
    from s3runtime.raycluster import connect

    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # connect sets these two; restored afterwards
    monkeypatch.setenv("VLLM_HOST_IP", "127.0.0.1")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if it were not installed
    with pytest.raises(ConfigError, match=r"s3-search-agents\[ray\]"):
        connect(RayConfig())


def test_ray_config_is_strict_and_backends_are_named() -> None:
    from s3.config import load_config

    cfg = load_config(None, ["training.backend=ray", "eval.backend=ray", "ray.rollout_worker_cpus=0.25"])
    assert cfg.training.backend == "ray" and cfg.ray.rollout_worker_cpus == 0.25 and cfg.ray.address is None
    with pytest.raises(ConfigError):
        load_config(None, ["ray.rollout_workers=0"])
    with pytest.raises(ConfigError):
        load_config(None, ["ray.no_such_key=1"])
    with pytest.raises(ConfigError):
        load_config(None, ["training.backend=spark"])


def test_importing_the_project_does_not_import_ray() -> None:
    import subprocess

    code = ("import sys, s3.cli, training.run.trainer, training.rollouts.executors, training.rollouts.ray_backend, eval.ray_eval; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
