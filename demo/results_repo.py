"""PATTRIEVAL_RESULTS_REPO: merge a published results store from the Hugging Face Hub at start.

So that even a CPU Space shows real results from the paper's models: the operator publishes a
store (a .duckdb file made by the CLI on a GPU machine) in a Hub *dataset* repo, and every start
downloads it (huggingface_hub's cache: a file already there is not fetched again) and merges it
with `engine.usecases.storage.merge.merge`, the merge of `python -m engine merge`. The merge is idempotent
by run id, so restarts add nothing twice.

The download is merged from a private copy: the Hub cache's file is never opened for writing,
and a store published by an older version of this tool is migrated in the copy, not refused.

Nothing here may keep the app from starting: any failure (no network, unknown repo, no such
file, a refused merge) is one line on the server's log.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from demo.settings import DEFAULT_RESULTS_FILE, AppSettings
from engine.usecases.storage.merge import merge


def merge_results_repo(db_path: str | os.PathLike[str], repo: str, filename: str = DEFAULT_RESULTS_FILE, *,
                       cache_dir: str | os.PathLike[str] | None = None):
    """Download `filename` from the Hub dataset repo `repo` and merge it into `db_path`; a MergeResult."""
    from huggingface_hub import hf_hub_download

    from store.db import connect

    # cache_dir None: huggingface_hub's own (HF_HUB_CACHE / HF_HOME, set by the entry point).
    downloaded = hf_hub_download(repo_id=repo, filename=filename, repo_type="dataset",
                                 cache_dir=None if cache_dir is None else os.fspath(cache_dir))
    with tempfile.TemporaryDirectory(prefix="pattrieval-results-") as folder:
        copy = Path(folder) / "results.duckdb"
        shutil.copyfile(downloaded, copy)
        with connect(copy):  # migrates an older schema in the copy (a newer one is refused here)
            pass
        # The merge use case, as `python -m engine merge`: it also keeps the Bias page's values of
        # the experiments merged in, so the Space's first Bias visitor reads them.
        return merge(Path(db_path), copy)


def merge_at_start(settings: AppSettings, *, out: TextIO | None = None,
                   cache_dir: str | os.PathLike[str] | None = None) -> str | None:
    """Merge the operator's results repo, if set, printing one line; never raises. The line, or None."""
    if not settings.results_repo:
        return None
    out = out or sys.stdout
    repo, name = settings.results_repo, settings.results_file
    try:
        result = merge_results_repo(settings.db_path, repo, name, cache_dir=cache_dir)
    except Exception as err:  # noqa: BLE001 - whatever went wrong, the app must still start
        line = f"results repo {repo}: not merged ({_reason(err)}); the app starts without it"
    else:
        line = (f"results repo {repo}: merged {len(result.merged)} runs ({result.n_generations} answers)"
                f"{f', {len(result.already)} already here' if result.already else ''}"
                if result.merged else
                f"results repo {repo}: nothing new ({len(result.already)} runs already here)")
    print(line, file=out, flush=True)
    return line


def _reason(err: Exception) -> str:
    """The error's first line: the Hub's exceptions carry several (URLs, request ids)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
