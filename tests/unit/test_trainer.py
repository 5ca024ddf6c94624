"""Trainer pieces that need no (or a tiny) model: the rows of an update, a step's metrics row, the loop's time
budget, a refused resume, training-set loading rules, plots, CLI. The data order and held-out schedule:
test_schedule.py; the run directory: test_rundir.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from s3core.errors import S3Error
from s3core.types import QAExample
from training.config import TrainingConfig


def test_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from training.report.plots import plot_run

    with (tmp_path / "metrics.jsonl").open("w") as fh:
        for s in range(1, 12):
            fh.write(json.dumps({"step": s, "reward/mean": s / 10, "losses/policy": -s / 100, "search/turns": 1.0}) + "\n")
    out = plot_run(tmp_path)
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_is_yes_no() -> None:
    from training.prep.data import is_yes_no

    assert is_yes_no(["yes"]) and is_yes_no(["No."]) and is_yes_no(["true", "False"])
    assert not is_yes_no(["Yesterday"]) and not is_yes_no([]) and not is_yes_no(["yes", "Paris"])


def test_missing_baseline_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    from s3.config import load_config
    from training.prep.data import load_training_set

    cfg = load_config(None, ["generator.model=openai/fake", "generator.api_base=http://127.0.0.1:9/v1",
                             f"training.data.dir={tmp_path}"])
    (tmp_path / "manifest.json").write_text(json.dumps({"index": str(tmp_path / "index"), "counts": {}}))
    (tmp_path / "train.jsonl").write_text(json.dumps({"id": "q1", "question": "?", "golden_answers": ["a"]}) + "\n")
    with pytest.raises(S3Error, match="no cached naive-RAG baseline"):
        load_training_set(cfg)
    # a baseline cached under another key (another generator) does not count either
    (tmp_path / "baseline.jsonl").write_text(json.dumps({"id": "q1", "acc": 0.0, "key": "other"}) + "\n")
    with pytest.raises(S3Error, match="no cached naive-RAG baseline"):
        load_training_set(cfg)
    with pytest.raises(S3Error, match="not prepared"):
        load_training_set(cfg, tmp_path / "missing")
    # a manifest cut short by a kill, or without its index, is named (and prepared again by `s3 train`)
    for text, why in (('{"index": "ind', "is not JSON"), ('{"counts": {}}', 'has no "index"'), ("[]", 'has no "index"')):
        (tmp_path / "manifest.json").write_text(text)
        with pytest.raises(S3Error, match=why):
            load_training_set(cfg)


def test_cli_registers_training_commands() -> None:
    from s3.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in ("prepare-training", "train", "plot", "export-policy", "train-eval"):
        assert name in sub.choices  # type: ignore[attr-defined,operator]


def test_config_checks() -> None:
    from s3.config import load_config
    from s3core.errors import ConfigError

    with pytest.raises(ConfigError, match="group_size >= 2"):
        load_config(None, ["training.algorithm=grpo", "training.rollout.group_size=1"])
    with pytest.raises(ConfigError, match="needs a generator"):
        load_config(None, ["training.mode=search_r1", "training.reward=gbr"])


def _tiny_llama(**over: int) -> Any:
    """A 1-layer Llama with a 40-token vocabulary (seeded): real transformers code paths at unit-test speed."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    kw = {"vocab_size": 40, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
          "num_key_value_heads": 2, "max_position_embeddings": 64, **over}
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw))


