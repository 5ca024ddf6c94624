"""Both services fuzzed through their OpenAPI schemas with schemathesis (every operation, schema-valid and invalid
cases, hypothesis-driven, on loopback) with a small example budget; the longer run is benchmarks/fuzz_services.py,
whose harness this test runs. 0 plain 500s, 0 5xx at all with a healthy upstream, 0 errors without the typed JSON
body, 0 schema violations."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_services.py"


def _harness() -> object:
    spec = importlib.util.spec_from_file_location("fuzz_services", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_both_services_survive_schemathesis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("schemathesis")
    fz: object = _harness()
    monkeypatch.setenv(fz.TOKEN_ENV, "fuzz-token-in-the-suite-1")  # type: ignore[attr-defined]
    headers = {"Authorization": "Bearer fuzz-token-in-the-suite-1"}
    with fz.targets(tmp_path / "bm25") as services:  # type: ignore[attr-defined]
        reports = [fz.fuzz(name, app, url, 12, headers) for name, app, url in services]  # type: ignore[attr-defined]
    for r in reports:
        assert len(r.operations) >= 3 and r.requests > 30 * len(r.operations) // 2
        assert r.statuses[200] > 0  # the success path was reached too
        assert r.clean, fz.markdown(reports, 12)  # type: ignore[attr-defined]
    assert {op for r in reports for op in r.operations} >= {"POST /search", "POST /retrieve", "POST /documents",
                                                           "GET /health"}
