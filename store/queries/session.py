"""One request's read of a store, as one value.

A page reads many things: each experiment's kept report and kept Table 2 rows, Table 1's runs,
the probabilities, the shares. Read through one connection, they show one state of the store.
In that one state,
- each experiment's signature (store.derived) is computed once, and shared by every kept value
  of the experiment the request looks up (each costs tens of ms at 1M answers);
- a reference (an experiment's id or name) is looked up once;
- values computed now rather than found kept are collected, for the caller to keep once the
  read has ended (`keep`: a read transaction cannot write).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from store import derived
from store.db import DbLike, as_database
from store.derived import Derived, keep, lookup
from store.queries._read import reading
from store.queries.experiments import resolve_experiment


@dataclass(frozen=True)
class ReadSession:
    """A request's open read of the store at `path`: its connection and what it found out so far.

    The value is frozen; the three records it holds grow as the request reads."""

    path: Path
    conn: duckdb.DuckDBPyConnection
    pending: list[Derived] = field(default_factory=list)  # computed now: kept by `keep_pending`
    signatures: dict[str, str] = field(default_factory=dict)  # experiment id -> its signature now
    resolved: dict[str, str | None] = field(default_factory=dict)  # reference -> experiment id, None: unknown

    @property
    def db(self) -> Any:
        """The connection, as the store's queries take it: they are typed for a store, and read an
        open connection the same way (store.queries._read.reading)."""
        return self.conn

    def experiment_id(self, reference: str) -> str | None:
        """The experiment an id or a `run --experiment` name names, looked up once; None if none."""
        if reference not in self.resolved:
            self.resolved[reference] = resolve_experiment(self.conn, reference)
        return self.resolved[reference]

    def signature(self, experiment_id: str) -> str:
        """The experiment's signature in this read (store.derived), computed once: each costs tens
        of ms at 1M answers, and the Bias page reads a kept report and kept Table 2 rows of the same
        experiments. A version number the writer bumps would be cheaper still, but every path that
        changes runs (run, resume, merge, import, a migration, SQL typed by hand) would have to
        bump it; the signature reads what the value depends on."""
        if experiment_id not in self.signatures:
            # Read on its module at call time: tests count the calls there.
            self.signatures[experiment_id] = derived.experiment_signature(self.conn, experiment_id)
        return self.signatures[experiment_id]

    def kept(self, kind: str, experiment_id: str, key: str) -> Any | None:
        """The value of `kind` kept for the experiment and `key`, while its signature is today's;
        None otherwise."""
        return lookup(self.conn, kind, experiment_id, key, self.signature(experiment_id))

    def computed(self, kind: str, experiment_id: str, key: str, value_json: str) -> None:
        """A value computed in this read, to keep under the signature it was computed from."""
        self.pending.append(Derived(kind, experiment_id, key, self.signature(experiment_id), value_json))


@contextmanager
def read_session(db: DbLike | ReadSession) -> Iterator[ReadSession]:
    """A ReadSession on the store `db`, its connection closed at the end of the block; or `db`
    itself when it is a session already (a request's, which its caller ends)."""
    if isinstance(db, ReadSession):
        yield db
        return
    with reading(db) as conn:
        yield ReadSession(as_database(db).path, conn)


def keep_pending(session: ReadSession) -> bool:
    """Keep what the session computed (after its read has ended); False when the store could not
    take it now (store.derived.keep: it is computed again next time)."""
    return keep(session.path, session.pending)
