"""Uploads that decode to far more than their size, datasets past their bounds,
and paths that are not regular files. The app's memory is measured from outside (psutil on
the `python -m demo` process), as a visitor's upload would meet it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.datasets.data import MAX_DOCUMENTS, MAX_ITEMS, load_dataset
from engine.datasets.load_child import LoadBounds, check_dataset_bounded, load_dataset_bounded
from engine.errors import UserError
from tests.support.helpers import served_app

ROOT = Path(__file__).resolve().parents[2]
MB = 2**20
# The app's own growth while it checks one hostile upload: the upload itself, Gradio's
# bookkeeping and a child process started, never the decoded file (gigabytes before the fix).
APP_GROWTH_BOUND = 300 * MB


def _bomb_parquet(path: Path, rows: int = 2_500, string_mb: int = 1) -> Path:
    """A ~1 KB Parquet file whose dictionary-encoded column decodes to rows x string_mb MB."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    column = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["x" * (string_mb * MB)]))
    docs = pa.array([[{"text": "a", "relevant": True}]] * rows)
    pq.write_table(pa.table({"question": column, "answers": pa.array([["a"]] * rows), "documents": docs}),
                   path, compression="zstd")
    return path


def _empty_objects_json(path: Path, size: int = 10 * MB) -> Path:
    path.write_text("[" + ",".join(["{}"] * (size // 3)) + "]")
    return path


class _PeakRss:
    """The peak resident memory of one process, sampled every 20 ms from a thread."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.process = psutil.Process(pid)
        self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def app_process(tmp_path):
    """`python -m demo` as a Space serves it (no local paths), on a free port; (url, pid)."""
    with served_app(tmp_path / "app.duckdb", "--no-local-paths") as (url, proc):
        yield url, proc.pid


@pytest.mark.parametrize("kind", ["parquet", "json"])
def test_hostile_upload_leaves_the_app_memory_bounded(app_process, tmp_path, kind):
    from gradio_client import Client, handle_file

    url, pid = app_process
    if kind == "parquet":
        upload = _bomb_parquet(tmp_path / "bomb.parquet")
        assert upload.stat().st_size < 4096  # 2.5 GB once decoded
        expected = "needs more memory than loading may take"
    else:
        upload = _empty_objects_json(tmp_path / "empty.json")
        expected = f"more than {MAX_ITEMS:,} items"
    client = Client(url, verbose=False)
    client.predict(None, None, api_name="/validate_dataset")  # warm: the first call's imports are not the upload's
    with _PeakRss(pid) as rss:
        base = rss.process.memory_info().rss
        message = client.predict(handle_file(str(upload)), None, api_name="/validate_dataset")
    growth = rss.peak - base
    print(f"{kind}: {upload.stat().st_size:,} bytes uploaded, app peak RSS {rss.peak / MB:.0f} MB, grew {growth / MB:.0f} MB")
    assert growth < APP_GROWTH_BOUND, f"the app grew by {growth / MB:.0f} MB"
    assert expected in message
    assert "\n" not in message and str(tmp_path) not in message


def test_bounded_load_reports_memory_in_one_line(tmp_path):
    bomb = _bomb_parquet(tmp_path / "bomb.parquet")
    bounds = LoadBounds(max_address_space=1024 * MB)
    with pytest.raises(UserError, match=r"^bomb\.parquet: the dataset needs more memory than loading may take \(at most 1 GB\)"):
        load_dataset_bounded(bomb, bounds=bounds)
    check = check_dataset_bounded(bomb, bounds=bounds)
    assert check.broken and "more memory" in check.error


def test_bounded_load_times_out(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "q", "answers": ["a"], "documents": [{"text": "a", "relevant": True}]}) + "\n")
    with pytest.raises(UserError, match=r"^d\.jsonl: loading took longer than 0\.01 s"):
        load_dataset_bounded(data, bounds=LoadBounds(timeout_s=0.01))


def test_bounded_load_gives_the_loaders_items_and_lines(tmp_path):
    data = load_dataset_bounded(ROOT / "data" / "sample_nq.jsonl", limit=3)
    assert data == load_dataset(ROOT / "data" / "sample_nq.jsonl", limit=3)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"\n')
    with pytest.raises(UserError) as err:
        load_dataset(bad)
    with pytest.raises(UserError, match="^" + str(err.value).replace(".", r"\.").replace("(", r"\(").replace(")", r"\)") + "$"):
        load_dataset_bounded(bad)


def test_too_many_items_is_refused_naming_the_bound(tmp_path):
    rows = tmp_path / "many.jsonl"
    rows.write_text("{}\n" * (MAX_ITEMS + 1))
    with pytest.raises(UserError, match=rf"many\.jsonl: more than {MAX_ITEMS:,} items \(at most {MAX_ITEMS:,}\)"):
        load_dataset(rows)


def test_too_many_documents_is_an_invalid_item_naming_the_bound(tmp_path):
    docs = [{"text": f"d{i}", "relevant": i == 0} for i in range(MAX_DOCUMENTS + 1)]
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": "q", "answers": ["a"], "documents": docs}) + "\n")
    with pytest.raises(UserError, match=rf"item 'q1': {MAX_DOCUMENTS + 1} documents \(at most {MAX_DOCUMENTS}\)"):
        load_dataset(data)
    docs.pop()
    data.write_text(json.dumps({"id": "q1", "question": "q", "answers": ["a"], "documents": docs}) + "\n")
    assert len(load_dataset(data).items[0].documents) == MAX_DOCUMENTS


def _special_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    return {"fifo": fifo, "zero-link": zero, "dev-zero": Path("/dev/zero")}


def _engine(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_dataset_that_is_not_a_regular_file_is_refused(tmp_path):
    for name, path in _special_files(tmp_path).items():
        done = _engine("validate", "--dataset", str(path), timeout=30)
        assert done.returncode == 2, name
        assert done.stderr.startswith(f"error: {path}: ") and "not a regular file" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_database_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "store.duckdb"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        done = _engine("list", "--db", str(path), timeout=30)
        assert done.returncode == 2
        assert done.stderr.strip() == f"error: cannot open database {path}: not a regular file (a FIFO, device or socket)"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "demo", "--db", str(fifo)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not a regular file" in done.stderr


def test_app_upload_check_refuses_a_fifo(tmp_path):
    from demo.handlers.run import validate_upload
    from demo.settings import AppSettings

    fifo = tmp_path / "up.jsonl"
    os.mkfifo(fifo)
    message = validate_upload(AppSettings(db_path=tmp_path / "x.duckdb"), str(fifo))
    assert message == "up.jsonl: a FIFO, not a regular file"
