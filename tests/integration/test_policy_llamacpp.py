"""The trained searcher on llama.cpp (searcher/policy/llamacpp_policy.py): the shipped LoRA policy merged, exported
to GGUF and run by llama-cpp-python writes the same greedy tokens as the torch policy on a real s3 prompt, reuses
the previous turn's KV cache, and `searcher.runtime = auto` picks it on a CPU. Its threads are governed (chosen call
by call from the speed, the prompt fed in timed chunks: searcher/policy/threads.py), and the tokens do not depend on
them: a policy fixed on one thread writes the same."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration
pytest.importorskip("llama_cpp")
pytest.importorskip("peft")


def test_llamacpp_writes_the_torch_policys_tokens_and_reuses_the_last_turn() -> None:
    from s3core.types import Document
    from searcher.config import SearcherConfig
    from searcher.policies import shipped_policy
    from searcher.policy import load_policy
    from searcher.policy.base import TokenPrompt
    from searcher.policy.llamacpp_policy import LlamaCppPolicy
    from searcher.policy.transformers_policy import TransformersPolicy
    from searcher.protocol import S3_STOP, build_s3_prompt, render_information

    spec = str(shipped_policy())
    fast = load_policy(SearcherConfig(policy="transformers", policy_path=spec))  # runtime auto on a CPU
    assert isinstance(fast, LlamaCppPolicy)
    torch_policy = TransformersPolicy.load(spec, merge_adapter=True, threads=1)
    docs = [Document(id="g", title="Garbage Warrior", text="Garbage Warrior is a 2007 film about Michael Reynolds "
                     "and his Earthship houses. It was directed by Oliver Hodge."),
            Document(id="e", title="Earthship", text="An Earthship is a passive solar house invented by Michael "
                     "Reynolds.")]
    prompt = build_s3_prompt("Who directed the film about the inventor of the Earthship?", render_information(docs))
    ids = torch_policy.encode_chat([{"role": "user", "content": prompt}])
    # its tokenizer (PreTrainedTokenizerFast, no torch import) reads the prompt as the torch policy's AutoTokenizer
    assert fast.encode_chat([{"role": "user", "content": prompt}]) == ids
    assert fast.encode("<query>Earthship</query>") == torch_policy.encode("<query>Earthship</query>")
    (a,) = torch_policy.generate([TokenPrompt(ids)], stop=S3_STOP, max_new_tokens=48)
    (b,) = fast.generate([TokenPrompt(ids)], stop=S3_STOP, max_new_tokens=48)
    assert b.token_ids == a.token_ids and b.text == a.text and b.token_ids
    assert fast.governor is not None and fast.threads in (1, 2), "auto: threads governed, not fixed"
    one = LlamaCppPolicy.load(spec, threads=1)  # fixed (as $S3_LLAMA_THREADS does): whole prompt in one eval
    assert one.governor is None and one.threads == 1
    (c,) = one.generate([TokenPrompt(ids)], stop=S3_STOP, max_new_tokens=48)
    assert c.token_ids == a.token_ids
    del one
    more = ids + list(b.token_ids or []) + fast.encode("\n<information>Doc 1 (Title: Earthship) a house</information>\n")
    fast.generate([TokenPrompt(more)], stop=S3_STOP, max_new_tokens=8)
    assert fast.reused_tokens >= len(ids)  # only the reply's last token and the new window were evaluated
