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


# Invisible characters outside the format category (Unicode's default-ignorables that are letters
# or marks): Hangul fillers, the combining grapheme joiner, variation selectors, Mongolian free
# variation selectors, Khmer's inherent vowels. "pilot\u3164" shows as "pilot".
_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u034f\u17b4\u17b5\u180b\u180c\u180d\u180f"
                       + "".join(map(chr, range(0xFE00, 0xFE10))) + "".join(map(chr, range(0xE0100, 0xE01F0))))


def _bad_char(ch: str) -> bool:
    """A character no name needs: control codes (ESC, newline, DEL, C1), separators, every
    format character (Cf: bidi overrides, the soft hyphen, zero-width spaces and joiners) and the
    other invisible ones, so that "pi\u00adlot" shows as a second "pilot"."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs") or ch in _BIDI or ch in _INVISIBLE


# Scripts whose letters pass for Latin ones (Unicode's confusables map letters of each to ASCII:
# Cyrillic о, Greek ο, Armenian օ, Cherokee Ꭺ, Lisu ꓮ, Canadian Syllabics ᑭ, Tifinagh ⵔ, ...).
# A name holds none of them, mixed with Latin or alone: an all-Cyrillic "рор" shows as "pop".
_LATIN_LOOKALIKE_SCRIPTS = ("CYRILLIC", "GREEK", "COPTIC", "ARMENIAN", "CHEROKEE", "LISU", "CANADIAN SYLLABICS",
                            "TIFINAGH", "RUNIC", "OLD ITALIC", "GOTHIC", "DESERET", "OSAGE", "VAI", "NKO",
                            "CARIAN", "LYCIAN", "WARANG CITI")
# Latin letters beyond ASCII that pass for no ASCII letter. Every other one that is not an
# accented ASCII letter does: ɑ (alpha) for a, ı (dotless) for i, ɡ (script g) for g, ǀ for l.
_DISTINCT_LATIN = frozenset("ßæÆøØœŒðþÞłŁđħĦŋŊ")
# Scripts that a name may write beside Latin letters (Unicode's "highly restrictive" sets: Japanese,
# Chinese with Bopomofo, Korean); any other two scripts in one name are refused.
_SCRIPT_SETS = (frozenset({"LATIN", "HAN", "KANA"}), frozenset({"LATIN", "HAN", "BOPOMOFO"}),
                frozenset({"LATIN", "HAN", "HANGUL"}))
PLAIN_NAME_RULE = "names keep to ASCII, accented Latin letters and scripts that cannot pass for Latin (CJK, Arabic, ...)"


def _script(ch: str) -> str:
    """The script of a letter by its Unicode name: LATIN, CYRILLIC, HAN, KANA, ... (the name's
    first words; Python's unicodedata has no script property)."""
    name = unicodedata.name(ch, "")
    if name.startswith(("CJK ", "IDEOGRAPHIC ")):
        return "HAN"
    if name.startswith(("HIRAGANA", "KATAKANA")):
        return "KANA"
    return next((s for s in _LATIN_LOOKALIKE_SCRIPTS if name.startswith(s + " ")), name.split(" ")[0])


def _named(ch: str) -> str:
    return f"U+{ord(ch):04X} ({unicodedata.name(ch, 'unnamed').lower()})"


def _lookalike_char(value: str, i: int) -> str | None:
    """Why the `i`-th character (0-based) of a name can pass for another character, else None."""
    ch = value[i]
    if ch.isascii():
        return None
    category = unicodedata.category(ch)
    if unicodedata.normalize("NFKC", ch) != ch:  # fullwidth ｏ, mathematical 𝐨, µ, ², no-break space
        return "a variant of an ordinary " + ("letter; write the letter itself" if category.startswith("L") else
                                              "character; write the character itself")
    if category.startswith("N"):
        return "a digit or number other than 0-9; names take the digits 0-9 only"
    if category[0] in "PSZ":  # U+2010 hyphen for -, one dot leader for ., em space for space
        return "punctuation, a symbol or a space beyond ASCII; names take ASCII ones only"
    if category.startswith("M"):
        base = next((c for c in reversed(value[:i]) if not unicodedata.category(c).startswith("M")), "")
        if not unicodedata.category(base or " ").startswith("L") or base.isascii() or _script(base) == "LATIN":
            # i + U+0307 shows as an i; é typed as e + U+0301 is a second "é"
            return "a combining mark on a Latin letter or on nothing; write the accented letter as one character"
        return None
    if unicodedata.name(ch, "").startswith("MODIFIER LETTER"):  # ʼ for ', ˗ for -
        return "a modifier letter, which can pass for punctuation; names take ASCII punctuation only"
    if _script(ch) in _LATIN_LOOKALIKE_SCRIPTS:
        script = _script(ch).title()
        return f"{'an' if script[0] in 'AEIOU' else 'a'} {script} letter, which can pass for a Latin one; {PLAIN_NAME_RULE}"
    if _script(ch) == "LATIN" and ch not in _DISTINCT_LATIN and not unicodedata.normalize("NFD", ch)[0].isascii():
        return "a Latin letter that can pass for an ASCII one; " + PLAIN_NAME_RULE
    return None


def _lookalike(value: str, what: str) -> str | None:
    """Why `value` may pass for another name, naming the first character at fault, else None:
    a character that passes for another (see _lookalike_char), letters of two scripts that no
    language writes together, or a name not in composed form (NFC)."""
    scripts: dict[str, int] = {}  # script: the position of its first letter
    for i, ch in enumerate(value):
        why = _lookalike_char(value, i)
        if why:
            return f"{what} holds {_named(ch)} at character {i + 1}, {why}"
        if unicodedata.category(ch).startswith("L"):
            scripts.setdefault(_script(ch), i)
    if len(scripts) > 1 and not any(set(scripts) <= allowed for allowed in _SCRIPT_SETS):
        first, *others = sorted(scripts, key=scripts.get)  # type: ignore[arg-type]
        i = scripts[others[0]]
        ch = value[i]
        return (f"{what} mixes {first.title()} letters with {others[0].title()} ones (U+{ord(ch):04X} "
                f"{unicodedata.name(ch, 'unnamed').lower()} at character {i + 1}), so it can pass for another name; "
                "write it in one script")
    if not unicodedata.is_normalized("NFC", value):
        i = next(i for i in range(len(value)) if unicodedata.normalize("NFC", value[:i + 1]) != value[:i + 1])
        return (f"{what} holds {_named(value[i])} at character {i + 1}, which composes with the character before "
                "it; write the name in composed form (NFC)")
    return None


def check_name(value: str, what: str, limit: int = MAX_NAME_CHARS, *, one_script: bool = True) -> str:
    """`value` unchanged if it is at most `limit` characters without control or invisible characters
    and, with `one_script`, without look-alike characters (see _lookalike); else UserError naming
    `what` and the rule. Labels and sentences pass one_script=False: they are prose, which may
    quote a word of another script, and no one picks an experiment by them."""
    if not isinstance(value, str):
        raise UserError(f"{what} must be text, not {type(value).__name__}")
    if len(value) > limit:
        raise UserError(f"{what} is {len(value):,} characters long (at most {limit:,})")
    for i, ch in enumerate(value, start=1):
        if _bad_char(ch):
            kind = "invisible" if ch in _INVISIBLE else "control"
            raise UserError(f"{what} holds the {kind} character U+{ord(ch):04X} at character {i}; "
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
