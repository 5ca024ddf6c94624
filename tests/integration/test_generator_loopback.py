"""Generator / Judge against a REAL loopback OpenAI-compatible HTTP server (through litellm), with injected
timeouts and 500s: failed calls become missing answers, retried ones recover, everything is counted, the cache
serves repeats and a re-run retries only what failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator_adapters import Generator, GeneratorConfig, Judge, JudgeConfig
from generator_adapters.testing import FakeLLMServer
from s3core.types import Document

pytestmark = pytest.mark.integration

DOCS = [Document(id="1", title="Paris", text="Paris is the capital of France.")]
QUESTIONS = [f"What is fact number {i}?" for i in range(40)]


def _cfg(srv: FakeLLMServer, **over) -> GeneratorConfig:
    base = {"model": "openai/fake", "api_base": srv.api_base, "timeout_s": 1.5, "max_retries": 1,
            "backoff_s": 0.01, "concurrency": 16, "cache_path": None}
    return GeneratorConfig(**{**base, **over})


def test_twenty_percent_timeouts_and_500s_are_missing_and_counted() -> None:
    with FakeLLMServer(latency_s=0.01, failure_rate=0.2, failure_kind="mixed", hang_s=6.0) as srv:
        gen = Generator(_cfg(srv))
        prompts = [gen.prompt(q, DOCS) for q in QUESTIONS]
        failing = {i for i, p in enumerate(prompts) if srv.fails(p)}
        kinds = {srv.kind_for(prompts[i]) for i in failing}
        assert 4 <= len(failing) <= 14 and kinds == {"timeout", "500"}  # the seed gives both kinds
        answers = gen.answer_sync(QUESTIONS, [DOCS] * len(QUESTIONS))

        for i, a in enumerate(answers):
            if i in failing:
                want = "CallTimeoutError" if srv.kind_for(prompts[i]) == "timeout" else "ServerError"
                assert a.text is None and not a.ok and a.error_type == want and a.attempts == 2
            else:
                assert a.ok and a.text == f"answer to {QUESTIONS[i]}" and a.attempts == 1
                assert a.prompt_tokens > 0 and a.completion_tokens > 0 and a.latency_s > 0
        s = gen.stats()
        assert s["failed"] == len(failing) and s["succeeded"] == len(QUESTIONS) - len(failing)
        assert s["retries"] == len(failing) and s["provider_calls"] == len(QUESTIONS) + len(failing)
        served = srv.stats()
        assert served["requests"] == len(QUESTIONS) + len(failing)
        assert all(srv.attempts(prompts[i]) == 2 for i in failing)


def test_transient_failures_recover_on_retry() -> None:
    with FakeLLMServer(latency_s=0.01, failure_rate=0.2, failure_kind="500", failures_per_prompt=1) as srv:
        gen = Generator(_cfg(srv))
        answers = gen.answer_sync(QUESTIONS, None)
        n_fail = sum(srv.fails(gen.prompt(q, None)) for q in QUESTIONS)
        assert n_fail > 0 and all(a.ok for a in answers)
        assert sum(a.attempts == 2 for a in answers) == n_fail
        assert gen.stats()["retries"] == n_fail and gen.stats()["errors"] == {"ServerError": n_fail}


def test_429_and_permanent_401_through_litellm() -> None:
    with FakeLLMServer(failure_rate=1.0, failure_kind="429", failures_per_prompt=2) as srv:
        [a] = Generator(_cfg(srv, max_retries=2)).answer_sync(["q"], None)
        assert a.ok and a.attempts == 3  # two 429s, then the answer
    with FakeLLMServer(failure_rate=1.0, failure_kind="401") as srv:
        gen = Generator(_cfg(srv, max_retries=3))
        [a] = gen.answer_sync(["q"], None)
        assert a.error_type == "AuthError" and a.attempts == 1 and srv.stats()["requests"] == 1


def test_cache_serves_repeats_and_rerun_retries_only_failures(tmp_path: Path) -> None:
    cache = str(tmp_path / "llm.sqlite")
    with FakeLLMServer(latency_s=0.01, failure_rate=0.2, failure_kind="500") as srv:
        first = Generator(_cfg(srv, cache_path=cache, max_retries=0)).answer_sync(QUESTIONS, None)
        failed = [i for i, a in enumerate(first) if not a.ok]
        assert failed and srv.stats()["requests"] == len(QUESTIONS)

        srv.failure_rate = 0.0  # the provider recovers; a new run (new Generator, same cache file)
        gen = Generator(_cfg(srv, cache_path=cache, max_retries=0))
        second = gen.answer_sync(QUESTIONS, None)
        assert all(a.ok for a in second)
        assert [i for i, a in enumerate(second) if not a.cached] == failed  # only the failures went out again
        assert srv.stats()["requests"] == len(QUESTIONS) + len(failed)
        c = gen.cache_stats()
        assert (c["hits"], c["misses"], c["writes"]) == (len(QUESTIONS) - len(failed), len(failed), len(failed))
        assert [a.text for i, a in enumerate(second) if i not in failed] == [
            a.text for i, a in enumerate(first) if i not in failed]


def test_judge_through_the_same_machinery() -> None:
    def reply(prompt: str) -> str:
        return "Yes." if "Paris" in prompt.split("Golden answers:")[0] else "no"

    with FakeLLMServer(reply=reply) as srv:
        judge = Judge(JudgeConfig(model="openai/fake", api_base=srv.api_base, cache_path=None))
        verdicts = judge.check(["It is Paris.", "It is Lyon.", None], [["Paris"], ["Paris"], ["Paris"]])
        assert verdicts == [True, False, None]
        assert srv.stats()["requests"] == 2


def test_client_processes_keep_order_accounting_and_cache(tmp_path: Path) -> None:
    """processes=2: the batch is answered by two spawned worker processes; the answers come back in input order,
    failures stay missing, and the parent's stats and cache counters include what the workers did."""
    cache = str(tmp_path / "llm.sqlite")
    with FakeLLMServer(latency_s=0.01, failure_rate=0.2, failure_kind="500", process=True) as srv:
        gen = Generator(_cfg(srv, cache_path=cache, max_retries=0, processes=2))
        try:
            first = gen.answer_sync(QUESTIONS, None)
            failed = {i for i, q in enumerate(QUESTIONS) if srv.fails(gen.prompt(q, None))}
            assert failed
            for i, a in enumerate(first):
                assert (a.error_type == "ServerError") if i in failed else (a.text == f"answer to {QUESTIONS[i]}")
            s = gen.stats()
            assert (s["requests"], s["failed"], s["succeeded"]) == (40, len(failed), 40 - len(failed))
            assert s["errors"] == {"ServerError": len(failed)}
            second = gen.answer_sync(QUESTIONS, None)  # the same workers, the same cache file
            assert [i for i, a in enumerate(second) if a.cached] == [i for i in range(40) if i not in failed]
            c = gen.cache_stats()
            assert (c["hits"], c["writes"]) == (40 - len(failed), 40 - len(failed))
            assert srv.stats()["requests"] == 40 + len(failed)
        finally:
            gen.close()


