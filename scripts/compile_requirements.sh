#!/usr/bin/env bash
# Regenerate the exact pins (requirements.txt, requirements-dev.txt, requirements-ray.txt) from
# the ranges in requirements.in, requirements-dev.in and requirements-ray.in (the optional Ray
# backend, constrained by the other two, so its shared packages keep their versions). Run after changing a range, or with --upgrade to
# move every pin to the newest version the ranges allow; then run the tests and commit.
#
# torch is resolved (its own dependencies get pinned) but not written: the README's install
# commands and the Dockerfile name `torch==2.13.0` themselves, so that each machine gets its
# own build (CPU here, CUDA on a GPU Space). Find-links and index options stay out of the
# files so that they work on any machine.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet "pip-tools>=7.6,<8"  # the tool itself is not a project dependency
common=(--quiet --strip-extras --no-emit-find-links --no-emit-index-url --no-emit-trusted-host
        --unsafe-package torch "$@")
export CUSTOM_COMPILE_COMMAND=scripts/compile_requirements.sh  # what the files' headers name
python -m piptools compile "${common[@]}" -o requirements.txt requirements.in
python -m piptools compile "${common[@]}" -o requirements-dev.txt requirements-dev.in
python -m piptools compile "${common[@]}" -o requirements-ray.txt requirements-ray.in
