"""A real LangChain chain and a real LlamaIndex query pipeline retrieve through the s3 searcher, over the Python API
(S3Searcher in process) and over HTTP (the live /search server), with the real SmolLM2 policy and bm25s index of
tests/integration/test_service_http.py (shared session fixtures)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_service_http import QUESTION, LiveServer, shared_index, shared_searcher, small_config

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def real_searcher(shared_data: Path) -> Any:
    return shared_searcher(shared_data)


@pytest.fixture(scope="module")
def live_server(real_searcher: Any, shared_data: Path) -> Iterator[LiveServer]:
    from searcher.service import create_search_app

    cfg = small_config(shared_index(shared_data))
    app = create_search_app(real_searcher, real_searcher.retriever, cfg.service, searcher_cfg=cfg.searcher)
    with LiveServer(app) as srv:
        yield srv


def _expected_ids(real_searcher: Any) -> list[str]:
    # begin-with-search window: the selection is a subset of the bm25 top-3 of the question
    return [d.id for d in real_searcher.retriever.search([QUESTION], 3)[0]]


@pytest.mark.parametrize("via", ["python", "http"])
def test_langchain_chain(via: str, real_searcher: Any, live_server: Any) -> None:
    from langchain_core.documents import Document
    from langchain_core.runnables import RunnableLambda

    from searcher.integrations.langchain import S3Retriever

    retriever = S3Retriever(searcher=real_searcher) if via == "python" else S3Retriever(url=live_server.url)

    def format_docs(docs: list[Document]) -> str:
        return "\n\n".join(f"[{d.metadata['title']}] {d.page_content}" for d in docs)

    chain = retriever | RunnableLambda(format_docs)
    context = chain.invoke(QUESTION)
    docs = retriever.invoke(QUESTION)
    assert docs and all(isinstance(d, Document) for d in docs)
    top3 = _expected_ids(real_searcher)
    for d in docs:
        assert set(d.metadata) == {"id", "title", "score", "turn"}
        assert d.id == d.metadata["id"] and d.metadata["id"] in top3
        assert d.metadata["turn"] == 0 and d.metadata["score"] > 0 and d.page_content
        assert f"[{d.metadata['title']}] {d.page_content}" in context
    # per-retriever settings reach the searcher (k = documents per turn)
    narrow = S3Retriever(searcher=real_searcher, k=3, max_turns=0) if via == "python" else S3Retriever(
        url=live_server.url, k=3, max_turns=0)
    assert [d.id for d in narrow.invoke(QUESTION)] == [d.id for d in docs]


@pytest.mark.parametrize("via", ["python", "http"])
def test_langchain_async(via: str, real_searcher: Any, live_server: Any) -> None:
    import asyncio

    from searcher.integrations.langchain import S3Retriever

    retriever = S3Retriever(searcher=real_searcher) if via == "python" else S3Retriever(url=live_server.url)
    docs = asyncio.run(retriever.ainvoke(QUESTION))
    assert docs and all(d.metadata["id"] in _expected_ids(real_searcher) for d in docs)


@pytest.mark.parametrize("via", ["python", "http"])
def test_llamaindex_query_engine(via: str, real_searcher: Any, live_server: Any) -> None:
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.schema import NodeWithScore

    from searcher.integrations.llamaindex import S3LlamaRetriever

    retriever = S3LlamaRetriever(searcher=real_searcher) if via == "python" else S3LlamaRetriever(url=live_server.url)
    nodes = retriever.retrieve(QUESTION)
    assert nodes and all(isinstance(n, NodeWithScore) for n in nodes)
    top3 = _expected_ids(real_searcher)
    for n in nodes:
        assert n.node.node_id == n.node.metadata["id"] and n.node.metadata["id"] in top3
        assert n.score is not None and n.score > 0 and n.node.metadata["turn"] == 0
        # the LLM sees the title, not the bookkeeping
        llm_text = n.node.get_content(metadata_mode="llm")
        assert n.node.metadata["title"] in llm_text and "turn:" not in llm_text

    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM(max_tokens=8))
    response = engine.query(QUESTION)
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in nodes]
    assert isinstance(str(response), str)


def test_http_client_errors_are_clear(live_server: Any) -> None:
    from s3core.errors import S3Error, ServiceError
    from searcher.integrations.client import SearchClient
    from searcher.integrations.langchain import S3Retriever

    with pytest.raises(S3Error, match=r"rejected the request \(422\).*service.max_topk=100"):
        SearchClient(live_server.url).search(QUESTION, k=1000)
    with pytest.raises(ServiceError, match=r"127\.0\.0\.1:9/search"):
        S3Retriever(url="http://127.0.0.1:9", timeout_s=2).invoke(QUESTION)
    with pytest.raises(S3Error, match=r"exactly one of searcher= .* or url="):
        S3Retriever()


def test_importing_the_llamaindex_integration_prints_no_warning() -> None:
    """`import searcher.integrations.llamaindex` in a fresh interpreter with Python's default warning filters (what a
    user's script has; pytest's own filters hide this one) prints no pydantic UnsupportedFieldAttributeWarning from
    llama-index-core 0.12's own models (issue 79 defect 7)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONWARNINGS": "default"}
    proc = subprocess.run([sys.executable, "-c", "import searcher.integrations.llamaindex"], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "UnsupportedFieldAttributeWarning" not in proc.stderr and "validate_default" not in proc.stderr, proc.stderr
