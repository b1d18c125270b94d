"""What one visitor can make the server keep on disk.

Each /export wrote a new folder (+15 MB a call, ~10 GB an hour per looping visitor). Now the
same store state and request give the same file, downloads are bounded in all and per visitor,
and free space is checked before writing. The store grew ~157 KB per answer at a Space's
limits (a 12-configuration grid ~5.7 GB); quotas per job and per store refuse such a job in one
line before it is queued."""

from __future__ import annotations

import os
import shutil
from collections import namedtuple
from dataclasses import replace
from pathlib import Path

import pytest

from demo import downloads
from demo.downloads import DownloadLimits, bounded_download, new_download
from demo.handlers.runs import export_file
from demo.jobs import JobQueue
from demo.settings import AppSettings, settings_from_env
from engine.errors import UserError
from engine.limits import estimate_answer_bytes
from tests.demo.handlers.test_app_sql import build_store

KB = 1024


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "app.duckdb")


@pytest.fixture()
def root(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "downloads"
    monkeypatch.setattr(downloads, "download_root", lambda: folder)
    return folder


def _writer(size: int):
    def write(path: Path) -> None:
        path.write_bytes(b"x" * size)
    return write


def test_the_same_export_of_the_same_store_is_written_once(store, root):
    first = export_file(store, ["exp-a"], "", "csv")
    again = export_file(store, ["exp-a"], "", "csv")
    # Before: a new folder per call (a looping visitor wrote ~10 GB an hour).
    assert again == first
    assert len([p for p in root.iterdir()]) == 1
    other = export_file(store, ["exp-a"], "", "parquet")
    assert other != first and len(list(root.iterdir())) == 2
    # The store changed: a new file, not yesterday's rows.
    os.utime(store, ns=(store.stat().st_atime_ns, store.stat().st_mtime_ns + 10**9))
    assert export_file(store, ["exp-a"], "", "csv") != first


def test_downloads_are_bounded_per_visitor_and_in_all(tmp_path):
    limits = DownloadLimits(total_mb=2, per_visitor_mb=1, min_free_mb=0)
    bounded_download("f", _writer(700 * KB), key="1", owner="client:a", limits=limits, root=tmp_path)
    with pytest.raises(UserError, match=r"^your downloads of the last 60 minutes hold 0\.7 MB \(at most 1 MB"):
        bounded_download("f", _writer(700 * KB), key="2", owner="client:a", limits=limits, root=tmp_path)
    assert len(list(tmp_path.iterdir())) == 1  # the refused file is gone, nothing half-way
    # The same request again costs nothing: the file already written.
    bounded_download("f", _writer(700 * KB), key="1", owner="client:a", limits=limits, root=tmp_path)
    bounded_download("f", _writer(700 * KB), key="3", owner="client:b", limits=limits, root=tmp_path)
    with pytest.raises(UserError, match="the server's downloads of the last 60 minutes are at their bound"):
        bounded_download("f", _writer(700 * KB), key="4", owner="client:c", limits=limits, root=tmp_path)
    assert sorted(p.name.startswith(".") for p in tmp_path.iterdir()) == [False, False]


def test_free_space_is_checked_before_writing(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 100 * KB, 100 * KB))
    limits = DownloadLimits()
    written = []
    with pytest.raises(UserError, match="^the server's temporary disk is nearly full; try again later$"):
        bounded_download("f", written.append, key="k", limits=limits, root=tmp_path)
    with pytest.raises(UserError, match="nearly full"):
        new_download("q.csv", limits=limits, root=tmp_path)
    assert written == [] and list(tmp_path.iterdir()) == []


def test_an_export_over_the_visitors_bound_is_one_line_without_paths(store, root, monkeypatch):
    monkeypatch.setattr(downloads, "MB", 1)  # a bound of a few bytes, so that the tiny store's export passes it
    limits = DownloadLimits(per_visitor_mb=10, min_free_mb=0)
    with pytest.raises(UserError) as refused:
        export_file(store, ["exp-a"], "", "csv", owner="client:a", limits=limits)
    line = str(refused.value)
    assert line.startswith("your downloads") and "\n" not in line and str(root) not in line
    assert [p for p in root.iterdir()] == []


