"""How the app names a request's fields in its messages: by the Run tab's labels.

The use cases raise engine.errors.FieldError naming fields plainly (top_k: the run option's
name, engine.usecases.runs.run_options); the CLI words them as its options (--top-k), which mean
nothing to a visitor of a web page. Here each field is named as the form shows it, so that no message the app shows speaks
of options or commands.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from engine.errors import UserError, WordedError
from engine.usecases.runs.run_options import RUN_OPTIONS

# The Run tab's options as a sentence names them (engine.usecases.runs.run_options), and the store,
# which is not a visitor's choice: the operator names it where the app starts (docs/operations.md).
FIELD_LABELS: dict[str, str] = {**{o.name: o.label for o in RUN_OPTIONS}, "db": "PATTRIEVAL_DB where the app starts"}
# The other tabs' boxes that a use case's message names.
OTHER_LABELS: dict[str, str] = {
    "margin": "the equivalence margin",  # Compare
    "pair_by_id": "a tick in \"pair by id\"",  # Compare
    "judge": "the judge's name",  # Judges' label import
    "experiment": "an experiment",  # Judges
    "runs": "runs",  # Judges
}
# Where a message sends a visitor (engine.errors.PLACES), as the app's tabs show it.
APP_PLACES: dict[str, str] = {
    "see_experiments": "the Runs tab lists them",
    "see_runs": "the Runs tab lists them",
    "see_studies": "the Runs tab's study filter lists them",
    "judge_first": "judge them first (the verify command), or import people's labels below",
}


def field_label(field: str) -> str:
    """How the app names `field` (a field it has no label for: its name in words)."""
    return FIELD_LABELS.get(field) or OTHER_LABELS.get(field) or field.replace("_", " ")


def app_message(err: object) -> str:
    """An error's line as the app shows it."""
    return err.worded(field_label, APP_PLACES) if isinstance(err, WordedError) else str(err)


@contextmanager
def app_worded() -> Iterator[None]:
    """Within it, a WordedError becomes a UserError worded with the form's labels: what a handler
    raises then reads the same to the Run tab, to an API caller and to a script."""
    try:
        yield
    except WordedError as err:
        raise UserError(app_message(err)) from None
