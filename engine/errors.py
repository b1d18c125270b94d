"""The one exception type for mistakes a user can fix (bad file, unknown model, missing GPU).

The CLI prints its message as a single line and exits non-zero; a Jupyter notebook shows it as
one line too (UserError._render_traceback_); anything else is a bug and keeps its traceback.

A message often quotes what the user gave (a cell of a file, a name, a query), and that can be
anything: a 40 MB cell made a 40 MB terminal line and a 40 MB toast, an escape code in a cell
rewrote the terminal that printed the refusal. So a message quotes a value through `quoted`
(bounded, control characters escaped), and every face prints a message through `message_line`,
which bounds and escapes the whole line as a last wall for messages that quote without it.
"""

import unicodedata

# What a message quotes of one value, and the longest line a face prints for one message; the
# line keeps its head and its tail, where the rule that was broken is usually named.
QUOTE_CHARS = 200
MESSAGE_CHARS = 2_000
_MESSAGE_TAIL_CHARS = 400


class UserError(Exception):
    """A problem with the user's input or environment, described in one line."""

    def _render_traceback_(self) -> list[str]:
        # IPython (Jupyter's kernel) shows these lines in place of the traceback: an unknown
        # experiment in a notebook cell is one line, as on the command line, not 30 lines of
        # engine internals. Plain Python and scripts keep the usual traceback.
        return [f"{type(self).__name__}: {message_line(self)}"]


# Places a message may send its reader to, named in a WordedError's template as fields are
# ({see_runs}): here in the command line's words, which the Python API shows too (its users have
# the command line); the app words them as its own tabs and boxes (demo.field_words). A place's
# words may quote the message's values ({study}).
PLACES: dict[str, str] = {
    "see_experiments": "see `python -m engine list`",
    "see_runs": "see `python -m engine list --runs`",
    "see_studies": "see `python -m engine list --studies`",
    "judge_first": "judge them first (`python -m engine verify`, `import-labels`)",
    "fit_on_the_store": "run `python -m engine why-cited` on the store",
    "fit_study_on_the_store": "run `python -m engine why-cited --study {study}` on the store (no bound there)",
}


class WordedError(UserError):
    """A user error whose line names fields or places, which each face words its own way.

    `template` is the line with every field it names as `{field}` and every place as `{place}`
    (PLACES), and the user's values as `{name}` given in `values` (substituted once, never read as
    fields). The CLI words fields as its options (--top-k), the app as its form's labels, so that
    neither shows the other's vocabulary (`worded`); str() names fields plainly, for the Python API.
    """

    def __init__(self, template: str, **values: object):
        self.template, self.values = template, values
        super().__init__(self.worded(str))

    def worded(self, name_of, places: dict[str, str] | None = None) -> str:
        """The line with each field named by `name_of(field)` and each place by `places` (else PLACES)."""
        return self.template.format_map(_Words(name_of, self.values, {**PLACES, **(places or {})}))

    def __reduce__(self):  # its own arguments, not the worded line (a pickled error rebuilds)
        return (_worded_error, (self.template, self.values))


class FieldError(WordedError):
    """A WordedError about one field of a request, by the field's plain name ("top_k", "modes")."""

    def __init__(self, field: str, template: str, **values: object):
        self.field = field
        super().__init__(template, **values)

    def __reduce__(self):
        return (_field_error, (self.field, self.template, self.values))


def _worded_error(template: str, values: dict) -> WordedError:
    return WordedError(template, **values)


def _field_error(field: str, template: str, values: dict) -> FieldError:
    return FieldError(field, template, **values)


class _Words(dict):
    """The template's names: the values given, the places, and any other name a field, worded by name_of."""

    def __init__(self, name_of, values: dict, places: dict[str, str]):
        super().__init__(values)
        self.name_of, self.places, self.given = name_of, places, values

    def __missing__(self, key: str) -> str:
        if key in self.places:  # its words may quote the values, never fields or places
            return self.places[key].format_map(self.given)
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


def _shown_char(ch: str) -> str:
    """`ch` as a message shows it: control, format and separator characters (escape codes, line
    breaks, bidi overrides, zero-width spaces) as their Python escape, so that they do nothing."""
    if ch == " " or (ch.isprintable() and unicodedata.category(ch) not in ("Cf", "Zl", "Zp", "Cs")):
        return ch
    return ch.encode("unicode_escape", errors="backslashreplace").decode("ascii")


def _text_of(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return str(value)
        except ValueError:  # Python refuses to write ints of more than 4,300 digits as text
            return f"a number of about {int(value.bit_length() * 0.30103):,} digits"
    return "" if value is None else str(value)


def _escaped_head(text: str, limit: int) -> tuple[str, int]:
    """The escaped start of `text` of at most `limit` characters, and how many of text's it shows."""
    out: list[str] = []
    used = 0
    for i, ch in enumerate(text):
        piece = _shown_char(ch)
        if used + len(piece) > limit:
            return "".join(out), i
        out.append(piece)
        used += len(piece)
    return "".join(out), len(text)


def quoted(value: object, limit: int = QUOTE_CHARS) -> str:
    """`value` as a message quotes it: control characters escaped, and at most `limit` characters
    followed by how many were left out ("… (39,999,800 more characters)")."""
    text = _text_of(value)
    head, shown = _escaped_head(text, limit)
    more = len(text) - shown
    return head if not more else f"{head}… ({more:,} more character{'' if more == 1 else 's'})"


def message_line(message: object, limit: int = MESSAGE_CHARS) -> str:
    """A message as a face prints it: one line with control characters escaped, and at most about
    `limit` characters: a longer one keeps its head and tail around how much was left out."""
    text = _text_of(message)
    head, shown = _escaped_head(text, limit)
    if shown == len(text):
        return head
    keep_tail = min(_MESSAGE_TAIL_CHARS, limit // 5)
    head, shown = _escaped_head(text, limit - keep_tail)
    rest = text[shown:]
    tail_text = rest[-keep_tail:]
    tail = "".join(map(_shown_char, tail_text))[-keep_tail:]
    left_out = len(rest) - len(tail_text)
    return f"{head} … ({left_out:,} characters left out) … {tail}" if left_out else head + tail
