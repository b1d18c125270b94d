#!/usr/bin/env bash
# Download, on this (CPU) machine, the wheels a lent GPU machine lacks for scripts/bench_gpu.py,
# into .whl/ (git-ignored): the GPU machine reaches no package index. Its image has torch 2.11
# (CUDA 13), transformers 5.17, accelerate, tokenizers, safetensors and huggingface_hub; it lacks
# bitsandbytes, and our pins want a newer transformers (and the regex it checks at import).
# Versions come from requirements.txt. Together ~57 MB: with the ~4 MB working tree that stays
# inside the 64 MiB one command may carry. duckdb (24 MB) is not needed by the bench; `--with-duckdb`
# adds it for a second command (e.g. the test suite), which must then carry less.
# Usage: bash scripts/gpu_wheels.sh [--with-duckdb]
set -euo pipefail
cd "$(dirname "$0")/.."
pin() { grep -E "^$1==" requirements.txt | head -1; }
names=(bitsandbytes transformers regex)
[[ "${1:-}" == "--with-duckdb" ]] && names+=(duckdb)
rm -rf .whl && mkdir -p .whl
for name in "${names[@]}"; do
  spec=$(pin "$name")
  [[ -n "$spec" ]] || spec="$name==$(python3 -c "import importlib.metadata as m; print(m.version('$name'))")"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d .whl "$spec"
done
ls -l .whl
du -cb .whl/*.whl | tail -1 | awk '{printf "%.1f MiB of wheels\n", $1 / 1048576}'
