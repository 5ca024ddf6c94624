"""The sqlite response cache: keys, counters, errors never cached, concurrent writers (threads AND processes)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import sqlite3
import threading
from pathlib import Path

import pytest

from generator_adapters.cache import CacheError, ResponseCache, cache_key
from generator_adapters.client import LLMClient
from generator_adapters.config import GeneratorConfig

MSG = [{"role": "user", "content": "Who wrote Hamlet?"}]


def test_key_depends_on_everything_that_changes_an_answer() -> None:
    base = cache_key("m", None, MSG, {"temperature": 0.0, "max_tokens": 8})
    assert base == cache_key("m", None, MSG, {"max_tokens": 8, "temperature": 0.0})  # dict order is irrelevant
    assert base != cache_key("m2", None, MSG, {"temperature": 0.0, "max_tokens": 8})
    assert base != cache_key("m", "http://127.0.0.1:1/v1", MSG, {"temperature": 0.0, "max_tokens": 8})
    assert base != cache_key("m", None, [{"role": "user", "content": "Who wrote Hamlet? "}], {"temperature": 0.0, "max_tokens": 8})
    assert base != cache_key("m", None, MSG, {"temperature": 0.0, "max_tokens": 9})
    assert base != cache_key("m", None, MSG, {"temperature": 0.0, "max_tokens": 8, "seed": 1})


def test_hits_misses_and_persistence(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    with ResponseCache(path) as c:
        assert c.get("k") is None
        c.put("k", {"text": "Shakespeare"}, model="m")
        assert c.get("k") == {"text": "Shakespeare"}
        s = c.stats()
        assert (s["hits"], s["misses"], s["writes"], s["entries"]) == (1, 1, 1, 1)
    with ResponseCache(path) as again:  # a later run (or another machine) reads the same file
        assert again.get("k") == {"text": "Shakespeare"}
        assert again.stats()["hits"] == 1 and again.stats()["misses"] == 0
    journal = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert journal == "wal"


def test_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(CacheError, match=r"bad\.sqlite"):
        ResponseCache(bad)


def _writer(path: str, worker: int, n: int) -> None:
    c = ResponseCache(path)
    for i in range(n):
        c.put(f"w{worker}-{i}", {"text": f"{worker}:{i}"})
        c.put("shared", {"text": "same"})  # everybody races on one key too
        assert c.get(f"w{worker}-{i}") == {"text": f"{worker}:{i}"}
    c.close()


def test_concurrent_threads(tmp_path: Path) -> None:
    path = str(tmp_path / "t.sqlite")
    threads = [threading.Thread(target=_writer, args=(path, w, 40)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with ResponseCache(path) as c:
        assert len(c) == 6 * 40 + 1
        assert c.get("w5-39") == {"text": "5:39"}


def test_concurrent_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "p.sqlite")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with ResponseCache(path) as c:
        assert len(c) == 4 * 40 + 1
        assert all(c.get(f"w{w}-{i}") == {"text": f"{w}:{i}"} for w in range(4) for i in range(40))


class _Flaky:
    """First call per prompt fails with a permanent error, later calls answer."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, **kwargs):
        import litellm

        self.calls += 1
        if self.calls == 1:
            raise litellm.BadRequestError(message="no", model="fake", llm_provider="openai")
        return litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": "Shakespeare"}}])


def test_errors_are_never_cached_and_hits_skip_the_provider(tmp_path: Path) -> None:
    pytest.importorskip("litellm")
    fn = _Flaky()
    cfg = GeneratorConfig(model="openai/fake", cache_path=str(tmp_path / "llm.sqlite"), max_retries=0)
    client = LLMClient(cfg, completion_fn=fn)
    first = asyncio.run(client.complete(MSG))
    assert not first.ok and len(client.cache) == 0  # type: ignore[arg-type]
    second = asyncio.run(client.complete(MSG))
    assert second.ok and not second.cached and fn.calls == 2
    third = asyncio.run(client.complete(MSG))
    assert third.ok and third.cached and third.text == "Shakespeare" and fn.calls == 2
    assert third.attempts == 0 and third.latency_s == 0.0
    s = client.stats()["cache"]
    assert (s["hits"], s["misses"], s["writes"]) == (1, 2, 1)
    client.close()
