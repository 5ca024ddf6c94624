"""scripts/ray_cluster.py at tiny size (issue 21): a two-node ray.cluster_utils.Cluster on 127.0.0.1 (each node its own
CPUs, custom resource, temp and working folder), a 2-step training run with 2 gloo learners on node 1 and the rollout
worker on node 2, then `s3 eval --method searcher` of the trained policy on an evaluation worker on node 2; the
placement table says which actor ran where, and the evaluation's rows equal the same evaluation run on one node (in
the test's own process, no Ray). The script runs as a subprocess: its cluster is its own, not the session's.

The policy is the tiny random Llama of tests/conftest.py (SmolLM2's tokenizer), the reward R1-Searcher's stage-1
format reward (no generator in training); the evaluation's generator is the offline SmolLM2 (llama.cpp)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.usefixtures("training_data")]

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "train_hotpotqa_musique100"

pytest.importorskip("ray")
pytest.importorskip("transformers")


def test_two_node_cluster_pins_rollouts_and_eval_to_node2_and_eval_rows_equal_one_node(tmp_path: Path,
                                                                                        tiny_policy_dir: Path) -> None:
    out = tmp_path / "two_nodes"
    sets = ["training.data.max_questions=8", "training.rollout.batch_size=2", "training.rollout.group_size=2",
            "training.reward=r1_searcher_stage1", "training.data.keep_baseline_zero=false", "training.learner.micro_batch_size=1",
            f"training.base_model={tiny_policy_dir}", f"training.data.dir={tmp_path / 'data'}",
            "searcher.max_new_tokens=16", "searcher.doc_token_budget=24"]
    cmd = [sys.executable, str(ROOT / "scripts" / "ray_cluster.py"), "--out", str(out), "--steps", "2",
           "--learners", "2", "--eval-questions", "3", "--compare-local"]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    print(r.stdout[-2500:])

    placement = json.loads((out / "placement.json").read_text())
    kinds = {(p["kind"], p["node"]) for p in placement}
    assert kinds == {("rollout", "node2"), ("eval", "node2"), ("reward", "node1"), ("learner", "node1")}, kinds
    assert len([p for p in placement if p["kind"] == "learner"]) == 2
    assert all(p["address"] == "127.0.0.1" for p in placement)
    node_ids = {p["node"]: p["node_id"] for p in placement}
    assert node_ids["node1"] != node_ids["node2"]  # two Ray nodes, not one with two labels
    for p in placement:  # each node's workers start in that node's own working folder
        assert Path(p["cwd"]).resolve() == (out / p["node"]).resolve(), p
    assert (out / "placement.md").read_text().startswith("| kind | index | node |")

    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollout_and_eval_actors_on_node2"] is True
    last = summary["train"]["last_metrics"]
    assert last["step"] == 2 and last["reward/samples_in_update"] == 4 and last["charts/weight_sync_s"] > 0
    assert (out / "train" / "checkpoints" / "latest").read_text().strip() == "step_000002"

    # the evaluation's rows on two nodes equal the one-node run's (each with its own empty generator cache)
    from eval.rundir import RESULTS_FILE, read_results

    keep = ("id", "context_ids", "answer", "metrics", "error", "prompt_tokens", "completion_tokens")
    two = {i: {k: row.get(k) for k in keep} for i, row in read_results(out / "eval_ray" / RESULTS_FILE).items()}
    one = {i: {k: row.get(k) for k in keep} for i, row in read_results(out / "eval_local" / RESULTS_FILE).items()}
    assert len(two) == 3 and two == one
    assert summary["eval_rows_equal"] is True and summary["eval_ray"]["n_scored"] == summary["eval_local"]["n_scored"] == 3
