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
# The Gradio app (port 7860) becomes the default command when it lands; until then the image
# runs the quick-start experiment.
exec python -m engine quickstart
