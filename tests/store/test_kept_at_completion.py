"""What a run's completion keeps of its experiment's bias rows (store.kept_metrics.keep_experiment_bias):
a pair whose kept rows are current by the readers' rule keeps them as they are, a stale pair is
computed again, a pair the bias view no longer chooses loses its rows, and every kept row equals
the view."""

from __future__ import annotations

from pathlib import Path

from store import connect
from store.kept_metrics import keep_experiment_bias
from tests.support.bias_store import add_run, biased

BASE, CF = biased(12, 4)


def _kept(db: Path) -> dict[tuple[str, str, str], tuple]:
    """(measure, metric, run_b) -> (computed_utc, value, n_a) of the kept bias rows."""
    with connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT measure, metric, run_b, computed_utc, value, n_a FROM bias_rows").fetchall()
    return {(m, k, b): (t, v, n) for m, k, b, t, v, n in rows}


def _same_as_view(db: Path) -> None:
    with connect(db, read_only=True) as conn:
        kept = conn.execute("SELECT measure, metric, run_a, run_b, value, n, n_differ FROM bias_rows ORDER BY ALL").fetchall()
        view = conn.execute("SELECT measure, metric, run_a, run_b, value, n, n_differ FROM bias ORDER BY ALL").fetchall()
    assert kept == view and kept


def test_cf_completion_keeps_the_current_cas_rows_and_adds_cab(tmp_path):
    db = tmp_path / "s.duckdb"
    add_run(db, "e-vanilla", "e", "vanilla", "m", BASE)
    add_run(db, "e-base", "e", "base", "m", BASE)
    after_base = _kept(db)
    assert {m for m, _, _ in after_base} == {"CAS"}
    add_run(db, "e-cf", "e", "cf", "m", CF)
    after_cf = _kept(db)
    cas = {key: row for key, row in after_cf.items() if key[0] == "CAS"}
    assert cas == after_base  # computed at base's completion, not again at cf's
    assert {m for m, _, _ in after_cf} == {"CAS", "CAB"}
    _same_as_view(db)


def test_a_stale_pair_is_computed_again_and_an_unchosen_pair_loses_its_rows(tmp_path):
    db = tmp_path / "s.duckdb"
    for mode, cites in (("vanilla", BASE), ("base", BASE), ("cf", CF)):
        add_run(db, f"e-{mode}", "e", mode, "m", cites)
    assert {m for m, _, _ in _kept(db)} == {"CAS", "CAB"}
    with connect(db) as conn:
        # The CAS rows now disagree with the runs' counts (stale), and cf is no longer complete,
        # so the bias view pairs nothing for CAB.
        conn.execute("UPDATE bias_rows SET n_a = n_a + 1, value = -1 WHERE measure = 'CAS'")
        conn.execute("UPDATE runs SET status = 'failed' WHERE run_id = 'e-cf'")
        keep_experiment_bias(conn, "e")
    kept = _kept(db)
    assert {m for m, _, _ in kept} == {"CAS"}
    assert all(n == 12 and v != -1 for (_, v, n) in kept.values())
    _same_as_view(db)
