"""scripts/bench_stats.py: the statistics commands timed beside query_detail in one run.
End to end at its tiny size, so the bench cannot rot; its sizes; a wrong size is one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_stats.py"


def test_a_tiny_run_prints_each_figure_with_its_ratio(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "2k", "--repeats", "1", "--keep", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {m.group(1): m.groups() for m in re.finditer(
        r"^\| (query_detail|why-cited|why-cited-one|compare|compare-runs) \| 2k \| ([\d.]+ / [\d.]+ / [\d.]+) \| "
        r"([^|]+) \| ([^|]+) \| ([^|]+) \| ([\d,.]+)× \| ([^|]+) \|$", done.stdout, re.M)}
    assert set(rows) == {"query_detail", "why-cited", "why-cited-one", "compare", "compare-runs"}, done.stdout
    assert rows["query_detail"][5] == "1"
    assert float(rows["compare"][5].replace(",", "")) > 1  # a whole child process against one request
    assert "2,000 paired items, 9 metrics" in rows["compare"][6]
    assert "run-0016 against run-0017: 100 paired items, 9 metrics" in rows["compare-runs"][6]
    assert "7 experiments, 20 runs" in rows["why-cited"][6]
    assert "experiment exp-0005: 3 runs" in rows["why-cited-one"][6]
    assert re.search(r"^- 2k: 6,000 generations in \d+ s wall, .* peak [\d,]+ MB resident while building", done.stdout,
                     re.M), done.stdout
    # The stores are kept under bench_app's names, and reused by the next run.
    assert {p.name for p in tmp_path.glob("*.duckdb")} == {"bench_100x20.duckdb", "bench_2000x3.duckdb"}


def test_a_wrong_size_is_one_line_and_a_non_zero_exit():
    done = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "10k", "3M"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.strip() == "bench_stats.py: unknown size '3M' (choose from 2k, 10k, 100k, 1M, 10M)"


def test_the_sizes_are_bench_apps_stores():
    bench = load_script("bench_stats")
    assert {k: (s.items * s.runs, s.compare_items) for k, s in bench.SIZES.items()} == {
        "2k": (2_000, 2_000), "10k": (10_000, 10_000), "100k": (100_000, 100_000), "1M": (1_000_000, 1_000_000),
        "10M": (10_000_000, 10_000_000)}
    # bench_app's 10k and 1M stores (and its "exp" store: 3 runs x 10,000 items), under its file names.
    assert bench.store_path(Path("k"), 100, 100) == Path("k/bench_100x100.duckdb")
    assert (bench.SIZES["1M"].items, bench.SIZES["1M"].runs) == (10_000, 100)


def test_item_ids_stay_unique_past_a_million_items():
    # The 10M compare store holds 10,000,000 items per run: bench_app's SQL item id must be its
    # Python item_id there too (lpad to six digits cut 1,000,000 to q100000, a duplicate).
    import duckdb

    bench = load_script("bench_app")
    at = [0, 999_999, 1_000_000, 9_999_999]
    got = duckdb.sql(f"SELECT {bench.ITEM_ID_SQL} FROM unnest({at}) t(i)").fetchall()
    assert [g[0] for g in got] == [bench.item_id(i) for i in at]


def test_a_command_past_its_memory_cap_is_a_failed_row(tmp_path):
    """--limit-gb: a command that needs more than the cap is a FAILED row of the table, the run goes on."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "2k", "--repeats", "1", "--keep", str(tmp_path),
                           "--commands", "why-cited-one", "--limit-gb", "0.05"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^\| why-cited-one \| 2k \| .* \| - \| FAILED \(exit \d+\): ", done.stdout, re.M), done.stdout
    assert {p.name for p in tmp_path.glob("*.duckdb")} == {"bench_100x20.duckdb"}  # no compare store: not asked for
