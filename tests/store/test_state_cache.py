"""store.state_cache: a value is served only while the store file is unchanged."""

from __future__ import annotations

from store import connect
from store.state_cache import StoreStateCache, store_fingerprint


def _store(tmp_path):
    path = tmp_path / "s.duckdb"
    with connect(path) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    return path


def _count(path):
    with connect(path, read_only=True) as conn:
        return conn.execute("SELECT count(*) FROM t").fetchone()[0]


def test_kept_while_unchanged_recomputed_after_a_write(tmp_path):
    path, cache, calls = _store(tmp_path), StoreStateCache(4), []

    def compute():
        calls.append(1)
        return {"n": _count(path)}

    first = cache.get(path, "k", compute)
    first["n"] = 99  # a caller changing its copy changes nothing kept
    assert cache.get(path, "k", compute) == {"n": 0} and len(calls) == 1
    with connect(path) as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    assert cache.get(path, "k", compute) == {"n": 1} and len(calls) == 2
    assert cache.get(path, "other", compute) == {"n": 1} and len(calls) == 3  # keys are apart
    cache.clear()
    assert cache.get(path, "k", compute) == {"n": 1} and len(calls) == 4


def test_a_write_during_the_computation_is_not_kept(tmp_path):
    path, cache = _store(tmp_path), StoreStateCache(4)

    def compute_while_someone_writes():
        value = _count(path)
        with connect(path) as conn:
            conn.execute("INSERT INTO t VALUES (2)")
        return value

    assert cache.get(path, "k", compute_while_someone_writes) == 0
    assert cache.get(path, "k", lambda: _count(path)) == 1  # recomputed: the stale 0 was not kept


def test_size_bound_and_fingerprint_of_a_missing_file(tmp_path):
    path, cache = _store(tmp_path), StoreStateCache(2)
    for key in "abc":
        cache.get(path, key, lambda key=key: key)
    calls = []
    assert cache.get(path, "a", lambda: calls.append(1) or "a") == "a" and calls == [1]  # the oldest went
    assert store_fingerprint(tmp_path / "none.duckdb") == (None, None)
