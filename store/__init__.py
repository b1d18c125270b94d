"""DuckDB persistence: connections and migrations (db), the run sink (RunStore), read queries.

Read-side SQL lives in `store.queries`; import it explicitly (its DataFrame functions import pandas).
"""

from store.db import Database, connect
from store.db_errors import DatabaseBusy
from store.run_store import ResumableRun, RunStore

__all__ = ["Database", "DatabaseBusy", "ResumableRun", "RunStore", "connect"]
