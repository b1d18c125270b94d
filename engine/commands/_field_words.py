"""How the CLI names a request's fields in its messages: as the option that sets each one.

The use cases raise engine.errors.FieldError naming fields plainly (top_k: the run option's name,
engine.usecases.runs.run_options); every CLI message goes through cli_message, so that they read
`--top-k` here and the app's form labels there.
"""

from __future__ import annotations

from engine.errors import WordedError
from engine.usecases.runs.run_options import OPTIONS

# Fields the CLI sets in more than one way: the store is --db or, for every command, $PATTRIEVAL_DB.
OTHER_WORDS: dict[str, str] = {"db": "--db or PATTRIEVAL_DB"}


def option_name(field: str) -> str:
    """The option that sets `field` (a run option's, or another command's option of that dest)."""
    return OTHER_WORDS.get(field) or (OPTIONS[field].option if field in OPTIONS else "--" + field.replace("_", "-"))


def cli_message(err: object) -> str:
    """An error's line as the CLI prints it."""
    return err.worded(option_name) if isinstance(err, WordedError) else str(err)
