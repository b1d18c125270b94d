"""The query drill-down (`/query_detail`): one item of an experiment across vanilla, base and cf,
and the navigation around it (the experiments to choose from, the item list with its search and
filter, previous / next, the permalink). Plain functions: values in, values out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from demo import render
from demo.field_words import app_message
from demo.settings import without_server_paths
from engine.bounds import PAGE_MAX_CHOICES, for_page
from engine.errors import UserError
from engine.usecases.runs.items import item_detail, item_filters, item_ids
from engine.usecases.runs.listing import experiments

if TYPE_CHECKING:
    import pandas as pd


METRIC_COLUMNS = ("mode", "run_id", "precision", "recall", "f1", "exact_match")
_LONGEST_SHOWN = 200  # characters of a visitor's reference echoed back in a message
# A reference or search longer than this is refused before it reaches the store: no experiment
# id, name, item id or question needs more, and a visitor's megabyte is not echoed anywhere.
MAX_INPUT_CHARS = 1000
# The item filter, as (shown label, value); the values other than "all" are store.queries.CHANGED_FILTERS.
CHANGED_CHOICES = (
    ("all items", "all"),
    ("citations changed between modes", "modes"),
    ("citations changed between base and cf", "base_cf"),
)
_CHANGED_WORDS = {"modes": "whose citations changed between modes", "base_cf": "whose citations changed between base and cf"}
# The item dropdown lists at most this many ids (the first of the filtered list); previous /
# next and typed ids reach every item, so a 10,000-item experiment does not ship its whole list.
ITEM_CHOICES_MAX = 1000


def query_detail(db: Path, experiment: str, item_id: str) -> tuple[str, pd.DataFrame]:
    """The drill-down HTML and a per-mode metrics table; a one-line message (and an empty
    table) for an unknown experiment or item, or a store that cannot be read."""
    page, frame, _ = _detail(db, experiment, item_id)
    return page, frame


def _detail(db: Path, experiment: Any, item_id: Any) -> tuple[str, pd.DataFrame, str | None]:
    """(HTML, metrics, the experiment's id when the item was found, else None)."""
    import pandas as pd

    empty = pd.DataFrame(columns=list(METRIC_COLUMNS))
    try:
        experiment = clean_input(experiment, "experiment")
        item_id = clean_input(item_id, "item id")
        if not experiment:
            return render.message("choose an experiment"), empty, None
        if not item_id:
            return render.message("choose an item"), empty, None
        lookup = item_detail(db, experiment, item_id, with_use=True)
        detail = lookup.detail
        if detail is None:
            if not lookup.known_experiment:
                return render.message(f"unknown experiment '{shown_reference(experiment)}'"), empty, None
            return render.message(f"experiment '{shown_reference(experiment)}' has no item '{shown_reference(item_id)}'"), empty, None
    except UserError as err:
        return render.message(visitor_line(err, db)), empty, None
    frame = pd.DataFrame(
        [
            (m.mode, m.run_id, *(getattr(m.metrics, c) if m.metrics else None for c in METRIC_COLUMNS[2:]))
            for m in detail.modes
        ],
        columns=list(METRIC_COLUMNS),
    )
    return render.query_page(detail, lookup.use, lookup.reruns, lookup.no_rerun_note()), frame, detail.experiment_id


def shown_reference(reference: str) -> str:
    """A visitor's reference, cut to one short line for a message."""
    one_line = " ".join(reference.split())
    return one_line if len(one_line) <= _LONGEST_SHOWN else one_line[: _LONGEST_SHOWN - 1] + "…"


def visitor_line(err: UserError, db: Path) -> str:
    """A store's message for a visitor: one line in the app's words (demo.field_words), the
    database file named only as "file"."""
    return without_server_paths(app_message(err), db, shown="file")


def clean_input(value: Any, what: str) -> str:
    """A visitor's text (a box, a URL parameter or an API argument) stripped; UserError in one
    line when it is too long or is not text the store can take (a lone surrogate from JSON)."""
    text = "" if value is None else str(value).strip()
    if len(text) > MAX_INPUT_CHARS:
        raise UserError(f"the {what} is too long ({len(text):,} characters; at most {MAX_INPUT_CHARS:,})")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"the {what} is not valid text") from None
    return text


