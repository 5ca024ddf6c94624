"""A durable sqlite cache of LLM responses, shareable across runs, processes and machines (one file).

Keyed on the sha256 of the canonical JSON of (model, api_base, messages, decoding parameters), so a changed prompt,
model, endpoint or decoding setting is a miss. Only successful responses are stored: errors are never cached.
Safe under concurrent writers: WAL journal, a busy timeout, one connection per thread, `INSERT OR REPLACE`
(two writers racing on one key store the same value). Hits and misses are counted per cache object (`stats()`).

    >>> import tempfile, os
    >>> c = ResponseCache(os.path.join(tempfile.mkdtemp(), "c.sqlite"))
    >>> k = cache_key("local/x", None, [{"role": "user", "content": "hi"}], {"temperature": 0.0})
    >>> c.get(k) is None
    True
    >>> c.put(k, {"text": "hello"}, model="local/x")
    >>> c.get(k)
    {'text': 'hello'}
    >>> c.stats()["hits"], c.stats()["misses"]
    (1, 1)
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from s3core.errors import S3Error

__all__ = ["CacheError", "ResponseCache", "cache_key"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    value TEXT NOT NULL,
    created REAL NOT NULL
)
"""


class CacheError(S3Error):
    """The response cache file cannot be opened or is not an s3 cache."""


def cache_key(model: str, api_base: str | None, messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
    """The cache key of one call: sha256 over canonical JSON (sorted keys), so dict order does not matter."""
    payload = {"model": model, "api_base": api_base, "messages": messages, "params": params}
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """sqlite-backed `key -> JSON value` store with hit/miss counters."""

    def __init__(self, path: str | Path, busy_timeout_s: float = 60.0) -> None:
        self.path = Path(path).expanduser()
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._writes = 0
        self._all: list[sqlite3.Connection] = []
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = self._conn()
            with conn:
                conn.execute(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise CacheError(f"cannot open the response cache {self.path}: {e}") from None

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                str(self.path), timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            # WAL lets readers run alongside one writer; switching needs a write lock, so retry it when busy.
            for _ in range(50):
                try:
                    conn.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError:
                    time.sleep(0.05)
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def get(self, key: str) -> Any | None:
        """The stored value for `key`, or None (counts a hit or a miss)."""
        row = self._conn().execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        with self._lock:
            if row is None:
                self._misses += 1
            else:
                self._hits += 1
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value: Any, model: str = "") -> None:
        """Store a successful response (never call this with an error)."""
        blob = json.dumps(value, ensure_ascii=False)
        conn = self._conn()
        with conn:
            conn.execute(
                "INSERT OR REPLACE INTO responses(key, model, value, created) VALUES (?, ?, ?, ?)",
                (key, model, blob, time.time()),
            )
        with self._lock:
            self._writes += 1

    def take_counts(self) -> dict[str, int]:
        """Hits, misses and writes since the last call, then zero them (a client worker process reports these)."""
        with self._lock:
            out = {"hits": self._hits, "misses": self._misses, "writes": self._writes}
            self._hits = self._misses = self._writes = 0
        return out

    def add_counts(self, counts: dict[str, int]) -> None:
        """Add hits, misses and writes made through the same file by a client worker process."""
        with self._lock:
            self._hits += int(counts.get("hits", 0))
            self._misses += int(counts.get("misses", 0))
            self._writes += int(counts.get("writes", 0))

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def stats(self) -> dict[str, Any]:
        """Hits, misses and writes made through this object, and the file's entry count."""
        with self._lock:
            hits, misses, writes = self._hits, self._misses, self._writes
        total = hits + misses
        return {
            "path": str(self.path),
            "hits": hits,
            "misses": misses,
            "writes": writes,
            "hit_rate": (hits / total) if total else None,
            "entries": len(self),
        }

    def close(self) -> None:
        """Close every connection this object opened (one per thread that used it)."""
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
