"""A SQL console cell as the app shows it, and the bytes it takes in the reply: one rule for the
sandbox that bounds a result and for the page that shows it.

Why: a DuckDB result holds Python values of every kind (dates, times with a time zone, intervals,
UUIDs, decimals, blobs, 128-bit integers, nested lists, structs and maps), and Gradio sends the
table as JSON. orjson refuses a time with a time zone, and the visitor's reply died with a
traceback in the server's log; 128-bit integers broke it too, and a browser rounds integers past
2**53. So every cell is shown as a JSON scalar: exact numbers stay numbers, anything else is its
text, written the way DuckDB writes it, nested values as JSON text.

The result bound counts bytes, not characters: an emoji is one character and 4 bytes of UTF-8,
and 12 bytes on Gradio's /call route, which writes JSON with non-ASCII escaped ("\\ud83d\\ude00").
A cell is counted at that larger size, so no route's reply passes the bound.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

# A browser's numbers are doubles: an integer beyond this shows rounded, so it is shown as text.
EXACT_INTEGER = 2**53
# What a reply spends on a cell besides its value: the comma between cells, the brackets of a row.
_CELL_OVERHEAD_BYTES = 2


def shown_cell(value: Any) -> str | int | float | bool | None:
    """`value` (as DuckDB's Python client returns it) as a JSON scalar for the result table."""
    value = _plain(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) <= EXACT_INTEGER else str(value)
    if isinstance(value, float):
        # DuckDB's own spelling: a JSON encoder would write null (orjson) or bare NaN.
        return value if math.isfinite(value) else ("nan" if math.isnan(value) else "inf" if value > 0 else "-inf")
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(_nested(value), ensure_ascii=False)
    return _text(value)


def cell_bytes(value: Any) -> int:
    """Bytes the cell of `value` takes in a reply, on Gradio's route that writes the most."""
    return len(json.dumps(shown_cell(value))) + _CELL_OVERHEAD_BYTES  # ensure_ascii: the longer encoding


def _plain(value: Any) -> Any:
    """numpy and pandas scalars as Python's own (a frame's cells are numpy's); pandas' missing marks as None."""
    if type(value).__name__ in ("NaTType", "NAType"):
        return None
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item()
    return value


def _text(value: Any) -> str:
    """A scalar that is not a JSON number as text, in DuckDB's writing where Python's differs."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, datetime.timedelta):
        return _interval(value)
    return str(value)  # dates, times (with their zone), timestamps, UUIDs, decimals: exact as text


def _interval(delta: datetime.timedelta) -> str:
    """'-3 days 04:05:06.700000', not Python's '-4 days, 19:54:53.300000' for the same interval."""
    micros = delta // datetime.timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    days, rest = divmod(abs(micros), 86_400_000_000)
    seconds, micro = divmod(rest, 1_000_000)
    clock = f"{seconds // 3600:02}:{seconds // 60 % 60:02}:{seconds % 60:02}" + (f".{micro:06}" if micro else "")
    return f"{sign}{days} day{'' if days == 1 else 's'} {clock}" if days else f"{sign}{clock}"


def _nested(value: Any) -> Any:
    """A value inside a list, struct or map, for JSON text: exact integers at any size (it is text),
    keys as text, every other scalar as its cell."""
    value = _plain(value)
    if isinstance(value, dict):
        return {_key(k): _nested(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nested(v) for v in value]
    if value is None or isinstance(value, (bool, str, int)):
        return value
    return shown_cell(value)


def _key(key: Any) -> str:
    shown = _nested(key)
    return shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False)
