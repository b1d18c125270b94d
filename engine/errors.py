"""The one exception type for mistakes a user can fix (bad file, unknown model, missing GPU).

The CLI prints its message as a single line and exits non-zero; a Jupyter notebook shows it as
one line too (UserError._render_traceback_); anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input or environment, described in one line."""

    def _render_traceback_(self) -> list[str]:
        # IPython (Jupyter's kernel) shows these lines in place of the traceback: an unknown
        # experiment in a notebook cell is one line, as on the command line, not 30 lines of
        # engine internals. Plain Python and scripts keep the usual traceback.
        return [f"{type(self).__name__}: {self}"]


class FieldError(UserError):
    """A user error in one field of a request, by the field's plain name ("top_k", "modes").

    `template` is the line with every field it names as `{field}`, and the user's values as
    `{name}` given in `values` (substituted once, never read as fields). Each face words the
    fields its own way (`worded`): the CLI as its options (--top-k), the app as its form's labels,
    so that neither shows the other's vocabulary. str() names them plainly, for the Python API.
    """

    def __init__(self, field: str, template: str, **values: object):
        self.field, self.template, self.values = field, template, values
        super().__init__(self.worded(str))

    def worded(self, name_of) -> str:
        """The line with each field named by `name_of(field)`."""
        return self.template.format_map(_Words(name_of, self.values))

    def __reduce__(self):  # its own arguments, not the worded line (a pickled error rebuilds)
        return (_field_error, (self.field, self.template, self.values))


def _field_error(field: str, template: str, values: dict) -> FieldError:
    return FieldError(field, template, **values)


class _Words(dict):
    """The template's names: the values given, and any other name a field, worded by name_of."""

    def __init__(self, name_of, values: dict):
        super().__init__(values)
        self.name_of = name_of

    def __missing__(self, key: str) -> str:
        return self.name_of(key)


class RunCancelled(Exception):
    """A run stopped on request (between batches, or a batch cut short and not written); its
    committed batches stay and it resumes. Here, not in the write loop, so that generation can
    raise it without importing the loop."""


def interrupted_query(err: BaseException) -> bool:
    """Whether `err` is DuckDB's answer to Ctrl-C during a query. Its Python client raises a
    plain RuntimeError("Query interrupted") in place of the KeyboardInterrupt (2.0.0 and 2.0.1,
    seen; duckdb's own errors are not RuntimeErrors): an interrupt, not a failure. A Ctrl-C that
    landed while a run wrote a batch ended `run` with that traceback and exit status 1."""
    return type(err) is RuntimeError and str(err) == "Query interrupted"
