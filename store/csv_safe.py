"""CSV cells that a spreadsheet cannot run: OWASP's rule against formula injection, in one place.

Why: item ids, questions, answers, model and experiment names are typed by strangers (the app
is a public Space) and reach every CSV this tool writes. Excel, LibreOffice and Google Sheets
read a cell that begins with `=`, `+`, `-` or `@` as a formula (`=HYPERLINK(...)` leaks the
sheet, `+1+cmd|' /C calc'!A0` runs a program via DDE); a leading tab or carriage return hides
such a cell from a naive check. OWASP's rule: prefix such a cell with a single quote, which the
spreadsheet shows as text.

The rule applies to text cells only. A number stays a number: numeric columns (floats, ints)
are never touched, and text that is a plain number in full (`-3.2`, `+1e-5`: what a formula
cannot be) is kept as is, so a negative value read back from a text column is still a number.
A lone "-" (the tables' mark for "none") has no operand, so nothing to evaluate, and is kept.
Parquet and JSON keep every value raw: they are data, not sheets.

A formula may also start inside a cell. A spreadsheet in a semicolon locale (much of Europe)
splits "x;=1+1" into "x" and a live "=1+1", as a reader that ends rows at any line break does with
"x\n=1+1". So a formula after a separator (`;`, `,`, tab, `|`) or a line break, spaces allowed
between, gets its quote too: "x;'=1+1". Column names are cells as well: a SQL result's names are
the visitor's (`SELECT 1 AS "=HYPERLINK(...)"`), so csv_frame passes the header through the rule.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# The characters OWASP lists as the start of a formula (CSV Injection, 2024).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# A whole cell that is a number as a spreadsheet reads one; no spaces or tabs around it.
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
# Where another reader starts a new cell or row inside this one, and the spaces it may trim.
_SEPARATORS = ";,\t|\n\r"
_INNER_START = re.compile(r"([;,\t|\n\r] *)(?=[=+\-@])")


def csv_cell(value: Any) -> Any:
    """`value` fit for a CSV cell: text that a spreadsheet would read as a formula gets a leading
    single quote, a carriage return inside text becomes a line feed; anything else (numbers, None,
    plain text, numeric text) is returned unchanged."""
    if not isinstance(value, str):
        return value
    if value.startswith(FORMULA_START) and _formula(value):
        value = "'" + value
    if _INNER_START.search(value):
        value = _INNER_START.sub(lambda m: m.group(1) + ("'" if _formula(_segment(value, m.end())) else ""), value)
    # Python's csv writer (and so pandas) leaves a cell holding a bare CR unquoted when rows end
    # in LF, and a reader that ends rows at CR would split it into a forged row: "x\r=1+1" gives
    # a live "=1+1". As a LF the break stays a break inside the cell, and the writer quotes it.
    return value.replace("\r\n", "\n").replace("\r", "\n") if "\r" in value else value


def _formula(segment: str) -> bool:
    """Whether text that starts with a formula character is read as one: not a number, nor "-"."""
    return segment != "-" and not _NUMBER.fullmatch(segment)


def _segment(value: str, start: int) -> str:
    """The text from `start` to the next separator or line break: what a reader takes as a cell."""
    end = next((i for i in range(start, len(value)) if value[i] in _SEPARATORS), len(value))
    return value[start:end]


def csv_rows(rows: Any) -> list[list[Any]]:
    """Rows of cells (for csv.writer) with every cell passed through csv_cell."""
    return [[csv_cell(v) for v in row] for row in rows]


def csv_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of `frame` whose column names and text cells pass through csv_cell (for
    DataFrame.to_csv); numeric columns are left alone, so a negative number is still written as a number."""
    import pandas as pd

    safe = frame.copy()
    safe.columns = [csv_cell(c) for c in safe.columns]
    for i in range(safe.shape[1]):  # by position: a SQL result may repeat a column name
        series = safe.iloc[:, i]
        if series.dtype == object or isinstance(series.dtype, pd.StringDtype):
            safe.iloc[:, i] = series.map(csv_cell, na_action="ignore")
    return safe
