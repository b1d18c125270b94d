"""The Bias page (engine.usecases.bias.page) for the experiments a person typed and picked: a text
of ids or names separated by commas, and a list. A name that itself holds a comma still works
typed alone: the whole text is tried first. One read session (store.queries.ReadSession) serves
the whole request, and what was computed now rather than found kept is kept in the store after it
closes (store.derived).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from engine.usecases.bias import page as usecase

if TYPE_CHECKING:
    from engine.usecases.bias.page import BiasPage, ExperimentBias, Skipped
    from store.queries import ReadSession


def experiment_references(text: str, chosen: Sequence[str] | None = ()) -> list[str]:
    """The experiments named in the text (an id or name, or several separated by commas) and the
    list, in order, without repeats."""
    refs = [r.strip() for r in (text or "").split(",")] + [str(c).strip() for c in (chosen or ())]
    return list(dict.fromkeys(r for r in refs if r))


def _references(session: ReadSession, text: str, chosen: Sequence[str] | None) -> list[str]:
    """The references of the text and the list: a name that contains a comma is tried whole
    first, typed alone (the session remembers the lookup)."""
    whole = (text or "").strip()
    if "," in whole and session.experiment_id(whole):
        return experiment_references("", [whole, *(chosen or ())])
    return experiment_references(text, chosen)


def chosen_page(db_path: Path, text: str, chosen: Sequence[str] | None = (), *,
                resamples: int | None = None) -> BiasPage:
    """The Bias page of the experiments typed and chosen; UserError in one line for none chosen,
    a missing store or an unknown reference (checked before the store is opened: an open would
    create a missing one). What the page computed rather than found kept is kept afterwards."""
    from store.queries import keep_pending, read_session

    db_path = Path(db_path)
    usecase.check_request(db_path, experiment_references(text, chosen))
    with read_session(db_path) as session:
        page = usecase.bias_page(session, _references(session, text, chosen), resamples=resamples)
    keep_pending(session)
    return page


def chosen_reports(db_path: Path, text: str, chosen: Sequence[str] | None = ()
                   ) -> tuple[tuple[ExperimentBias, ...], tuple[Skipped, ...]]:
    """bias's report of each experiment typed and chosen, and those skipped for having nothing to
    compare yet, without the page's tables and plots; the refusals of `chosen_page`."""
    from store.queries import read_session

    db_path = Path(db_path)
    usecase.check_request(db_path, experiment_references(text, chosen))
    with read_session(db_path) as session:
        return usecase.experiment_reports(session, _references(session, text, chosen), None)
