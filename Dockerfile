# Hugging Face Space (Docker SDK) and GPU desktop image.
# On a Space, attach persistent storage to keep results: the database and the model cache then
# live under /data. Without it they live in the container (results/ in the app folder, the cache
# in the user's home) and go with it at a restart; the app's first screen says so.
# Operator settings are environment variables (the Space's variables): PATTRIEVAL_READ_ONLY,
# PATTRIEVAL_MAX_ITEMS, PATTRIEVAL_ALLOWED_MODELS, PATTRIEVAL_MAX_UPLOAD_MB, PATTRIEVAL_RESULTS_REPO
# and PATTRIEVAL_RESULTS_FILE (README, "Running it as a Space"). Hugging Face sets SPACE_ID, which
# keeps visitors from naming server paths.
FROM python:3.11-slim

RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*

# Spaces run the container as uid 1000.
RUN useradd -m -u 1000 user

# The pins go into the image's Python as root (read-only to the app), before the code, so that a
# code change reuses this layer. The registry's torch wheel for Linux is the CUDA build the
# Space's GPU needs.
COPY requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir torch==2.13.0 && pip install --no-cache-dir -r /tmp/requirements.txt

# The app folder belongs to the user, who writes results/ in it when the Space has no /data
# (issue 28: a WORKDIR made as root left it root-owned, and the first run failed after loading its
# model). It is made with its owner here, and USER comes before WORKDIR, as Hugging Face's Docker
# Spaces docs say, since not every builder makes a WORKDIR as USER.
RUN install -d -o user -g user /home/user/app
USER user
WORKDIR /home/user/app
COPY --chown=user . .

ENV PYTHONUNBUFFERED=1 \
    HOME=/home/user \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860
EXPOSE 7860

ENTRYPOINT ["/home/user/app/scripts/space_entrypoint.sh"]
