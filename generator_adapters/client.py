"""The call machinery shared by `Generator` and `Judge`: litellm, bounded concurrency, timeout, typed retries,
the sqlite cache, usage, cost and latency. One failed call yields an `Answer` with `error` set: it is *missing*.

`completion_fn` is the one narrow seam for tests: any `async (**litellm_kwargs) -> ModelResponse` (default
`litellm.acompletion`). Unit tests pass a fake that raises litellm's real exception classes.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from generator_adapters.cache import ResponseCache, cache_key
from generator_adapters.config import LLMCallConfig
from s3core.credentials import llm_api_key, redact
from s3core.errors import ConfigError, UpstreamError
from s3core.pricing import Price, count_prompt_tokens, resolve_price
from s3core.upstream import map_exception

__all__ = ["USAGE_FIELDS", "Answer", "CompletionFn", "LLMClient", "release_loop_clients", "run_sync"]

# what `LLMClient.usage()` reports (money in dollars): provider answers paid for, their tokens and spend, the answers
# whose price is unknown, and the answers served by the cache (or a repeat in the same batch) with what they saved
USAGE_FIELDS = ("paid_calls", "prompt_tokens", "completion_tokens", "cost_usd", "unknown_cost_calls", "cache_hits",
                "saved_usd")

CompletionFn = Callable[..., Awaitable[Any]]
T = TypeVar("T")

# A local model computes one answer at a time (one llama.cpp context per model), so its calls queue in front of it
# rather than inside it: one semaphore per (event loop, model), shared by every client of that model. The per-call
# timeout then covers the call itself, never the wait behind other questions.
_LOCAL_SEMS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)
_LOCAL_SEMS_LOCK = threading.Lock()


class Answer(BaseModel):
    """One LLM answer, or why there is none. `text is None` (with `error` set) means MISSING, never wrong."""

    text: str | None = Field(default=None, description="The model's answer (stripped); None when the call failed.")
    error: str | None = Field(default=None, description="Why the call failed after its last retry.")
    error_type: str | None = Field(default=None, description="Our error class name, e.g. 'ServerError'.")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = Field(default=0.0, description="Wall time of the call including retries (0 for a cache hit).")
    cost_usd: float | None = Field(
        default=None,
        description="The price of this answer (s3core/pricing.py: the section's prices, 0 for local models, litellm's "
        "cost map), None when unknown. Kept on cache hits (what the answer cost when it was made, so what the hit "
        "saved; this run spent nothing on it: see `cached`).",
    )
    cached: bool = False
    attempts: int = Field(default=0, description="Provider calls made (0 for a cache hit).")
    model: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None


async def release_loop_clients() -> None:
    """Close and forget the HTTP clients litellm cached for the running event loop.

    litellm caches a provider client (e.g. an AsyncOpenAI holding an aiohttp session and its keep-alive sockets) per
    settings AND per event loop: the cache key ends in the loop's id. It closes an evicted client whose close is a
    coroutine only from that same loop, which never runs again once `asyncio.run` returns: every batch run on a loop
    of its own (a training step's rewards, an eval) left a session and up to `concurrency` sockets open until the
    process ended. Only this loop's clients are closed; a loop running in another thread keeps its own."""
    litellm = sys.modules.get("litellm")  # not imported: no client was made
    cache = getattr(litellm, "in_memory_llm_clients_cache", None)
    entries, ttls = getattr(cache, "cache_dict", None), getattr(cache, "ttl_dict", None)
    if not isinstance(entries, dict):
        return
    suffix = f"-{id(asyncio.get_running_loop())}"
    for key in [k for k in entries if isinstance(k, str) and k.endswith(suffix)]:
        client = entries.pop(key, None)
        if isinstance(ttls, dict):
            ttls.pop(key, None)
        close = getattr(client, "aclose", None) or getattr(client, "close", None)
        if close is not None and inspect.iscoroutinefunction(close):
            with contextlib.suppress(Exception):  # a client that fails to close is dropped all the same
                await close()


async def _then_release(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return await coro
    finally:
        await release_loop_clients()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on an event loop of its own, also when this thread already runs one (then in a
    thread), and close the HTTP clients litellm cached for that loop before it ends (`release_loop_clients`): use it
    instead of `asyncio.run` for anything that calls a generator or a judge."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_then_release(coro))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(_then_release(coro))
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=target, name="s3-run-sync")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def _is_local(model: str) -> bool:
    return model.startswith("local/")


class LLMClient:
    """Calls one configured model through litellm with concurrency, timeout, retries, cache and accounting."""

    deadline_grace_s: float = 5.0  # outer deadline = timeout_s + max(grace, timeout_s / 2)

    def __init__(
        self,
        cfg: LLMCallConfig,
        cache: ResponseCache | None = None,
        completion_fn: CompletionFn | None = None,
        cache_path: str | None = None,
    ) -> None:
        self.cfg = cfg
        path = cache_path if cache_path is not None else cfg.cache_path
        self.cache = cache if cache is not None else (ResponseCache(path) if path else None)
        self._api_key = self._read_key()
        if cfg.processes > 1 and (_is_local(cfg.model) or completion_fn is not None):
            what = "a local/ model (it runs inside this process)" if _is_local(cfg.model) else "a custom completion_fn"
            raise ConfigError(f"processes = {cfg.processes} cannot be used with {what}; set processes = 1")
        self._pool: Any = None
        if _is_local(cfg.model) and completion_fn is None:
            from s3runtime.llm_local import register_local_provider

            register_local_provider()
        if completion_fn is None:
            # import litellm here, not inside the first call: its import takes seconds and would block the event
            # loop while the first calls' timeouts are already running
            from s3core.upstream import quiet_litellm

            quiet_litellm()
            import litellm

            completion_fn = litellm.acompletion
        self._completion_fn: CompletionFn = completion_fn
        self._sem: asyncio.Semaphore | None = None
        self._sem_loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self.price: Price | None = resolve_price(cfg.model, cfg.api_base, cfg.input_cost_per_mtok,
                                                 cfg.output_cost_per_mtok)
        self._usage: dict[str, float] = dict.fromkeys(USAGE_FIELDS, 0.0)

    def _read_key(self) -> str | None:
        """The key of this endpoint, only from the variable its own api_key_env names; without one a placeholder,
        so litellm never picks a provider variable (OPENAI_API_KEY, ...) up by itself (s3core/credentials.py)."""
        section = {"GeneratorConfig": "generator", "JudgeConfig": "judge"}.get(type(self.cfg).__name__, "llm")
        return llm_api_key(self.cfg.model, self.cfg.api_key_env, self.cfg.api_base, setting=f"{section}.api_key_env")

    # ------------------------------------------------------------------ accounting

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def take_counts(self) -> dict[str, int]:
        """This client's counts since the last call, then zero them (a client worker process reports these)."""
        with self._lock:
            out = dict(self._counts)
            self._counts.clear()
        return out

    def _account(self, answer: Answer) -> None:
        """Add one answer to usage(): spend for a paid answer, savings for a cache hit; a failed call costs nothing."""
        if not answer.ok:
            return
        with self._lock:
            u = self._usage
            if answer.cached:
                u["cache_hits"] += 1
                u["saved_usd"] += answer.cost_usd or 0.0
                return
            u["paid_calls"] += 1
            u["prompt_tokens"] += answer.prompt_tokens
            u["completion_tokens"] += answer.completion_tokens
            if answer.cost_usd is None:
                u["unknown_cost_calls"] += 1
            else:
                u["cost_usd"] += answer.cost_usd

    def usage(self) -> dict[str, float]:
        """Spend of this client so far (USAGE_FIELDS): paid answers, tokens, dollars, answers of unknown price, cache
        hits and the dollars they saved. Totals; take differences of two snapshots for a step or a batch."""
        with self._lock:
            return dict(self._usage)

    def call_messages(self, messages: list[dict[str, Any]]) -> bool:
        """Whether these messages would reach the provider (False when the response cache holds their answer)."""
        if self.cache is None:
            return True
        return self.cache.get(cache_key(self.cfg.model, self.cfg.api_base, messages, self.decoding_params())) is None

    def project(self, batch: Sequence[list[dict[str, Any]]], *, completion_tokens: int | None = None,
                skip_cached: bool = True) -> float | None:
        """Dollars the calls of `batch` would cost at most: prompt tokens measured (s3core.pricing.count_prompt_tokens),
        each completion at `completion_tokens` (default: the max_tokens bound); answers already in the cache cost
        nothing. None when the price is unknown."""
        if self.price is None:
            return None
        if self.price.input_per_mtok == 0 and self.price.output_per_mtok == 0:
            return 0.0
        out_tokens = self.cfg.max_tokens if completion_tokens is None else completion_tokens
        total = 0.0
        for messages in batch:
            if skip_cached and not self.call_messages(messages):
                continue
            total += self.price.cost(count_prompt_tokens(self.cfg.model, messages), out_tokens)
        return total

    def stats(self) -> dict[str, Any]:
        """Calls, retries, failures by error type, cache hits/misses of this client."""
        with self._lock:
            counts = dict(self._counts)
        out: dict[str, Any] = {
            "requests": counts.pop("requests", 0),
            "provider_calls": counts.pop("provider_calls", 0),
            "retries": counts.pop("retries", 0),
            "succeeded": counts.pop("succeeded", 0),
            "failed": counts.pop("failed", 0),
            "deduplicated": counts.pop("deduplicated", 0),
            "errors": {k.removeprefix("error:"): v for k, v in sorted(counts.items()) if k.startswith("error:")},
        }
        if self.cache is not None:
            out["cache"] = self.cache.stats()
        return out

    # ------------------------------------------------------------------ calling

    def decoding_params(self) -> dict[str, Any]:
        """The decoding parameters that change an answer (part of the cache key and of run records)."""
        p: dict[str, Any] = {"temperature": self.cfg.temperature, "max_tokens": self.cfg.max_tokens}
        if self.cfg.seed is not None:
            p["seed"] = self.cfg.seed
        return p

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if _is_local(self.cfg.model):
            with _LOCAL_SEMS_LOCK:
                per_loop = _LOCAL_SEMS.setdefault(loop, {})
                return per_loop.setdefault(self.cfg.model, asyncio.Semaphore(1))
        if self._sem is None or self._sem_loop is not loop:
            self._sem = asyncio.Semaphore(self.cfg.concurrency)
            self._sem_loop = loop
        return self._sem

    def _kwargs(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "model": self.cfg.model,
            "messages": messages,
            **self.decoding_params(),
            "timeout": self.cfg.timeout_s,
            "num_retries": 0,  # we retry ourselves, on typed errors only
            "max_retries": 0,  # ...and the OpenAI SDK must not retry underneath us either
        }
        if self.cfg.api_base:
            kw["api_base"] = self.cfg.api_base
        if self._api_key is not None:
            kw["api_key"] = self._api_key
        return kw

    def _deadline_s(self) -> float:
        """Our outer deadline. The request timeout itself is litellm's (`timeout=`, it starts when the HTTP request
        does); this safety net also covers providers that ignore it and litellm's slow first-call setup."""
        return self.cfg.timeout_s + max(self.deadline_grace_s, 0.5 * self.cfg.timeout_s)

    async def _call(self, kwargs: dict[str, Any]) -> Any:
        return await self._completion_fn(**kwargs)

    def _cost(self, response: Any, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The price of this response from its usage (self.price), else litellm's own figure, None if unknown."""
        if self.price is not None:
            return self.price.cost(prompt_tokens, completion_tokens)
        hidden = getattr(response, "_hidden_params", None)
        cost = hidden.get("response_cost") if isinstance(hidden, dict) else getattr(hidden, "response_cost", None)
        return float(cost) if isinstance(cost, int | float) else None

    async def complete(self, messages: list[dict[str, Any]]) -> Answer:
        """One chat call: cache lookup, then up to 1 + max_retries provider calls. Never raises UpstreamError."""
        self._count("requests")
        key = None
        if self.cache is not None:
            key = cache_key(self.cfg.model, self.cfg.api_base, messages, self.decoding_params())
            hit = self.cache.get(key)
            if hit is not None:
                self._count("succeeded")
                cached = Answer(**{**hit, "cached": True, "latency_s": 0.0, "attempts": 0})
                self._account(cached)
                return cached
        kwargs = self._kwargs(messages)
        t0 = time.perf_counter()
        attempts = 0
        last: UpstreamError | None = None
        for attempt in range(self.cfg.max_retries + 1):
            if attempt:
                self._count("retries")
                delay = self.cfg.backoff_s * (2 ** (attempt - 1)) * (0.5 + random.random())
                await asyncio.sleep(delay)
            attempts += 1
            self._count("provider_calls")
            try:
                async with self._semaphore():
                    response = await asyncio.wait_for(self._call(kwargs), timeout=self._deadline_s())
            except Exception as exc:
                err = map_exception(exc)
                if err is None:
                    raise  # not a provider error: a bug, let it surface
                last = err
                self._count(f"error:{type(err).__name__}")
                if not err.retryable:
                    break
                continue
            answer = self._answer_from(response, time.perf_counter() - t0, attempts)
            if not answer.ok:  # a 200 without content: missing, and never cached
                self._count(f"error:{answer.error_type}")
                self._count("failed")
                return answer
            self._count("succeeded")
            self._account(answer)
            if self.cache is not None and key is not None:
                self.cache.put(
                    key,
                    answer.model_dump(include={"text", "prompt_tokens", "completion_tokens", "cost_usd", "model"}),
                    model=self.cfg.model,
                )
            return answer
        self._count("failed")
        assert last is not None
        return Answer(
            error=redact(str(last)),
            error_type=type(last).__name__,
            latency_s=time.perf_counter() - t0,
            attempts=attempts,
            model=self.cfg.model,
        )

    def _answer_from(self, response: Any, latency: float, attempts: int) -> Answer:
        try:
            content = response.choices[0].message.content
        except (AttributeError, IndexError, KeyError, TypeError):
            content = None
        usage = getattr(response, "usage", None)
        if content is None:
            return Answer(error="the provider returned no message content", error_type="EmptyResponse",
                          latency_s=latency, attempts=attempts, model=self.cfg.model)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        return Answer(
            text=str(content).strip(),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_s=latency,
            cost_usd=self._cost(response, prompt_tokens, completion_tokens),
            attempts=attempts,
            model=self.cfg.model,
        )

    async def complete_many(self, batch: Sequence[list[dict[str, Any]]]) -> list[Answer]:
        """Many calls at once (bounded by cfg.concurrency), answers in input order.

        Identical calls in one batch (same messages, same decoding) are made once when their answers are
        interchangeable, i.e. greedy decoding (temperature 0) or a response cache, which would serve the repeats anyway:
        a GRPO group's rollouts often end with the same context. The repeats come back like cache hits (cached=True,
        no latency, no attempt) and are counted as `deduplicated`; a failed call is missing for each of them."""
        batch = list(batch)
        unique, slots = batch, list(range(len(batch)))
        if len(batch) > 1 and (self.cfg.temperature == 0 or self.cache is not None):
            first: dict[str, int] = {}
            unique, slots = [], []
            decoding = self.decoding_params()
            for messages in batch:
                key = cache_key(self.cfg.model, self.cfg.api_base, messages, decoding)
                if key not in first:
                    first[key] = len(unique)
                    unique.append(messages)
                slots.append(first[key])
        if self.cfg.processes > 1 and len(unique) > 1:
            answers = await self._complete_in_processes(unique)
        else:
            answers = list(await asyncio.gather(*(self.complete(m) for m in unique)))
        if len(unique) == len(batch):
            return answers
        self._count("requests", len(batch) - len(unique))
        self._count("deduplicated", len(batch) - len(unique))
        out: list[Answer] = []
        seen: set[int] = set()
        for j in slots:
            a = answers[j]
            if j in seen:  # a repeat: served from the first call's answer
                a = a.model_copy(update={"cached": a.ok, "latency_s": 0.0, "attempts": 0})
                if not a.ok:
                    self._count("failed")
                else:
                    self._count("succeeded")
                    self._account(a)
            seen.add(j)
            out.append(a)
        return out

    async def _complete_in_processes(self, batch: list[list[dict[str, Any]]]) -> list[Answer]:
        """Round-robin shards of `batch` answered by the client worker processes (generator_adapters/procpool.py)."""
        from concurrent.futures.process import BrokenProcessPool

        from generator_adapters.procpool import make_pool, worker_config

        with self._lock:
            if self._pool is None:
                self._pool = make_pool(self.cfg.processes)
            pool = self._pool
        n = min(self.cfg.processes, len(batch))
        shards = [list(range(i, len(batch), n)) for i in range(n)]
        cfg_json = worker_config(self.cfg)
        loop = asyncio.get_running_loop()
        futures = [loop.run_in_executor(pool, run_shard, cfg_json, [batch[j] for j in idx]) for idx in shards]
        results = await asyncio.gather(*futures, return_exceptions=True)
        out: list[Answer | None] = [None] * len(batch)
        for idx, res in zip(shards, results, strict=True):
            if isinstance(res, BrokenProcessPool):
                self._count("requests", len(idx))
                self._count("failed", len(idx))
                self._count("error:WorkerDied", len(idx))
                with self._lock:
                    self._pool = None  # a fresh pool next time
                for j in idx:
                    out[j] = Answer(error=f"a client worker process died: {res}", error_type="WorkerDied",
                                    model=self.cfg.model)
                continue
            if isinstance(res, BaseException):
                raise res
            for key, v in res["counts"].items():
                self._count(key, v)
            if self.cache is not None:
                self.cache.add_counts(res["cache"])
            for j, a in zip(idx, res["answers"], strict=True):
                answer = Answer(**a)
                out[j] = answer
                self._account(answer)
        return [a for a in out if a is not None]

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if self.cache is not None:
            self.cache.close()


_CLIENTS: dict[str, LLMClient] = {}  # a worker process's clients, one per call settings (procpool's workers)
_LOOP: asyncio.AbstractEventLoop | None = None


def run_shard(cfg_json: str, batch: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """In a client worker process (generator_adapters/procpool.py): answer one shard of calls; return the answers and the counts they added (picklable)."""
    global _LOOP
    client = _CLIENTS.get(cfg_json)
    if client is None:
        client = _CLIENTS[cfg_json] = LLMClient(LLMCallConfig.model_validate_json(cfg_json))
    if _LOOP is None or _LOOP.is_closed():
        _LOOP = asyncio.new_event_loop()
    answers = _LOOP.run_until_complete(client.complete_many(batch))
    return {
        "answers": [a.model_dump() for a in answers],
        "counts": client.take_counts(),
        "cache": client.cache.take_counts() if client.cache is not None else {},
    }


class ClientOwner:
    """What Generator and Judge both expose of the LLMClient they own: stats, the cache, and close."""

    client: LLMClient

    def stats(self) -> dict[str, Any]:
        """Requests, provider calls, retries, failures by error type, and cache hits/misses."""
        return self.client.stats()

    @property
    def cache(self) -> ResponseCache | None:
        return self.client.cache

    def cache_stats(self) -> dict[str, Any]:
        """The response cache's hits / misses / writes through this object ({} when caching is off)."""
        return self.client.cache.stats() if self.client.cache is not None else {}

    def close(self) -> None:
        self.client.close()
