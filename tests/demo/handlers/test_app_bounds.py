"""Bounds in the app: `/runs` with an absurd page, `/export` streamed in chunks, and the
model-name check that told a Space's visitor which relative paths exist on the server."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest

from demo.handlers.runs import MAX_PAGE, page_number, runs_view
from engine.errors import UserError
from tests.demo.handlers.test_app_sql import build_store
from tests.store.test_export_merge import add_run

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = build_store(tmp_path_factory.mktemp("bounds") / "app.duckdb")  # exp-a (pilot), exp-b
    add_run(db, "r-c", "exp-c", "vanilla")
    return db


@pytest.mark.parametrize("page", [10**18, 1e18, "1000000000000000000", float("inf"), 2**63])
def test_an_absurd_page_is_clamped_not_an_error(store, page):
    view = runs_view(store, page)
    assert (view.page, view.rows, view.total) == (MAX_PAGE, [], 3)


@pytest.mark.parametrize("page, expected", [(None, 1), ("", 1), (0, 1), (-5, 1), (2.7, 2), ("3", 3)])
def test_page_numbers(page, expected):
    assert page_number(page) == expected


@pytest.mark.parametrize("page", ["abc", float("nan"), [1]])
def test_a_page_that_is_no_number_is_one_line(page):
    with pytest.raises(UserError, match="^the page must be a whole number"):
        page_number(page)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_streams_in_chunks_and_writes_what_the_whole_frame_would(store, tmp_path, monkeypatch, fmt):
    import store.queries as queries
    from store.export import encode, export_results

    whole = queries.export_results_frame(store, ["exp-a", "exp-c"])
    assert len(whole) > 2
    seen = []
    real = queries.export_results_chunks

    def small_chunks(db, references, rows_per_chunk=queries.EXPORT_CHUNK_ROWS, *, rows="answers"):
        cm = real(db, references, rows_per_chunk=1, rows=rows)  # 1 vector: at most 2,048 rows a chunk

        class Spy:
            def __enter__(self):
                chunks = cm.__enter__()
                frames = chunks.frames

                def counted():
                    for frame in frames:
                        seen.append(len(frame))
                        yield frame

                return queries.ExportChunks(chunks.experiment_ids, counted())

            def __exit__(self, *exc):
                return cm.__exit__(*exc)

        return Spy()

    def whole_frame(*args, **kwargs):
        raise AssertionError("the export must not build the whole result")

    monkeypatch.setattr(queries, "export_results_chunks", small_chunks)
    monkeypatch.setattr(queries, "export_results_frame", whole_frame)
    out = tmp_path / f"x.{fmt}"
    result = export_results(store, ["exp-a", "exp-c"], fmt, out)
    assert seen and max(seen) <= 2048 and sum(seen) == len(whole) == result.n_rows
    if fmt == "csv":
        assert out.read_bytes() == encode(whole, "csv")
    else:
        got = pd.read_parquet(out)
        want = pd.read_parquet(io.BytesIO(encode(whole, "parquet")))
        pd.testing.assert_frame_equal(got, want)


def test_a_streamed_export_of_an_unknown_experiment_writes_nothing(store, tmp_path):
    from store.export import export_results

    out = tmp_path / "none.csv"
    with pytest.raises(UserError, match="no-such"):
        export_results(store, ["exp-a", "no-such"], "csv", out)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_space_says_the_same_for_every_unknown_model_name(tmp_path, monkeypatch):
    from demo.handlers.run import RunForm, build_run_request
    from demo.settings import AppSettings
    from engine.generation.models import unknown_model
    from engine.running.run_request import load_model_for

    monkeypatch.chdir(ROOT)
    settings = AppSettings(db_path=tmp_path / "app.duckdb", allow_local_paths=False)
    exists, missing = "data/sample_nq.jsonl", "data/no-such-thing"
    assert Path(exists).exists() and not Path(missing).exists()
    requests = [build_run_request(settings, RunForm(model=name)) for name in (exists, missing)]
    assert [r.hub_only for r in requests] == [True, True]  # both queued alike: no immediate tell
    with pytest.raises(UserError) as err:
        load_model_for(requests[0])
    assert str(err.value) == str(unknown_model(exists))  # the loader's line for a name not on the Hub
    # On the desktop a local folder is still a model.
    desktop = build_run_request(AppSettings(db_path=tmp_path / "d.duckdb"), RunForm(model=exists))
    assert not desktop.hub_only
