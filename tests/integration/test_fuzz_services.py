"""Both services fuzzed through their OpenAPI schemas with schemathesis (every operation, schema-valid and invalid
cases, hypothesis-driven, on loopback) with a small example budget; the longer run is benchmarks/fuzz_services.py,
whose harness (experiments/fuzz_services.py) this test runs. 0 plain 500s, 0 5xx at all with a healthy upstream, 0
errors without the typed JSON body, 0 schema violations."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import fuzz_services as fz

pytestmark = pytest.mark.integration


def test_both_services_survive_schemathesis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("schemathesis")
    monkeypatch.setenv(fz.TOKEN_ENV, "fuzz-token-in-the-suite-1")
    headers = {"Authorization": "Bearer fuzz-token-in-the-suite-1"}
    with fz.targets(tmp_path / "bm25") as services:
        reports = [fz.fuzz(name, app, url, 12, headers) for name, app, url in services]
    for r in reports:
        assert len(r.operations) >= 3 and r.requests > 30 * len(r.operations) // 2
        assert r.statuses[200] > 0  # the success path was reached too
        assert r.clean, fz.markdown(reports, 12)
    assert {op for r in reports for op in r.operations} >= {"POST /search", "POST /retrieve", "POST /documents",
                                                           "GET /health"}
