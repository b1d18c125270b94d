#!/usr/bin/env sh
# Put the database and the Hugging Face cache on the persistent volume when the Space has one.
# Without it (a paid add-on), engine.paths picks a store this user can write (results/ in the app
# folder) and the app's first screen says results will not survive a restart.
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
