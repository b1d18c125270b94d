"""No server path in a visitor's message, with the store and the temp folder apart
(as on a Space: the store on /data, temporary files under /tmp)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from demo.settings import without_server_paths
from engine.errors import UserError
from store.server_paths import mask_server_paths
from tests.store.test_export_merge import add_run


@pytest.fixture
def apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(the store, the temp folder) in two unrelated folders; Gradio's uploads and the Hub cache
    in folders of their own."""
    store = tmp_path / "persistent-volume" / "runs.duckdb"
    store.parent.mkdir()
    temp = tmp_path / "scratch-disk"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio-uploads"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hub-cache"))
    return store, temp


def test_every_server_folder_is_left_out(apart, tmp_path: Path):
    store, temp = apart
    cases = {
        f"cannot write {temp}/pattrieval-downloads/ab12/pattrieval-export.csv: No space left on device":
            "cannot write …/pattrieval-export.csv: No space left on device",
        f"[Errno 28] No space left on device: '{temp}/pattrieval-downloads/.partial-9f'":
            "[Errno 28] No space left on device: '…/.partial-9f'",
        f"cannot read {tmp_path}/gradio-uploads/5e3a/data.jsonl": "cannot read …/data.jsonl",
        f"no file {tmp_path}/hub-cache/hub/models--x/config.json": "no file …/config.json",
        f"{store} is locked; {store}.wal too": "the store is locked; the store.wal too",
        f"next to it: {store.parent}/other.duckdb": "next to it: …/other.duckdb",
        "cannot open /srv/never-seen/x.parquet (missing)": "cannot open …/x.parquet (missing)",
        # Not server paths: a URL, a Hub id, a ratio, a relative path.
        "see https://huggingface.co/Qwen/Qwen2.5-0.5B or a/b, 3/4": "see https://huggingface.co/Qwen/Qwen2.5-0.5B or a/b, 3/4",
        "unknown experiment '<script>alert(1)</script>'": "unknown experiment '<script>alert(1)</script>'",
    }
    for message, shown in cases.items():
        assert without_server_paths(message, store) == shown, message
        assert str(tmp_path) not in without_server_paths(message, store)


def test_a_folder_is_replaced_only_whole(tmp_path: Path):
    folder = tmp_path / "data"
    assert mask_server_paths(f"{folder}base/x and {folder}/y", folders=[folder]) == "…/x and …/y"
    assert mask_server_paths(f"{folder}/y", {str(folder / "y"): "the store"}) == "the store"


def _store(path: Path) -> Path:
    for run_id, mode in (("r-van", "vanilla"), ("r-base", "base"), ("r-cf", "cf")):
        add_run(path, run_id, "exp-a", mode, name="pilot")
    return path


@pytest.mark.parametrize("where", ["mkdir", "write"])
def test_an_export_on_a_full_temp_disk_names_no_server_path(apart, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, where: str):
    from demo.handlers.runs import export_file

    store, temp = apart
    _store(store)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if where == "mkdir":
        real_mkdir = os.mkdir

        def mkdir(path, *args, **kwargs):
            if str(path).startswith(str(temp)):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            return real_mkdir(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", mkdir)
    else:
        def fsync(fd):
            raise full

        monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(UserError) as caught:
        export_file(store, ["exp-a"], "", "csv")
    message = str(caught.value)
    assert "No space left on device" in message and "\n" not in message
    assert str(tmp_path) not in message and "scratch-disk" not in message and "persistent-volume" not in message
    assert not list(temp.rglob("*.csv")) and not list(temp.rglob("*.tmp"))  # nothing half-written


@pytest.mark.parametrize(("message", "shown"), [
    (r'IO Error: Cannot open file "C:\Users\Jo Ann\AppData\Local\Temp\runs.duckdb": The process cannot access the file',
     'IO Error: Cannot open file "…/runs.duckdb": The process cannot access the file'),
    (r"cannot write C:\Users\op\AppData\Local\Temp\pattrieval-downloads\ab12\export.csv: No space left on device",
     "cannot write …/export.csv: No space left on device"),
    (r"cannot write C:\Users\Jo Ann\export.csv: disk full", "cannot write …/export.csv: disk full"),
    ("Could not set lock on file C:/ProgramData/pattrieval/runs.duckdb: conflicting lock",
     "Could not set lock on file …/runs.duckdb: conflicting lock"),
    (r"the store \\fileserver\research\stores\runs.duckdb is read-only", "the store …/runs.duckdb is read-only"),
    (r"path too long: \\?\C:\very\deep\runs.duckdb.wal", "path too long: …/runs.duckdb.wal"),
    (r"cannot open '\\?\UNC\fileserver\share\x.parquet'", "cannot open '…/x.parquet'"),
    (r"IO Error: Cannot open file 'D:\' (a drive)", "IO Error: Cannot open file '…' (a drive)"),
    (r"[WinError 5] Access is denied: 'c:\\users\\op\\runs.duckdb'", "[WinError 5] Access is denied: '…/runs.duckdb'"),
], ids=["quoted-with-space", "temp", "unquoted-with-space", "forward-slashes", "unc", "long-path", "long-unc",
        "drive-root", "escaped"])
def test_windows_paths_are_left_out_too(apart, message: str, shown: str):
    """A Windows operator's DuckDB and OS errors quote their paths so: each was shown whole."""
    store, _ = apart
    assert mask_server_paths(message) == shown
    assert without_server_paths(message, store) == shown


@pytest.mark.parametrize("text", [
    "label A:B or C:D", "at 12:30, 3:4 odds", "see https://huggingface.co/Qwen/Qwen2.5-0.5B and http://h:8000/v1",
    r"a relative data\items.jsonl", r"an escaped \\n, a lone \\x", "the C: drive", "mistral:7b-instruct",
])
def test_text_that_only_looks_like_a_windows_path_is_kept(text: str):
    assert mask_server_paths(text) == text