def test_forward_on_response_positions_matches_a_full_forward() -> None:
    torch = pytest.importorskip("torch")
    from s3core.types import SearchResult, Trajectory
    from training.learn.algorithms import gather_logprobs
    from training.learn.api import pad_rollouts
    from training.learn.learner import forward_logprobs

    model = _tiny_llama().eval()
    tc = TrainingConfig(rollout={"temperature": 0.7}, learner={"logprob_chunk": 3})
    # two rollouts with different prompt lengths; response = policy 1s, environment 0s
    t1 = Trajectory(prompt_ids=[5, 6, 7, 8])
    t1.append([9, 10], True)
    t1.append([20, 21, 22], False)  # "<information>...</information>" inserted by the environment
    t1.append([11], True)
    t2 = Trajectory(prompt_ids=[5, 6])
    t2.append([12, 13, 14], True)
    results = [SearchResult(question="a", trajectory=t1), SearchResult(question="b", trajectory=t2)]
    batch = pad_rollouts(results, [0, 1], 0, share_prefix=True)
    assert batch.start == 1
    # loss mask over positions start.. : row 0 predicts 6,7,8 (prompt) then 9,10 (policy) 20,21,22 (env) 11 (policy)
    assert batch.loss_mask[0].tolist() == [0, 0, 1, 1, 0, 0, 0, 1]
    assert batch.loss_mask[1].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    with torch.no_grad():
        lp, _ = forward_logprobs(tc, model, batch)
        full = model(input_ids=batch.ids, attention_mask=batch.attention).logits[:, :-1]
        ref = gather_logprobs(full, batch.ids[:, 1:], temperature=0.7)[:, batch.start :]
    assert lp.shape == ref.shape
    m = batch.loss_mask.bool()
    assert torch.allclose(lp[m], ref[m], atol=1e-5)
    # bf16 autocast (training.learner.autocast): fp32 log-probs out, close to the fp32 forward
    tc.learner.autocast = "bf16"
    with torch.no_grad():
        lp16, _ = forward_logprobs(tc, model, batch)
    assert lp16.dtype == torch.float32
    assert torch.allclose(lp16[m], ref[m], atol=0.05)
    assert not torch.equal(lp16[m], lp[m])  # it really ran in bf16


@pytest.mark.parametrize("want_hidden", [False, True])
def test_shared_prefix_forward_equals_the_plain_forward_in_values_and_gradients(want_hidden: bool) -> None:
    """training.learner.share_prefix: the 40 tokens all rows share are computed once (batch 1) and every row continues from
    their KV cache; log-probs, hidden states and every parameter's gradient equal those of the plain forward."""
    torch = pytest.importorskip("torch")
    from s3core.types import SearchResult, Trajectory
    from training.learn.api import pad_rollouts
    from training.learn.learner import forward_logprobs

    model = _tiny_llama(vocab_size=60, num_hidden_layers=2, num_key_value_heads=1, max_position_embeddings=128)
    shared = [int(x) for x in torch.randint(3, 60, (40,))]
    results = []
    for i, (extra, resp) in enumerate([([7, 8], [9, 10, 11]), ([12], [13, 14, 15, 16, 17]), ([18, 19, 20], [21])]):
        t = Trajectory(prompt_ids=shared + extra)
        t.append(resp[:1], True)
        t.append([30 + i, 31], False)
        t.append(resp[1:] or [22], True)
        results.append(SearchResult(question=f"q{i}", trajectory=t))

    def run(share: bool) -> tuple[object, object, dict[str, object], int]:
        tc = TrainingConfig(rollout={"temperature": 0.8}, learner={"share_prefix": share, "logprob_chunk": 3})
        batch = pad_rollouts(results, [0, 1, 2], 0, share_prefix=share)
        model.zero_grad(set_to_none=True)
        lp, hid = forward_logprobs(tc, model, batch, want_hidden=want_hidden)
        loss = (lp * batch.loss_mask).sum() + (hid.sum() if hid is not None else 0.0)
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        return lp.detach(), hid.detach() if hid is not None else None, grads, batch.prefix

    lp0, h0, g0, p0 = run(False)
    lp1, h1, g1, p1 = run(True)
    assert p0 == 0 and p1 == 40  # the whole shared prompt part (below the first response position)
    m = torch.ones_like(lp0, dtype=torch.bool)
    assert torch.allclose(lp0[m], lp1[m], atol=1e-5)  # type: ignore[index]
    if want_hidden:
        assert torch.allclose(h0, h1, atol=1e-5)
    assert g0.keys() == g1.keys()
    for n in g0:
        assert torch.allclose(g0[n], g1[n], atol=1e-5, rtol=1e-4), n


