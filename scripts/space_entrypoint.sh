#!/usr/bin/env sh
# Put the database and the Hugging Face cache on the persistent volume when the Space has one.
set -e
if [ -d /data ] && [ -w /data ]; then
  export HF_HOME="${HF_HOME:-/data/.huggingface}"
  export PATTRIEVAL_DB="${PATTRIEVAL_DB:-/data/pattrieval.duckdb}"
  export PATTRIEVAL_CACHE="${PATTRIEVAL_CACHE:-/data/pattrieval-cache}"
fi
if [ "$#" -gt 0 ]; then
  exec python -m engine "$@"
fi
# The app listens where the Dockerfile's GRADIO_SERVER_NAME / GRADIO_SERVER_PORT say (0.0.0.0:7860).
exec python -m demo
