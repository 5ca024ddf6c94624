"""Plug the s3 searcher into existing RAG frameworks (optional extra `serve`).

- `searcher.integrations.client`: `LocalSearch` (Python API) and `SearchClient` (HTTP `s3 serve`), one response shape.
- `searcher.integrations.langchain`: `S3Retriever`, a LangChain `BaseRetriever` (needs langchain-core).
- `searcher.integrations.llamaindex`: `S3LlamaRetriever`, a LlamaIndex `BaseRetriever` (needs llama-index-core).
"""

from __future__ import annotations

from s3core.errors import S3Error


class MissingExtraError(S3Error, ImportError):
    """An optional dependency of an integration is not installed (the message says what to install)."""


def missing_extra(package: str, module: str, err: ImportError) -> MissingExtraError:
    return MissingExtraError(
        f"{module} needs {package}, which is not installed ({err}); "
        f"install it with: pip install 's3-search-agents[serve]'  (or: pip install {package})"
    )


__all__ = ["MissingExtraError", "missing_extra"]
