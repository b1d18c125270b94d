"""The one exception type for mistakes a user can fix (bad file, unknown model, missing GPU).

The CLI prints its message as a single line and exits non-zero; anything else is a bug and
keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input or environment, described in one line."""
