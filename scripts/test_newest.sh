#!/usr/bin/env bash
# The suite under the newest versions the ranges allow: what a plain `pip install .` takes today,
# not the pins CI installs. CI cannot see a package that moved after the pins were compiled
# (DuckDB 2.0.1 changed the text of extract_statements' statements, and every new store of an
# installed package failed to migrate until 39d1632). Run it before refreshing the pins
# (scripts/compile_requirements.sh --upgrade), or when a user's install differs from ours.
#
# A fresh virtual environment from requirements.in, requirements-dev.in and requirements-ray.in
# with their -c/-r lines dropped (no pin constrains them), llama.cpp's server from the portable
# wheel .ci/run builds, then the package itself; it prints every version that differs from its
# pin, then runs pytest with the arguments given (default: -m "not slow").
# Usage: bash scripts/test_newest.sh [PYTEST ARGS ...]
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(mktemp -d "${TMPDIR:-/tmp}/pattrieval-newest.XXXXXX")"
trap 'rm -rf "$root"' EXIT
python3 -m venv "$root/venv"
# shellcheck disable=SC1091
source "$root/venv/bin/activate"
for f in requirements-dev.in requirements-ray.in; do grep -vE '^-[cr] ' "$f" > "$root/$f"; done
pip install --quiet torch==2.13.0 -r requirements.in -r "$root/requirements-dev.in" -r "$root/requirements-ray.in"
llama_version="$(sed -n 's/^llama-cpp-python\[server\]==\([^ ]*\).*/\1/p' requirements-server.txt)"
llama_wheels="${XDG_CACHE_HOME:-$HOME/.cache}/pattrieval/wheels/llama-cpp-python-$llama_version-GGML_NATIVE_OFF"
if compgen -G "$llama_wheels/llama_cpp_python-$llama_version-*.whl" >/dev/null; then
  pip install --quiet --find-links "$llama_wheels" -r requirements-server.txt
else
  echo "no portable llama-cpp-python wheel in $llama_wheels (bash .ci/run builds it): the served tests will fail" >&2
fi
pip install --quiet --no-deps .
# What differs from the pins (torch is not pinned there).
python - <<'EOF'
import importlib.metadata as md
import re

pins = {}
for name in ("requirements.txt", "requirements-dev.txt", "requirements-ray.txt"):
    for line in open(name, encoding="utf-8"):
        m = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s;\\]+)", line)
        if m:
            pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
moved = []
for dist in md.distributions():
    key = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
    if key in pins and pins[key] != dist.version:
        moved.append(f"{key} {pins[key]} -> {dist.version}")
print("newer than the pins:", ", ".join(sorted(moved)) if moved else "none")
EOF
if [ "$#" -eq 0 ]; then set -- -m "not slow"; fi
python -m pytest "$@"
