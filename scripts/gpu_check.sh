#!/usr/bin/env bash
# On a new GPU machine: does every GPU path of s3 work here? (~5 minutes; s3/doctor.py says what each step runs)
#   bash scripts/gpu_check.sh [OUT]           # default OUT = gpu-check; summary in OUT/summary.md and OUT/summary.json
# Each step prints PASS / FAIL / SKIP (with why) and its GPU memory; the exit status is 1 when a step failed.
set -euo pipefail
cd "$(dirname "$0")/.."
export XLA_PYTHON_CLIENT_PREALLOCATE=false LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
S3="${S3:-.venv/bin/s3}"
exec "$S3" doctor --device "${S3_DOCTOR_DEVICE:-cuda}" --out "${1:-gpu-check}" ${S3_DOCTOR_ARGS:-}
