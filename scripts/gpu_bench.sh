#!/usr/bin/env bash
# The one command a lent GPU machine runs (docs/gpu.md): install the carried wheels, say what
# the machine is, run scripts/bench_gpu.py into $OUT. Usage: bash scripts/gpu_bench.sh [bench_gpu.py options]
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "installing the carried wheels failed"; exit 1; }
export PYTHONPATH=/tmp/site
# The carried transformers needs the image's tokenizers/huggingface_hub to match its pins; if it
# does not import, fall back to the image's own and say so (the results record the version).
if ! python3 -c "import transformers, bitsandbytes" 2>/dev/null; then
  echo "carried transformers does not import here; using the image's"
  rm -rf /tmp/site/transformers /tmp/site/transformers-*
fi
python3 -c "import torch, transformers, bitsandbytes; print('torch', torch.__version__, 'transformers', transformers.__version__, 'bitsandbytes', bitsandbytes.__version__)"
uname -r; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
df -h /dev/shm /tmp | tail -2
python3 scripts/bench_gpu.py --out "${OUT:-.}" "$@" 2>&1 | tee "${OUT:-.}/bench_gpu.log"
