#!/usr/bin/env bash
# issue 47's GPU check in one step: `s3 doctor`'s shape steps (s3/doctor.py measure_shape) on a seeded random model of
# Qwen2.5-3B's shape and, where the GPU's free memory allows, 7B's: the 3B recipe's (configs/gpu_single.toml) rollout
# engine's policy tokens/s on 64 s3 prompts x 128 tokens, one masked update's seconds and peak memory, and the goal
# check rollout >= 10 x 111 policy tokens/s (PASS / FAIL in the summary). ~2.5 minutes on an H200
# (2026-12-04: 139 s, 3b and 7b, one rollout each; 3b with its two rollouts 78 s; benchmarks/results/doctor_cuda_shapes,
# docs/gpu.md).
#
#   bash scripts/doctor_gpu.sh prep   # HERE (PyPI reachable): what a bare GPU image lacks, into .s3cache/doctor_gpu
#                                     #   (cp312 wheels of pydantic and rich, SmolLM2's tokenizer files: ~8 MB)
#   bash scripts/doctor_gpu.sh        # ON THE GPU MACHINE; results in $OUT (else ./doctor-gpu): summary.md/json, logs/
#
# The device tool's call: command "bash scripts/doctor_gpu.sh", carry [".s3cache/doctor_gpu"], timeout_s 600.
# Settings: S3_DOCTOR_SHAPES (default 3b,7b), S3_DOCTOR_BUDGET_S (default 540: the whole run, under the tool's 600 s
# a command), PYTHON (default .venv/bin/python when it sees a GPU, else python3), S3_DOCTOR_DEVICE (default cuda;
# `S3_DOCTOR_DEVICE=cpu S3_DOCTOR_SHAPES=small bash scripts/doctor_gpu.sh` tries the script on a CPU in a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.s3cache/doctor_gpu
export XLA_PYTHON_CLIENT_PREALLOCATE=false LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

if [[ "${1:-}" == "prep" ]]; then
  VENV=.venv/bin/python
  rm -rf "$CARRY" && mkdir -p "$CARRY/whl" "$CARRY/tok"
  # the versions this project's venv resolved, as cp312 manylinux / pure-Python wheels (the GPU images run Python 3.12)
  pkgs=$("$VENV" - <<'PY'
import importlib.metadata as md
print(" ".join(f"{n}=={md.version(n)}" for n in ("pydantic", "pydantic-core", "annotated-types", "typing-inspection",
                                                  "rich", "markdown-it-py", "mdurl", "pygments")))
PY
)
  # shellcheck disable=SC2086
  "$VENV" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$CARRY/whl" $pkgs
  "$VENV" - "$CARRY/tok" <<'PY'
import shutil, sys
from pathlib import Path
from searcher.policy.transformers_policy import resolve_checkpoint
src = Path(resolve_checkpoint("smollm2-135m-instruct"))
for f in src.iterdir():
    if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
        shutil.copy(f, Path(sys.argv[1]) / f.name)
PY
  du -sh "$CARRY"; ls "$CARRY/whl" "$CARRY/tok"
  exit 0
fi

OUT="${OUT:-$PWD/doctor-gpu}"
mkdir -p "$OUT"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  PY=python3
  if [[ -x .venv/bin/python ]] && .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    PY=.venv/bin/python
  fi
fi
# what the image lacks: the carried wheels of the modules that do not import (nothing the image has is replaced)
SITE=/tmp/s3-doctor-site
if [[ -d "$CARRY/whl" ]]; then
  missing=()
  for pair in pydantic:pydantic pydantic_core:pydantic_core annotated_types:annotated_types \
              typing_inspection:typing_inspection rich:rich markdown_it:markdown_it_py mdurl:mdurl pygments:pygments; do
    mod=${pair%%:*}; whl=${pair##*:}
    "$PY" -c "import $mod" 2>/dev/null || missing+=("$CARRY"/whl/"${whl}"-*.whl)
  done
  if (( ${#missing[@]} )); then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "${missing[@]}"
  fi
fi
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [[ -f "$CARRY/tok/tokenizer.json" ]]; then export S3_DOCTOR_TOKENIZER="$PWD/$CARRY/tok"; fi
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader > "$OUT/env.txt" 2>&1 || true
"$PY" -c "import sys, torch, transformers, peft; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" >> "$OUT/env.txt" 2>&1 || true
git rev-parse HEAD >> "$OUT/env.txt" 2>/dev/null || true
# the models (~6 GB + ~15 GB) go to /tmp, not to $OUT; the summary and the logs are copied back whatever happens
WORK=/tmp/s3-doctor-gpu
trap 'cp -r "$WORK/summary.md" "$WORK/summary.json" "$WORK/logs" "$OUT/" 2>/dev/null || true' EXIT
rc=0
timeout "${S3_DOCTOR_BUDGET_S:-540}" "$PY" -m s3.cli doctor --device "${S3_DOCTOR_DEVICE:-cuda}" --only '^(devices|shape_)' \
  --shape "${S3_DOCTOR_SHAPES:-3b,7b}" --timeout-s 300 --out "$WORK" || rc=$?
echo "doctor_gpu: exit $rc; summary in $OUT/summary.md"
exit $rc