# ---------------------------------------------------------------- choosing an experiment


def experiment_choices(db: Path, *, with_modes: bool = False) -> list[tuple[str, str]]:
    """The stored experiments, newest first, as (label, experiment id) for a dropdown: the label
    shows the name (when given), the id and the model (and the stored modes, `with_modes`). Empty
    when nothing is stored yet. Every tab that picks an experiment (Query, Explain, the Runs
    tab's export, Compare) lists them with this."""
    if not Path(db).is_file():
        return []
    choices = []
    for e in experiments(db)[:PAGE_MAX_CHOICES]:  # the browser gets a bounded list
        parts = (e.name, e.experiment_id, for_page(e.model, 60), ",".join(e.modes) if with_modes else "")
        choices.append((for_page(" · ".join(part for part in parts if part)), e.experiment_id))
    return choices


# ---------------------------------------------------------------- the item list, previous / next


@dataclass(frozen=True)
class ItemList:
    """An experiment's item ids in dataset order, as a search and a filter leave them."""

    experiment_id: str
    item_ids: tuple[str, ...]
    search: str = ""
    changed: str | None = None  # None (all) or one of store.queries.CHANGED_FILTERS

    def position(self, item_id: str) -> int | None:
        """1-based position of the item in the list; None when it is not there."""
        try:
            return self.item_ids.index(item_id) + 1
        except ValueError:
            return None

    def neighbour(self, item_id: str | None, step: int) -> str | None:
        return neighbour(self.item_ids, item_id, step)

    def describe(self, item_id: str | None = None) -> str:
        """One line: "item 3 of 67", why the list is empty, or that the item is not in it."""
        scope = ""
        if self.search:
            scope += f" matching '{shown_reference(self.search)}'"
        if self.changed:
            scope += f" {_CHANGED_WORDS[self.changed]}"
        n = len(self.item_ids)
        if n == 0:
            if scope:
                return f"no items{scope} in experiment {self.experiment_id}"
            return f"experiment {self.experiment_id} has no answered items yet"
        position = self.position(item_id) if item_id else None
        if position is not None:
            return f"item {position} of {n}{scope}"
        noun = "item" if n == 1 else "items"
        if item_id:
            return f"item '{shown_reference(item_id)}' is not among the {n} {noun}{scope}"
        return f"{n} {noun}{scope}"


def neighbour(item_ids: tuple[str, ...] | list[str], current: str | None, step: int) -> str | None:
    """The item `step` places from `current`, wrapping at both ends; None for an empty list.
    An item not in the list (filtered out, or none yet) steps in from the nearer end: next
    gives the first item, previous the last; step 0 gives the item itself, or the first."""
    if not item_ids:
        return None
    if current is not None and current in item_ids:
        return item_ids[(list(item_ids).index(current) + step) % len(item_ids)]
    return item_ids[-1] if step < 0 else item_ids[0]


def changed_filter(value: Any) -> str | None:
    """The filter's value as store.queries.item_ids takes it: None for all items."""
    text = "" if value is None else str(value).strip()
    if text in ("", "all"):
        return None
    if text not in item_filters():
        raise UserError(f"unknown filter '{shown_reference(text)}' (choose from all, {', '.join(item_filters())})")
    return text


def item_list(db: Path, experiment: Any, search: Any = "", changed: Any = "all") -> ItemList:
    """The experiment's items in dataset order whose question or item id contains `search`
    (case-insensitive, literal text), kept by the filter ("all", "modes" or "base_cf").
    UserError in one line for an unknown experiment or filter, or a store that cannot be read."""
    experiment = clean_input(experiment, "experiment")
    search = clean_input(search, "search text")
    changed = changed_filter(changed)
    if not experiment:
        raise UserError("choose an experiment")
    try:
        found = item_ids(db, experiment, search or None, changed)
        if found is None:
            raise UserError(f"unknown experiment '{shown_reference(experiment)}'")
    except UserError as err:
        raise UserError(visitor_line(err, db)) from None
    return ItemList(found.experiment_id, found.item_ids, search, changed)


def query_items(db: Path, experiment: Any, search: Any = "", changed: Any = "all") -> list[str]:
    """The `/query_items` endpoint: the item ids `item_list` keeps, in dataset order."""
    return list(item_list(db, experiment, search, changed).item_ids)


