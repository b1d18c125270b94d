"""The study model's per-configuration label effects, kept in the store (table study_label_effects,
migration 021) when `why-cited --study NAME --save` asks: a save replaces the study's rows of the
same modes in one write transaction, so a reader sees the old rows or the new ones, never a mix."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from store.db import connect, utc_now

COLUMNS = ("configuration", "configuration_json", "label_a", "label_b", "n_answers", "n_items", "log_odds", "se",
           "ci_low", "ci_high", "odds_ratio", "or_low", "or_high", "p", "interaction_chi2", "interaction_df",
           "interaction_p")


def save_study_effects(db: str | os.PathLike[str], study: str, modes: str, rows: Sequence[dict[str, Any]]) -> int:
    """Replace the study's rows of these modes by `rows` (dicts with COLUMNS); how many were written."""
    now = utc_now()
    values = [[study, modes, *(json.dumps(r[c]) if c == "configuration_json" else r[c] for c in COLUMNS), now]
              for r in rows]
    with connect(db) as conn:
        conn.execute("DELETE FROM study_label_effects WHERE study = ? AND modes = ?", [study, modes])
        if values:
            conn.executemany(f"INSERT INTO study_label_effects (study, modes, {', '.join(COLUMNS)}, fitted_utc) "
                             f"VALUES ({', '.join('?' * (len(COLUMNS) + 3))})", values)
    return len(values)
