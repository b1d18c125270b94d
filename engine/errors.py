"""The one exception type for mistakes a user can fix (bad file, unknown model, missing GPU).

The CLI prints its message as a single line and exits non-zero; anything else is a bug and
keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input or environment, described in one line."""


class RunCancelled(Exception):
    """A run stopped on request (between batches, or a batch cut short and not written); its
    committed batches stay and it resumes. Here, not in the write loop, so that generation can
    raise it without importing the loop."""