@pytest.mark.parametrize("drop", [False, True])
def test_grpo_update_can_leave_zero_advantage_groups_out(drop: bool, tiny_policy_dir: Path, tmp_path: Path) -> None:
    """The loop's choice of rows (`update_rows`: GRPO advantages, flat groups dropped on request) and the single
    learner's update of them (the learner interface's `update`)."""
    pytest.importorskip("torch")
    from s3.config import load_config
    from s3core.types import SearchResult, Trajectory
    from training.learn.api import pad_rollouts
    from training.learn.learner import Learner
    from training.run.step import update_rows

    tc = load_config(None, [f"training.base_model={tiny_policy_dir}", "training.algorithm=grpo",
                            "training.rollout.group_size=2", "training.rollout.temperature=1.0",
                            f"training.update.drop_flat_groups={str(drop).lower()}", "training.update.ppo_epochs=1",
                            "training.update.kl_coef=0", "training.learner.micro_batch_size=8",
                            "training.learner.autocast=off"]).training
    results = []
    for i in range(4):
        t = Trajectory(prompt_ids=[5, 6, 7])
        t.append([9 + i, 10], True)
        results.append(SearchResult(question=f"q{i // 2}", trajectory=t))

    def pad(res: list[SearchResult], rows: list[int]) -> Any:
        return pad_rollouts(res, rows, 0, share_prefix=True)

    rows, stats = update_rows(tc, results, [1.0, 1.0, 1.0, 0.0], pad)  # group 0 flat
    assert rows is not None and rows.rows == ([2, 3] if drop else [0, 1, 2, 3]) and rows.tokens == [2.0] * len(rows.rows)
    assert stats.get("reward/flat_groups") == (1.0 if drop else None)
    report = Learner(tc, "cpu", tmp_path).update(rows)
    assert report.stats["losses/grad_norm"] > 0 and report.tokens == 2.0 * len(rows.rows)
    assert [b.ids.shape[0] for b in report.batches] == [len(rows.rows)]  # one micro-batch of 8 rows at most
    assert update_rows(tc, results, [None, 1.0, None, 0.0], pad)[0] is None  # no group has 2 scored members


def test_an_rl_steps_metrics_row_is_the_batchs_then_the_loops_then_the_updates() -> None:
    """training/run/step.py `rl_row` (no model): reward/ and search/ from the batch (None rewards counted as missing,
    turn 0 not a turn), then the loop's keys, the sync row, the batch's measures and usage, the accuracies and the
    update's stats, in that order (a later key wins); `timeline_row` spans."""
    from s3core.types import Document, SearchResult, SearchStep
    from training.rewards import RewardBatch
    from training.run.step import RolloutBatch, ScoredBatch, rl_row, sync_row, timeline_row

    steps = [SearchStep(turn=0), SearchStep(turn=1), SearchStep(turn=2, invalid_reason="no query")]
    results = [SearchResult(question="q", steps=steps, documents=[Document(id="d1"), Document(id="d2")]),
               SearchResult(question="q", steps=steps[:1])]
    batch = RolloutBatch([0], results, {"search/gold_recall": 0.5}, {"rollout/confidence_from_learner": 1.0})
    scored = ScoredBatch(RewardBatch([1.0, None], acc_s3=[1.0, None], acc_rag=[0.0, None]), {"reward/generator_calls": 2.0})
    row = rl_row(batch, scored, samples_in_update=1, loop={"charts/step_seconds": 3.0, "search/docs": -1.0},
                 sync=sync_row(1.5, 3.0), stats={"losses/policy": 0.25, "reward/mean": 9.0})
    assert list(row)[:8] == ["reward/mean", "reward/max", "reward/min", "reward/missing", "reward/samples_in_update",
                             "search/turns", "search/invalid_action_rate", "search/docs"]
    assert row["reward/max"] == row["reward/min"] == 1.0 and row["reward/missing"] == 1.0
    assert row["search/turns"] == 1.0 and row["search/invalid_action_rate"] == 0.5
    assert row["search/docs"] == -1.0 and row["charts/weight_sync_share"] == 0.5  # the loop's key wins over the batch's
    assert row["reward/acc_s3"] == 1.0 and row["reward/acc_rag"] == 0.0  # acc_rag: None counted in the denominator
    assert row["reward/mean"] == 9.0 and row["search/gold_recall"] == 0.5 and row["reward/generator_calls"] == 2.0
    assert "reward/gold_added" not in row  # a reward without retrieval_gain's counts leaves their keys out
    counted = ScoredBatch(RewardBatch([1.0, None], gold_added=[2.0, None], other_added=[1.0, None]), {})
    row2 = rl_row(batch, counted, samples_in_update=1, loop={}, sync={}, stats={})
    assert row2["reward/gold_added"] == 2.0 and row2["reward/other_added"] == 1.0
    assert sync_row(None, 3.0) == {}
    times = {"rollout_start": 1.0, "rollout_end": 2.0, "reward_start": 2.0, "reward_end": 4.0}
    tl = timeline_row(3, 2, 1, 1.0, times, (5.0, 6.0, 7.0, 8.0))
    assert tl == {"step": 3, "batch": 2, "version": 1, "staleness": 1.0, "rollout": [1.0, 2.0], "reward": [2.0, 4.0],
                  "wait": [5.0, 6.0], "update": [6.0, 7.0], "sync": [7.0, 8.0]}


