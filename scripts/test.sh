#!/usr/bin/env bash
# The test command: lint (ruff on every package, the tests, benchmarks and scripts), types (mypy), then the whole
# pytest suite (unit + integration tests with real components, import layers included) with the 20 slowest tests
# listed so the budget stays visible.
set -euo pipefail
cd "$(dirname "$0")/.."
export LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check s3core s3runtime dataprep searcher generator_adapters eval training s3 experiments tests benchmarks scripts
.venv/bin/mypy
.venv/bin/python -m pytest --durations=20 "$@"