# ---------------------------------------------------------------- the whole view, and its permalink


@dataclass(frozen=True)
class QueryView:
    """What the Query tab shows after a choice, a search or a step."""

    item_id: str  # the item shown, or asked for
    page: str  # demo.render HTML: the drill-down, or a one-line message
    metrics: Any  # pandas DataFrame of METRIC_COLUMNS (empty with a message)
    position: str  # one line: "item 3 of 67", or what went wrong
    permalink: str  # "?experiment=…&item=…" for the item shown; "" when none is shown
    choices: tuple[str, ...]  # item ids for the dropdown (the first ITEM_CHOICES_MAX of the list)


def open_view(db: Path, experiment: Any, item_id: Any = "", search: Any = "", changed: Any = "all",
              step: int = 0) -> QueryView:
    """The view of `item_id` (step 0), or of the item `step` places from it in the filtered list.
    With no item, the list's first item; an item outside the list is still shown when it exists."""
    import pandas as pd

    try:
        listing = item_list(db, experiment, search, changed)
        item_id = clean_input(item_id, "item id")
    except UserError as err:
        line = str(err)
        return QueryView(_shown_text(item_id), render.message(line), pd.DataFrame(columns=list(METRIC_COLUMNS)),
                         line, "", ())
    choices = listing.item_ids[:ITEM_CHOICES_MAX]
    if step or not item_id:
        item_id = listing.neighbour(item_id or None, step) or ""
    if not item_id:  # an empty list: nothing to show
        line = listing.describe()
        return QueryView("", render.message(line), pd.DataFrame(columns=list(METRIC_COLUMNS)), line, "", choices)
    page, frame, found = _detail(db, listing.experiment_id, item_id)
    if found is None:
        line = f"experiment '{shown_reference(listing.experiment_id)}' has no item '{shown_reference(item_id)}'"
        return QueryView(item_id, page, frame, line, "", choices)
    return QueryView(item_id, page, frame, listing.describe(item_id), permalink(found, item_id), choices)


def locate(db: Path, experiment: Any, item_id: Any, search: Any = "", changed: Any = "all") -> tuple[tuple[str, ...], str, str]:
    """(dropdown choices, position line, permalink) for an item that `/query_detail` draws: the
    same as `open_view` gives, without drawing the page again."""
    try:
        listing = item_list(db, experiment, search, changed)
        item_id = clean_input(item_id, "item id")
        choices = listing.item_ids[:ITEM_CHOICES_MAX]
        if not item_id:
            return choices, listing.describe(), ""
        exists = item_id in listing.item_ids
        if not exists and (listing.search or listing.changed):  # filtered out, but it may be there
            whole = item_ids(db, listing.experiment_id)
            exists = whole is not None and item_id in whole.item_ids
    except UserError as err:
        return (), visitor_line(err, db), ""
    if not exists:
        return choices, f"experiment '{shown_reference(listing.experiment_id)}' has no item '{shown_reference(item_id)}'", ""
    return choices, listing.describe(item_id), permalink(listing.experiment_id, item_id)


def _shown_text(value: Any) -> str:
    """A box's value put back in the box: cut to the longest accepted, so a huge one is not echoed."""
    text = "" if value is None else str(value)
    return text[: MAX_INPUT_CHARS + 1]


def permalink(experiment_id: str, item_id: str) -> str:
    """The relative URL (query string only) that opens this view: `?experiment=ID&item=ITEM`,
    each value percent-encoded; "" when either is missing."""
    from urllib.parse import quote, urlencode

    if not experiment_id or not item_id:
        return ""
    return "?" + urlencode({"experiment": experiment_id, "item": item_id}, quote_via=quote, safe="")


def view_from_params(params: Mapping[str, str] | None) -> tuple[str, str] | None:
    """The (experiment, item) a permalink's query parameters name, or None when they name no
    experiment. Values are stripped and cut just past MAX_INPUT_CHARS, so that an absurd URL is
    refused by `open_view` in one line instead of being echoed whole; an item may be "" (the
    experiment's first item)."""
    if not params:
        return None
    experiment = _shown_text(params.get("experiment")).strip()
    if not experiment:
        return None
    return experiment, _shown_text(params.get("item")).strip()
