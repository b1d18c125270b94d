"""A mistyped store path in the Python API is one line and writes nothing (reading a path that is
no file would create an empty store there, folder and all, and then report nothing found)."""

from __future__ import annotations

import pytest

from engine import api
from engine.errors import UserError


@pytest.mark.parametrize("call", [
    lambda db: api.compare(api.CompareRequest("a", "b"), db=db),
    lambda db: api.why_cited(api.WhyCitedRequest(("x",)), db),
    lambda db: api.why_cited_study(api.StudyEffectsRequest("grid"), db),
    lambda db: api.bias_report(db, "x"),
], ids=["compare", "why_cited", "why_cited_study", "bias_report"])
def test_a_missing_store_is_one_line_and_nothing_is_written(tmp_path, call):
    missing = tmp_path / "nowhere" / "s.duckdb"
    with pytest.raises(UserError, match=r"^no database at .*s\.duckdb: give the path of a store$"):
        call(missing)
    assert not missing.parent.exists()
