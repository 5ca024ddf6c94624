"""HTTP client of the Search-R1 `/retrieve` contract (any compatible server, ours or upstream).

    POST {url}/retrieve {"queries": [...], "topk": k, "return_scores": true}
      -> {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}

Timeouts, retries with exponential backoff on 5xx and connection errors, and one clear RetrievalError after the
last try. A 4xx answer is not retried (the request itself is wrong) and its detail is reported.
`get(ids)` and `len()` use this toolkit's extension endpoints (`POST /documents`, `GET /health`); an upstream
server without them gives a clear RetrievalError.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from s3core.credentials import bearer_for, redact
from s3core.errors import RetrievalError
from s3core.types import Document
from searcher.config import RemoteConfig
from searcher.retrieval.base import check_k, check_queries


class RemoteRetriever:
    backend = "remote"

    def __init__(self, cfg: RemoteConfig, transport: httpx.BaseTransport | None = None) -> None:
        if not cfg.url:
            raise RetrievalError("retriever.remote.url is not set: give the base URL of a /retrieve server")
        self.cfg = cfg
        self.url = cfg.url.rstrip("/")
        auth = bearer_for(cfg.auth_token_env, self.url, setting="retriever.remote.auth_token_env")
        # no redirects: the token and the queries go to `url` and nowhere else
        self._client = httpx.Client(timeout=cfg.timeout_s, transport=transport, auth=auth, follow_redirects=False)

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        url = self.url + path
        tries = self.cfg.max_retries + 1
        last = ""
        for attempt in range(tries):
            if attempt:
                time.sleep(self.cfg.backoff_s * (2 ** (attempt - 1)))
            try:
                r = self._client.request(method, url, json=payload)
            except httpx.TimeoutException:
                last = f"timed out after {self.cfg.timeout_s:g}s"
                continue
            except httpx.TransportError as e:
                last = redact(f"connection error ({type(e).__name__}: {e})")
                continue
            if r.status_code >= 500:
                last = f"HTTP {r.status_code}: {redact(r.text)[:200]}"
                continue
            if r.status_code >= 400:
                try:
                    detail = r.json().get("detail", r.text)
                except (json.JSONDecodeError, AttributeError):
                    detail = r.text
                raise RetrievalError(
                    f"{method} {url} rejected the request (HTTP {r.status_code}): {redact(str(detail))[:300]}"
                )
            try:
                return r.json()
            except json.JSONDecodeError:
                raise RetrievalError(f"{method} {url} answered with invalid JSON: {redact(r.text)[:200]!r}") from None
        raise RetrievalError(f"{method} {url} failed after {tries} tries: {last}")

    def search(self, queries: list[str], k: int) -> list[list[Document]]:
        qs = check_queries(queries)
        kk = check_k(k)
        body = self._request("POST", "/retrieve", {"queries": qs, "topk": kk, "return_scores": True})
        result = body.get("result") if isinstance(body, dict) else None
        if not isinstance(result, list) or len(result) != len(qs):
            raise RetrievalError(f"{self.url}/retrieve: expected 'result' with {len(qs)} lists, got {str(body)[:200]}")
        out: list[list[Document]] = []
        for hits in result:
            docs: list[Document] = []
            for h in hits:
                doc = h.get("document", h) if isinstance(h, dict) else None
                if not isinstance(doc, dict) or "contents" not in doc:
                    raise RetrievalError(f"{self.url}/retrieve: malformed hit {str(h)[:200]}")
                score = h.get("score") if isinstance(h, dict) else None
                docs.append(Document.from_contents(str(doc.get("id", "")), doc["contents"], score=score))
            out.append(docs)
        return out

    def get(self, ids: list[str]) -> list[Document]:
        if isinstance(ids, str):
            raise RetrievalError("ids must be a list of strings, got a single string")
        body = self._request("POST", "/documents", {"ids": list(ids)})
        docs = body.get("documents") if isinstance(body, dict) else None
        if not isinstance(docs, list):
            raise RetrievalError(f"{self.url}/documents: malformed answer {str(body)[:200]}")
        return [Document.from_contents(str(d["id"]), d["contents"]) for d in docs]

    def __len__(self) -> int:
        body = self._request("GET", "/health")
        n = body.get("documents") if isinstance(body, dict) else None
        if not isinstance(n, int):
            raise RetrievalError(f"{self.url}/health does not report a document count")
        return n

    def save(self, path: str | Path) -> Path:
        """Write an index directory that points at this server (backend 'remote', url)."""
        from searcher.retrieval.store import IndexManifest

        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        IndexManifest(backend="remote", params={"url": self.url, "timeout_s": self.cfg.timeout_s}, doc_count=0).write(d)
        return d

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RemoteRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten close() must not leak sockets
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()

    def __repr__(self) -> str:
        return f"RemoteRetriever(url={self.url!r})"
