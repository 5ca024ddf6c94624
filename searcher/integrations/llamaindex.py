"""A LlamaIndex retriever backed by the s3 searcher, in process or over HTTP.

    from searcher.integrations.llamaindex import S3LlamaRetriever
    retriever = S3LlamaRetriever(searcher=s3_searcher)            # Python API (S3Searcher)
    retriever = S3LlamaRetriever(url="http://127.0.0.1:8000")     # a running `s3 serve`
    engine = RetrieverQueryEngine.from_args(retriever, llm=llm)

Returns `NodeWithScore` whose `TextNode` holds the passage text, `id_` = the document id and
`metadata = {"id", "title", "score", "turn"}` (only the title is shown to the LLM). The node score is the retrieval
score (None when the retriever gave none). Needs the optional `llama-index-core` (extra `serve`).
"""

from __future__ import annotations

from typing import Any

from searcher.integrations import missing_extra
from searcher.integrations.client import SearchBackend, as_backend
from searcher.service import SearchResponse

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as _err:  # pragma: no cover - exercised only without the extra
    raise missing_extra("llama-index-core", "searcher.integrations.llamaindex", _err) from _err

__all__ = ["S3LlamaRetriever", "to_nodes"]

_HIDDEN_KEYS = ["id", "score", "turn"]


def to_nodes(response: SearchResponse) -> list[NodeWithScore]:
    """A /search response -> LlamaIndex nodes with metadata (id, title, score, turn)."""
    nodes = []
    for d in response.documents:
        node = TextNode(
            id_=d.id,
            text=d.text,
            metadata={"id": d.id, "title": d.title, "score": d.score, "turn": d.turn},
            excluded_llm_metadata_keys=list(_HIDDEN_KEYS),
            excluded_embed_metadata_keys=list(_HIDDEN_KEYS),
        )
        nodes.append(NodeWithScore(node=node, score=d.score))
    return nodes


class S3LlamaRetriever(BaseRetriever):
    """LlamaIndex `BaseRetriever` over the s3 searcher: give `searcher=` (an S3Searcher) or `url=` (`s3 serve`)."""

    def __init__(
        self,
        searcher: Any = None,
        url: str | None = None,
        k: int | None = None,
        max_turns: int | None = None,
        timeout_s: float = 120.0,
        auth_token_env: str | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.backend: SearchBackend = as_backend(searcher=searcher, url=url, timeout_s=timeout_s,
                                                   auth_token_env=auth_token_env)
        self.k = k
        self.max_turns = max_turns
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return to_nodes(self.backend.search(query_bundle.query_str, k=self.k, max_turns=self.max_turns))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return to_nodes(await self.backend.asearch(query_bundle.query_str, k=self.k, max_turns=self.max_turns))