def test_a_space_sets_download_and_store_bounds(monkeypatch, tmp_path):
    for name in ("PATTRIEVAL_MAX_DOWNLOADS_MB", "PATTRIEVAL_MAX_DOWNLOADS_PER_VISITOR_MB", "PATTRIEVAL_MAX_JOB_MB",
                 "PATTRIEVAL_MAX_STORE_MB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    desktop = settings_from_env(str(tmp_path / "x.duckdb"))
    assert (desktop.max_downloads_mb, desktop.max_job_mb, desktop.max_store_mb) == (None, None, None)
    monkeypatch.setenv("SPACE_ID", "someone/pattrieval")
    monkeypatch.setenv("PATTRIEVAL_MAX_JOB_MB", "300")
    space = settings_from_env(str(tmp_path / "x.duckdb"))
    assert (space.max_downloads_mb, space.max_downloads_per_visitor_mb) == (2048, 200)
    assert (space.max_job_mb, space.max_store_mb) == (300, 10240)
    monkeypatch.setenv("PATTRIEVAL_MAX_STORE_MB", "lots")
    with pytest.raises(UserError, match="PATTRIEVAL_MAX_STORE_MB must be a whole number"):
        settings_from_env(str(tmp_path / "x.duckdb"))


# ---------------------------------------------------------------- store quotas


def test_the_estimate_bounds_what_an_answer_was_measured_to_take():
    # Measured: ~157 KB an answer at 512 new tokens and 5 top log-probs; ~1.7 MB at 4,000 and 20.
    assert 157 * KB <= estimate_answer_bytes(512, 5) <= 1.25 * 157 * KB
    assert 1.7 * 1024 * KB <= estimate_answer_bytes(4000, 20) <= 1.25 * 1.7 * 1024 * KB


def _space(db: Path, **changes) -> AppSettings:
    base = AppSettings(db, allow_local_paths=False, operator_view=False, max_items=1000, max_new_tokens=512,
                       max_top_logprobs=5, max_configurations=12, max_job_mb=1024, max_store_mb=10 * 1024)
    return replace(base, **changes)


def test_a_grid_over_the_job_quota_is_refused_before_it_is_queued(tmp_path):
    from demo.handlers.grid import run_form
    from demo.handlers.run import RunForm

    jobs = JobQueue(load=lambda r: None)
    settings = _space(tmp_path / "x.duckdb")
    form = RunForm(model="smoke", limit=1000, max_new_tokens=512, top_logprobs=5, top_k="3,5,10",
                   order="ranked,reversed", few_shot="0,1")
    try:
        with pytest.raises(UserError) as refused:
            run_form(jobs, settings, form)
        line = str(refused.value)
        assert line.startswith("this job would store about ") and "one job may store at most 1,024 MB" in line
        assert "\n" not in line and jobs.statuses() == ()  # nothing queued
    finally:
        jobs.shutdown(timeout=10)


def test_a_job_that_would_pass_the_store_quota_is_refused(tmp_path):
    from demo.handlers.run import RunForm, build_run_request
    from demo.quotas import check_store_quota

    db = tmp_path / "x.duckdb"
    db.write_bytes(b"\0" * (3 * 1024 * KB))  # a store of 3 MB
    settings = _space(db, max_job_mb=None, max_store_mb=4)
    small = build_run_request(settings, RunForm(model="smoke", limit=2, max_new_tokens=48))
    check_store_quota(settings, small)  # ~2 x 3 x 22 KB: fits the MB left
    big = build_run_request(settings, RunForm(model="smoke", limit=100, max_new_tokens=512, top_logprobs=5))
    with pytest.raises(UserError, match=r"^this job would store about \d+ MB and the store has 1 MB left of its "
                                        r"4 MB quota here$"):
        check_store_quota(settings, big)