def test_reward_trend_separates_a_rise_from_noise_and_skips_the_warm_up() -> None:
    from training.report.plots import format_trend, reward_trend

    warm = [{"step": s, "charts/sft": 1.0, "reward/mean": 5.0} for s in range(1, 4)]  # warm-up rows never count
    rising = [{"step": 3 + s, "reward/mean": 0.1 * s + (0.05 if s % 2 else -0.05)} for s in range(1, 13)]
    t = reward_trend(warm + rising)
    assert t["steps"] == 12 and t["window"] == 4 and t["first_steps"] == [4, 7] and t["last_steps"] == [12, 15]
    assert t["verdict"] == "rises" and t["z"] >= 2 and abs(t["slope_per_step"] - 0.1) < 0.02
    noisy = [{"step": s, "reward/mean": v} for s, v in enumerate([0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0], 1)]
    assert reward_trend(noisy)["verdict"] == "within noise"
    falling = [{"step": s, "reward/mean": 1.0 - 0.1 * s + 0.01 * (s % 2)} for s in range(1, 10)]
    assert reward_trend(falling)["verdict"] == "falls"
    assert reward_trend(rising[:3])["verdict"].startswith("too few")
    assert "difference +" in format_trend(t) and format_trend(reward_trend([]))


def test_s3_plot_prints_the_trend_of_the_reward_and_of_the_behaviour(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    from s3.cli import main

    with (tmp_path / "metrics.jsonl").open("w") as fh:
        for s in range(1, 13):
            fh.write(json.dumps({"step": s, "reward/mean": 0.1 * (s % 2), "search/docs": 1.0 + 0.2 * s}) + "\n")
    assert main(["plot", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "curves.png").is_file()
    lines = {ln.split(" over ")[0]: ln for ln in out.splitlines() if " RL steps: " in ln}
    assert set(lines) == {"reward/mean", "search/docs"}  # keys the run does not log are left out
    assert lines["reward/mean"].endswith("within noise") and lines["search/docs"].endswith("rises")


def test_learner_weights_full_and_lora_merged() -> None:
    """What the trainer syncs into the vLLM engine: checkpoint names; a LoRA model's adapters merged in (W + BA),
    no adapter tensors, and the live model's weights untouched (merged out of place)."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from training.learn.weight_sync import hf_name, learner_weights

    model = _tiny_llama()
    full = dict(learner_weights(model))
    assert full.keys() == model.state_dict().keys() and "model.layers.0.self_attn.q_proj.weight" in full

    base_q = model.state_dict()["model.layers.0.self_attn.q_proj.weight"].clone()
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # a trained adapter: B != 0
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.1)
    merged = dict(learner_weights(lora))
    assert merged.keys() == full.keys()  # plain names, no lora_A / lora_B
    layer = lora.base_model.model.model.layers[0].self_attn.q_proj
    delta = (layer.lora_B["default"].weight @ layer.lora_A["default"].weight) * layer.scaling["default"]
    assert torch.allclose(merged["model.layers.0.self_attn.q_proj.weight"], base_q + delta, atol=1e-6)
    assert torch.equal(layer.base_layer.weight, base_q) and not layer.merged  # the live weights untouched
    assert hf_name("base_model.model.model.layers.0.mlp.up_proj.lora_A.default.weight") is None
    assert hf_name("base_model.model.lm_head.weight") == "lm_head.weight"


def test_lora_merged_samples_what_the_adapters_compute_and_puts_the_weights_back_bit_exact() -> None:
    """training.rollout.merge_lora: within lora_merged the LoRA model computes W + BA in one matmul (the same logits
    as the live adapters), and on exit, also after an error, every base weight is its original tensor again."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from training.learn.weight_sync import lora_merged

    plain = _tiny_llama()
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    with lora_merged(plain) as n:  # not a LoRA model: nothing changes
        assert n == 0
    lora = peft.get_peft_model(_tiny_llama(), peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.1)
    layer = lora.base_model.model.model.layers[0].self_attn.q_proj
    original = layer.base_layer.weight.data
    snapshot = original.clone()
    with torch.no_grad():
        live = lora(ids).logits
        with lora_merged(lora) as n:
            assert n == 2 * len(lora.base_model.model.model.layers)  # q_proj and v_proj of each layer
            assert not torch.equal(layer.base_layer.weight, snapshot)  # merged: W + BA
            merged = lora(ids).logits
        assert torch.allclose(merged, live, atol=1e-5)
        with lora.disable_adapter():
            assert not torch.allclose(lora(ids).logits, live, atol=1e-3)  # the adapters change the output
        assert layer.base_layer.weight.data_ptr() == original.data_ptr() and torch.equal(original, snapshot)  # bit-exact
        assert torch.equal(lora(ids).logits, live)  # the adapters are live again
        with pytest.raises(RuntimeError, match="boom"), lora_merged(lora):
            raise RuntimeError("boom")
        assert layer.base_layer.weight.data_ptr() == original.data_ptr() and torch.equal(lora(ids).logits, live)

    # a layer it does not merge keeps its live adapter (an embedding's LoRA; DoRA's magnitude), the others merge; and
    # nothing merges when the copies would exceed the budget
    for extra, merges in (({"target_modules": ["q_proj", "embed_tokens"]}, 1),
                          ({"target_modules": ["q_proj"], "use_dora": True}, 0)):
        other = peft.get_peft_model(_tiny_llama(), peft.LoraConfig(r=2, lora_alpha=4, **extra))
        with torch.no_grad():
            for name, p in other.named_parameters():
                if "lora_B" in name or "lora_embedding_B" in name:
                    p.copy_(torch.randn_like(p) * 0.1)
            want = other(ids).logits
            with lora_merged(other) as n:
                assert n == merges
                assert torch.allclose(other(ids).logits, want, atol=1e-5)
            with lora_merged(other, budget_bytes=1) as n:
                assert n == 0
            assert torch.equal(other(ids).logits, want)

    # the learner sampling itself: LocalExecutor.rollout merges for the rollout only when told (build.py: merges_lora)
    from s3core.types import QAExample, SearchResult
    from training.rollouts.executors import LocalExecutor

    seen: list[bool] = []

    class Agent:
        def search(self, questions: list[str]) -> list[SearchResult]:
            seen.append(not torch.equal(layer.base_layer.weight, snapshot))  # merged while it samples?
            return [SearchResult(question=q) for q in questions]

    class NoScorer:
        accuracy = None

    qs = [QAExample(id="q", question="?", golden_answers=["a"])]
    for merge in (True, False):
        ex = LocalExecutor(agent=Agent(), greedy_agent=Agent(), scorer=NoScorer(), model=lora,  # type: ignore[arg-type]
                           merge_lora=merge)
        ex.rollout(qs, 0)
    assert seen == [True, False] and torch.equal(layer.base_layer.weight, snapshot)


def test_several_learners_need_the_ray_backend_and_refuse_what_runs_in_the_trainers_own_learner() -> None:
    from s3.config import load_config
    from s3core.errors import ConfigError

    ok = load_config(None, ["training.backend=ray", "ray.learners=2"])
    assert ok.ray.learners == 2 and ok.ray.learner_gpus == 0
    assert load_config(None, []).ray.learners == 1  # the default: the learner is the trainer's own process
    with pytest.raises(ConfigError, match=re.escape("set training.backend = 'ray'")):
        load_config(None, ["ray.learners=2"])
    with pytest.raises(ConfigError, match=re.escape("training.sft.steps=2")):
        load_config(None, ["training.backend=ray", "ray.learners=2", "training.sft.steps=2"])
    with pytest.raises(ConfigError, match="confidence_gated"):
        load_config(None, ["training.backend=ray", "ray.learners=2", "training.reward=confidence_gated",
                           "training.rollout.engine=vllm"])
    with pytest.raises(ConfigError, match=re.escape("ray.learner_gpus = 1")):
        load_config(None, ["training.backend=ray", "ray.learners=2", "training.learner.device=cuda"])
    with pytest.raises(ConfigError, match=re.escape("learner_gpus=1.0 with training.learner.device = 'cpu'")):
        load_config(None, ["training.backend=ray", "ray.learners=2", "training.learner.device=cpu", "ray.learner_gpus=1"])
    with pytest.raises(ConfigError, match="learners"):
        load_config(None, ["training.backend=ray", "ray.learners=0"])


def test_custom_resources_of_ray_actors_are_checked() -> None:
    from s3.config import load_config
    from s3core.errors import ConfigError

    assert load_config(None, ["ray.rollout_worker_resources.node2=1"]).ray.rollout_worker_resources == {"node2": 1.0}
    with pytest.raises(ConfigError, match="not a custom resource"):
        load_config(None, ["ray.learner_resources.GPU=1"])
    with pytest.raises(ConfigError, match="amount > 0"):
        load_config(None, ["ray.eval_worker_resources.node2=0"])


@pytest.mark.parametrize("lora", [True, False])
def test_after_the_warm_up_the_kl_reference_is_the_warmed_policy_also_with_lora(tiny_policy_dir: Path, tmp_path: Path,
                                                                                lora: bool) -> None:
    """RL's KL pulls towards the policy RL starts from: after the oracle warm-up that is the warmed policy, not the
    unwarmed base (a LoRA reference of 'adapters disabled' would be the base). Saved to RUN_DIR/reference, so a
    resumed learner gets the same reference."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from s3.config import load_config
    from training.learn.api import Batch
    from training.learn.learner import Learner, forward_logprobs, ref_logprobs

    tc = load_config(None, [f"training.base_model={tiny_policy_dir}", f"training.learner.lora={str(lora).lower()}",
                            "training.update.kl_coef=0.001", "training.learner.autocast=off", "training.learner.lora_r=4"]).training
    learner = Learner(tc, "cpu", tmp_path)
    ids = torch.randint(0, 1000, (2, 12))
    batch = Batch(ids=ids, attention=torch.ones_like(ids), loss_mask=torch.ones(2, 11), start=0)
    with torch.no_grad():
        base = forward_logprobs(tc, learner.model, batch)[0]
        for name, p in learner.model.named_parameters():  # the warm-up's effect: the trainable weights moved
            if p.requires_grad and ("lora_B" in name or not lora):
                p.add_(torch.randn_like(p) * 0.5)
        warmed = forward_logprobs(tc, learner.model, batch)[0]
    assert (warmed - base).abs().max() > 1e-2
    if lora:
        assert torch.allclose(ref_logprobs(learner, batch), base, atol=1e-6)  # before: the adapters disabled = base

    learner.end_warmup()
    assert (tmp_path / "reference" / ("adapter_config.json" if lora else "config.json")).is_file()
    assert torch.allclose(ref_logprobs(learner, batch), warmed, atol=1e-5)  # KL = 0 at the first RL step
    resumed = Learner(tc, "cpu", tmp_path)  # a resumed run loads RUN_DIR/reference
    assert torch.allclose(ref_logprobs(resumed, batch), warmed, atol=1e-5)


def test_a_time_budget_starts_no_step_that_would_end_past_it_and_stops_with_a_checkpoint(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """S3Trainer.train's loop alone: its steps and checkpoints replaced by a clock (no parts, no models)."""
    import training.run.trainer as tr
    from training import rundir
    from training.run.schedule import HeldoutSchedule

    clock = [0.0]
    monkeypatch.setattr(tr.time, "monotonic", lambda: clock[0])

    class Clocked(tr.S3Trainer):
        def __init__(self) -> None:  # the loop's own state only
            self.step, self.stopped, self.run_dir, self.log = 0, None, tmp_path, lambda s: None
            self.tc = TrainingConfig(total_steps=100, checkpoint={"every": 1000})
            self.schedule = HeldoutSchedule(every=4, warmup_steps=0, total_steps=100, questions=1)  # after 4, 8, ...
            self.metrics = rundir.MetricsWriter(tmp_path)
            self.saved: list[int] = []

        def train_step(self) -> dict[str, float]:
            heldout = 25.0 if self.schedule.due(self.step + 1) else 0.0
            clock[0] += 10.0 + heldout
            self.step += 1
            row = {"reward/mean": 0.0, "search/invalid_action_rate": 0.0, "search/turns": 1.0, "charts/step_seconds": 10.0}
            return {**row, "charts/heldout_seconds": heldout} if heldout else row

        def save_checkpoint(self) -> Path:
            self.saved.append(self.step)
            return tmp_path

    t = Clocked()
    out = t.train(max_seconds=100.0)
    # steps 1-3 (30 s), step 4 + its held-out (35 s: ends at 65), steps 5-7 (95 s); step 8 would need 10 + 25 s
    assert out["steps"] == 7 and clock[0] == 95.0 and t.saved == [4, 7]  # the held-out step is checkpointed too
    t.step, clock[0], t.saved = 0, 0.0, []
    assert t.train(max_seconds=10_000.0, max_steps=3)["steps"] == 3 and t.saved == [3]


def test_a_checkpoint_of_another_data_order_is_refused_and_the_parts_are_closed(tmp_path: Path) -> None:
    """Resuming a checkpoint written with another batch size (or warm-up) is a clear error, and the parts the builder
    started (Ray workers, learner actors) are closed, not left running."""
    torch = pytest.importorskip("torch")
    from s3.config import load_config
    from training.prep.data import TrainingSet
    from training.run.build import TrainingParts
    from training.run.trainer import S3Trainer
    from training.rundir import STATE_FILE

    cfg = load_config(None, [f"training.output_dir={tmp_path / 'run'}", "training.rollout.batch_size=2"])
    ckpt = tmp_path / "run" / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    torch.save({"step": 1, "data_order": {"scheme": "warmup-stream+rl-from-start", "sft_warmup_steps": 0, "seed": 0,
                                          "batch_size": 4, "n_questions": 3}}, ckpt / STATE_FILE)
    closed: list[str] = []

    class Closes:  # the executor and the learner: nothing runs before the refusal, both are closed after it
        def __init__(self, name: str) -> None:
            self.name = name

        def close(self) -> None:
            closed.append(self.name)

    examples = [QAExample(id=f"q{i}", question="?", golden_answers=["a"]) for i in range(3)]
    data = TrainingSet(directory=tmp_path, examples=examples, baseline={}, index_dir=tmp_path / "index", manifest={})
    parts = TrainingParts(cfg=cfg, run_dir=tmp_path / "run", device="cpu", data=data, examples=examples, heldout=[],
                          retriever=Closes("retriever"), loop_cfg=cfg.searcher, learner=Closes("learner"),  # type: ignore[arg-type]
                          tokenizer=None, executor=Closes("executor"), resume_dir=ckpt)  # type: ignore[arg-type]
    with pytest.raises(S3Error, match="data order changed"):
        S3Trainer(parts, log=lambda s: None)
    assert closed == ["executor", "learner"]
