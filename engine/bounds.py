"""Bounds on the names and labels people type, checked in one place for every entry.

Why: whatever a name holds is stored, then sent to every later visitor of the app and printed
by every later `list` or `report`. A 20 MB metadata name grew a store by 300 MB and froze the
Bias tab's dropdown; an escape code in a label rewrote the terminal of whoever listed it. So
the CLI, the app and the Python API all pass names through `check_name` before anything is
written (engine.prompting.prompts.MetadataType and engine.running.runner.RunRequest call it on construction).

Stores written before these bounds may still hold such text: `for_terminal` escapes it on
output and `for_page` cuts it for a page.
"""

from __future__ import annotations

import unicodedata

from engine.errors import UserError

# Generous for real names ("gender", "written by a woman", a two-sentence consideration);
# small enough that a page listing hundreds of them stays light. Documented in README "Security".
MAX_NAME_CHARS = 100  # metadata type, experiment, study
MAX_LABEL_CHARS = 200  # label A / label B
MAX_CONSIDERATION_CHARS = 1_000  # the sentence added as consideration 3
MAX_MODEL_CHARS = 500  # a Hub id or a local folder

# What a page shows of one stored name, and how many entries a dropdown offers.
PAGE_LABEL_CHARS = 120
PAGE_MAX_CHOICES = 500

# Bidirectional overrides and isolates (category Cf) reorder what a reader sees.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


def _bad_char(ch: str) -> bool:
    """A character no name needs: control codes (ESC, newline, DEL, C1), separators, and every
    format character (Cf: bidi overrides, the soft hyphen, zero-width spaces and joiners), which
    is invisible, so that "pi\u00adlot" shows as a second "pilot" (issue 29)."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs") or ch in _BIDI


# Scripts whose letters pass for one another: "оperator-pilot" with a Cyrillic о shows as
# "operator-pilot". A name keeps to one of them; other scripts (CJK, Arabic, ...) do not mix
# with these look-alikes and are left alone.
_LOOKALIKE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


def _script(ch: str) -> str | None:
    """LATIN, CYRILLIC or GREEK for a letter of that script (by its Unicode name), else None."""
    if not unicodedata.category(ch).startswith("L"):
        return None
    name = unicodedata.name(ch, "")
    return next((s for s in _LOOKALIKE_SCRIPTS if name.startswith(s + " ")), None)


def _lookalike(value: str, what: str) -> str | None:
    """Why `value` may pass for another name (a letter in a compatibility form, such as fullwidth
    ｏ or mathematical 𝐨, or letters of two look-alike scripts), else None."""
    letters: dict[str, list[int]] = {}  # script: the positions of its letters
    for i, ch in enumerate(value, start=1):
        if unicodedata.category(ch).startswith("L") and unicodedata.normalize("NFKC", ch) != ch:
            return (f"{what} holds U+{ord(ch):04X} ({unicodedata.name(ch, '?').lower()}) at character {i}, "
                    "a variant of an ordinary letter; write the letter itself")
        script = _script(ch)
        if script is not None:
            letters.setdefault(script, []).append(i)
    if len(letters) < 2:
        return None
    # Name the odd one out: the first letter of the script with the fewest letters.
    ranked = sorted(letters, key=lambda k: (-len(letters[k]), letters[k][0]))
    main, odd = ranked[0], ranked[-1]
    i = letters[odd][0]
    ch = value[i - 1]
    return (f"{what} mixes {main.title()} letters with {odd.title()} ones (U+{ord(ch):04X} "
            f"{unicodedata.name(ch).lower()} at character {i}), so it can pass for another name; "
            "write it in one script")


def check_name(value: str, what: str, limit: int = MAX_NAME_CHARS, *, one_script: bool = True) -> str:
    """`value` unchanged if it is at most `limit` characters without control or format characters
    and, with `one_script`, without look-alike letters (see _lookalike); else UserError naming
    `what` and the rule. Labels and sentences pass one_script=False: they are prose, which may
    quote a word of another script, and no one picks an experiment by them."""
    if not isinstance(value, str):
        raise UserError(f"{what} must be text, not {type(value).__name__}")
    if len(value) > limit:
        raise UserError(f"{what} is {len(value):,} characters long (at most {limit:,})")
    for i, ch in enumerate(value, start=1):
        if _bad_char(ch):
            raise UserError(f"{what} holds the control character U+{ord(ch):04X} at character {i}; "
                            "names and labels are plain text on one line, with no invisible characters")
    problem = _lookalike(value, what) if one_script else None
    if problem:
        raise UserError(problem)
    return value


def for_terminal(text: object, *, keep_newlines: bool = False) -> str:
    """Stored text fit for a terminal: control characters (escape codes, newlines) escaped.

    `keep_newlines` is for whole reports whose own lines are already built; cells and names
    should escape them, so that a stored newline cannot forge a row."""
    s = "" if text is None else str(text)

    def safe(ch: str) -> bool:
        return ch == " " or (keep_newlines and ch in "\n\t") or (ch.isprintable() and not _bad_char(ch))

    if all(safe(ch) for ch in s):
        return s
    return "".join(ch if safe(ch) else ch.encode("unicode_escape").decode("ascii") for ch in s)


def json_for_terminal(text: str) -> str:
    """JSON text with every control character inside its strings written as a \\uXXXX escape:
    json.dumps escapes C0 controls itself, not DEL, C1 (0x9b starts a terminal command) or bidi."""
    return "".join(f"\\u{ord(ch):04x}" if ch not in "\n " and _bad_char(ch) else ch for ch in text)


def for_page(text: object, limit: int = PAGE_LABEL_CHARS) -> str:
    """Stored text cut for a page's label: escaped as for a terminal and at most `limit` chars."""
    s = for_terminal(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"