def test_client_processes_refuse_local_models() -> None:
    from s3core.errors import ConfigError

    with pytest.raises(ConfigError, match="processes = 2 cannot be used with a local/ model"):
        Generator(GeneratorConfig(model="local/smollm2-135m-instruct", processes=2, cache_path=None))


def _client_sockets(port: int) -> int:
    """This process's open TCP connections to the loopback server (the client side)."""
    import psutil

    return sum(1 for c in psutil.Process().net_connections(kind="tcp") if c.raddr and c.raddr.port == port)


def _open_sessions() -> int:
    import gc

    import aiohttp

    gc.collect()
    # type(), not isinstance(): isinstance reads __class__, which some module-level objects (torch.distributed's
    # deprecated reduce_op) answer with a FutureWarning, an error under this suite's warning filter
    return sum(1 for o in gc.get_objects() if type(o) is aiohttp.ClientSession and not o.closed)


def test_a_batch_per_event_loop_leaves_no_session_or_socket_behind() -> None:
    """litellm caches its HTTP client per event loop; a training step's rewards or an eval run their batch on a loop
    of their own (run_sync), which closes that loop's clients before it ends. Without that, each batch left an aiohttp
    session and its keep-alive sockets open until the process ended (8 batches here: 8 sessions, 32 sockets)."""
    from generator_adapters.client import run_sync

    with FakeLLMServer(latency_s=0.01) as srv:
        gen = Generator(_cfg(srv, concurrency=4))
        before = _open_sessions()
        for step in range(4):
            assert all(a.ok for a in gen.answer_sync([f"q{step}-{i}" for i in range(4)], None))
        for step in range(4):  # the async path a reward scorer or the eval harness takes inside run_sync
            answers = run_sync(gen.answer([f"r{step}-{i}" for i in range(4)], None))
            assert all(a.ok for a in answers)
        assert srv.stats()["requests"] == 32
        assert _open_sessions() == before
        assert _client_sockets(srv.port) == 0
