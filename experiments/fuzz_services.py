"""Fuzz both services through their OpenAPI schemas with schemathesis (hypothesis-driven), on loopback.

    nice -n 10 .venv/bin/python benchmarks/fuzz_services.py [--examples 150] [--out benchmarks/results/fuzz_services.md]

Targets: `s3 serve-retriever`'s app (/retrieve, /documents, /health) and `s3 serve`'s app (/search, /retrieve,
/documents, /health), each on a real uvicorn server on 127.0.0.1 with the [service] limits and bearer auth on, over a
real bm25s index of ../shared/data/flashrag_sample and, for /search, the real searcher loop with a scripted policy (a
healthy upstream). Every operation is fuzzed with schema-valid (positive) and schema-invalid (negative) cases;
`--examples` is per operation and mode, so the total is examples x operations x 2.

Counted per target: requests, statuses, plain 500s (any 5xx without our typed JSON body), errors without a typed JSON
body, and schema violations (schemathesis' response checks: status code, content type, headers, response schema,
negative data accepted; a schema-valid request refused because of a runtime limit the schema cannot express, such as
service.max_query_chars, is counted as `rejected by a limit`, not as a violation). The test suite runs the same
harness with a small budget (tests/integration/test_fuzz_services.py); exit 1 if anything is found.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searcher.serving import is_typed_error

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("S3_SHARED_DATA", ROOT.parent / "shared" / "data")) / "flashrag_sample"
TOKEN_ENV = "S3_FUZZ_TOKEN"
# our limits the schema cannot state (they come from [service] at run time): a 422 naming one is a refusal by design
LIMIT_WORDS = ("service.max_", "searcher.max_select", "response_too_large", "must not be empty", "is empty",
               "topk must be positive")


@dataclass
class Report:
    target: str
    operations: list[str] = field(default_factory=list)
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    plain_5xx: list[str] = field(default_factory=list)
    untyped_errors: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    limit_refusals: int = 0
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not (self.plain_5xx or self.untyped_errors or self.violations or any(s >= 500 for s in self.statuses))

    def line(self) -> str:
        st = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        return (f"| {self.target} | {len(self.operations)} | {self.requests} | {st} | {len(self.plain_5xx)} | "
                f"{sum(v for k, v in self.statuses.items() if k >= 500)} | {len(self.untyped_errors)} | "
                f"{len(self.violations)} | {self.limit_refusals} | {self.seconds:.0f} |")


def fuzz(target: str, app: Any, base_url: str, examples: int, headers: dict[str, str], seed: int = 0) -> Report:
    """Every operation of `app`'s OpenAPI schema, positive and negative cases, against the server at base_url."""
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.core.result import Err

    report = Report(target)
    schema = schemathesis.openapi.from_dict(app.openapi())
    t0 = time.perf_counter()
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # an operation schemathesis cannot read: our schema is wrong, say which
            raise result.err()
        operation = result.ok()
        report.operations.append(f"{operation.method.upper()} {operation.path}")
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz_one(report, operation, mode, examples, base_url, headers)
    report.seconds = time.perf_counter() - t0
    return report


def _fuzz_one(report: Report, operation: Any, mode: Any, examples: int, base_url: str, headers: dict[str, str]) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=base_url, headers=headers, timeout=60)
        report.requests += 1
        report.statuses[response.status_code] += 1
        where = f"{case.method} {case.path} [{mode.value}] -> {response.status_code}"
        if response.status_code >= 400 and not is_typed_error(response):
            (report.plain_5xx if response.status_code >= 500 else report.untyped_errors).append(
                f"{where}: {response.text[:200]!r}")
        if (mode == GenerationMode.POSITIVE and response.status_code == 422
                and any(w in response.text for w in LIMIT_WORDS)):
            report.limit_refusals += 1
            return
        try:
            case.validate_response(response, headers=headers)
        except (Exception, BaseExceptionGroup) as e:  # a FailureGroup naming every failed check
            report.violations.append(f"{where}: {str(e).strip().splitlines()[0][:300]}")

    try:
        run()
    except Unsatisfiable:  # nothing to get wrong (GET /health has no parameters): no negative case exists
        if mode == GenerationMode.POSITIVE:
            raise


@contextlib.contextmanager
def targets(index_dir: Path) -> Iterator[list[tuple[str, Any, str]]]:
    """Both services on loopback: (name, app, base_url); bearer auth on, token in $S3_FUZZ_TOKEN."""
    from generator_adapters.testing import s3_reply
    from searcher.build import build_retriever, build_searcher
    from searcher.config import RetrieverConfig, SearcherConfig, ServiceConfig
    from searcher.policy import ScriptedPolicy
    from searcher.retrieval import build_index
    from searcher.retrieval.server import create_retrieve_app, serve_in_thread
    from searcher.service import create_search_app

    if not (index_dir / "index.json").is_file():
        build_index(DATA / "sample_data.jsonl", "bm25", index_dir)
    os.environ.setdefault(TOKEN_ENV, "fuzz-token-1234567")
    service = ServiceConfig(auth_token_env=TOKEN_ENV, request_timeout_s=30, batch_window_ms=1, openapi=False)
    retriever = build_retriever(RetrieverConfig(), index_dir)
    scfg = SearcherConfig(k=3, max_turns=1, max_select=3)
    searcher = build_searcher(scfg, retriever, ScriptedPolicy(lambda p, _i: s3_reply(p)), k0=3)
    retrieve_app = create_retrieve_app(retriever, service)
    search_app = create_search_app(searcher, retriever, service, searcher_cfg=scfg, index=str(index_dir))
    with serve_in_thread(retrieve_app, service_cfg=service) as r_url, \
            serve_in_thread(search_app, service_cfg=service) as s_url:
        yield [("s3 serve-retriever", retrieve_app, r_url), ("s3 serve", search_app, s_url)]


def markdown(reports: list[Report], examples: int) -> str:
    head = ("| service | operations | requests | statuses | plain 5xx | any 5xx | untyped 4xx | schema violations "
            "| refused by a limit | s |")
    lines = [
        "# Fuzzing the services' OpenAPI schemas (schemathesis)", "",
        f"`benchmarks/fuzz_services.py --examples {examples}`: every operation x (positive, negative) x {examples} "
        "hypothesis examples, real uvicorn on 127.0.0.1 with the [service] limits and bearer auth, a real bm25s index "
        "of flashrag_sample (1,000 passages) and, for /search, the real searcher loop with a scripted policy "
        "(a healthy upstream).", "", head, "| " + " | ".join("---" for _ in head.split("|")[1:-1]) + " |",
    ]
    lines += [r.line() for r in reports]
    lines += ["", "Operations: " + "; ".join(f"{r.target}: {', '.join(r.operations)}" for r in reports)]
    for r in reports:
        for kind, items in (("plain 5xx", r.plain_5xx), ("untyped errors", r.untyped_errors),
                            ("schema violations", r.violations)):
            if items:
                lines += ["", f"## {r.target}: {kind} ({len(items)})", "", *[f"- {x}" for x in items[:20]]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--examples", type=int, default=150, help="hypothesis examples per operation and mode")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown summary here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="s3-fuzz-") as tmp, targets(Path(tmp) / "bm25") as services:
        headers = {"Authorization": f"Bearer {os.environ[TOKEN_ENV]}"}
        reports = [fuzz(name, app, url, args.examples, headers) for name, app, url in services]
    text = markdown(reports, args.examples)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0 if all(r.clean for r in reports) else 1

