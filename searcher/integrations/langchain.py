"""A LangChain retriever backed by the s3 searcher, in process or over HTTP.

    from searcher.integrations.langchain import S3Retriever
    retriever = S3Retriever(searcher=s3_searcher)                 # Python API (S3Searcher)
    retriever = S3Retriever(url="http://127.0.0.1:8000")          # a running `s3 serve`
    chain = retriever | RunnableLambda(format_docs) | prompt | llm

Each returned `Document` holds the passage text as `page_content` and `metadata = {"id", "title", "score", "turn"}`
(turn = the search turn that admitted it; 0 = begin-with-search), + "original_id" where `s3 data prepare` had to
change the corpus's id (a duplicate or unusable one), in the searcher's order (D_s3, turn order).
Needs the optional `langchain-core` (extra `serve`).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, PrivateAttr

from searcher.integrations import missing_extra
from searcher.integrations.client import SearchBackend, as_backend
from searcher.service import SearchResponse

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document as LCDocument
    from langchain_core.retrievers import BaseRetriever
except ImportError as _err:  # pragma: no cover - exercised only without the extra
    raise missing_extra("langchain-core", "searcher.integrations.langchain", _err) from _err

__all__ = ["S3Retriever", "to_langchain_documents"]


def to_langchain_documents(response: SearchResponse) -> list[LCDocument]:
    """A /search response -> LangChain Documents with metadata (id, title, score, turn; original_id where set)."""
    return [
        LCDocument(
            id=d.id,
            page_content=d.text,
            metadata={"id": d.id, "title": d.title, "score": d.score, "turn": d.turn,
                      **({"original_id": d.original_id} if d.original_id is not None else {})},
        )
        for d in response.documents
    ]


class S3Retriever(BaseRetriever):
    """LangChain `BaseRetriever` over the s3 searcher: give `searcher=` (an S3Searcher) or `url=` (`s3 serve`).

    `k` / `max_turns` override the searcher's per-turn k and turn budget (None = the searcher's defaults)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    searcher: Any = None
    url: str | None = None
    k: int | None = None
    max_turns: int | None = None
    timeout_s: float = 120.0
    auth_token_env: str | None = None  # with url=: the variable holding the server's bearer token

    _backend: SearchBackend | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        self._backend = as_backend(searcher=self.searcher, url=self.url, timeout_s=self.timeout_s,
                                       auth_token_env=self.auth_token_env)

    @property
    def backend(self) -> SearchBackend:
        if self._backend is None:
            self._backend = as_backend(searcher=self.searcher, url=self.url, timeout_s=self.timeout_s,
                                       auth_token_env=self.auth_token_env)
        return self._backend

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[LCDocument]:
        return to_langchain_documents(self.backend.search(query, k=self.k, max_turns=self.max_turns))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[LCDocument]:
        return to_langchain_documents(await self.backend.asearch(query, k=self.k, max_turns=self.max_turns))
