"""Clients that misbehave on purpose, for the tests and load benchmarks of our HTTP services (searcher/serving.py's
limits), beside the code they probe (as generator_adapters/testing.py is for its package)."""

from __future__ import annotations

import socket
import time

__all__ = ["slowloris"]


def slowloris(host: str, port: int, path: str, *, line: bytes, every_s: float, limit_s: float) -> float | None:
    """A request head that never ends: `POST path`, then one header `line` every `every_s` seconds, for at most
    `limit_s`. Returns the seconds after which the server closed the connection (a send failed), None if it never
    did."""
    with socket.create_connection((host, port)) as slow:
        slow.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode())
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < limit_s:
            try:
                slow.sendall(line)
            except OSError:
                return time.perf_counter() - t0
            time.sleep(every_s)
    return None
