# Hugging Face Space (Docker SDK) and GPU desktop image.
# On a Space, attach persistent storage: the database and the model cache then live under /data.
# Operator settings are environment variables (the Space's variables): PATTRIEVAL_READ_ONLY,
# PATTRIEVAL_MAX_ITEMS, PATTRIEVAL_ALLOWED_MODELS, PATTRIEVAL_MAX_UPLOAD_MB, PATTRIEVAL_RESULTS_REPO
# and PATTRIEVAL_RESULTS_FILE (README, "Running it as a Space"). Hugging Face sets SPACE_ID, which
# keeps visitors from naming server paths.
FROM python:3.11-slim

RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*

# Spaces run the container as uid 1000.
RUN useradd -m -u 1000 user
WORKDIR /home/user/app

COPY --chown=user requirements.txt .
# The registry's torch wheel for Linux is the CUDA build the Space's GPU needs.
RUN pip install --no-cache-dir torch==2.13.0 && pip install --no-cache-dir -r requirements.txt

COPY --chown=user . .
USER user

ENV PYTHONUNBUFFERED=1 \
    HOME=/home/user \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860
EXPOSE 7860

ENTRYPOINT ["/home/user/app/scripts/space_entrypoint.sh"]
