"""A refusal quotes what the user gave bounded and with control characters escaped, on every face:
a 40 MB value made a 40 MB terminal line and a 40 MB toast, and escape codes in a value ran in the
terminal and the app's log (engine.errors.quoted and message_line)."""

from __future__ import annotations

import pytest

from engine.errors import MESSAGE_CHARS, QUOTE_CHARS, message_line, quoted


@pytest.mark.parametrize(("value", "shown"), [
    ("plain", "plain"), ("a\x1b[31mb", "a\\x1b[31mb"), ("line\nbreak", "line\\nbreak"), ("\x9bc", "\\x9bc"),
    ("bidi\u202eevil", "bidi\\u202eevil"), ("é ü 中", "é ü 中"), (None, ""), (42, "42"),
])
def test_quoted_escapes_control_characters(value, shown):
    assert quoted(value) == shown


def test_quoted_bounds_a_value_and_says_how_much_it_left_out():
    assert quoted("x" * 40_000_000) == "x" * QUOTE_CHARS + "… (39,999,800 more characters)"
    assert quoted("ab", 1) == "a… (1 more character)"
    assert len(quoted("\x1b" * 1_000)) <= QUOTE_CHARS + 40  # escapes count toward the bound


def test_quoted_names_a_number_too_long_for_python_to_write():
    import sys

    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    huge = int("9" * 5_000)
    sys.set_int_max_str_digits(old)
    assert quoted(huge) == "a number of about 5,000 digits"


def test_a_message_line_is_one_bounded_line_keeping_its_head_and_tail():
    line = message_line("unknown item '" + "y\n" * 20_000_000 + "' (the rule)")
    assert "\n" not in line and len(line) <= MESSAGE_CHARS + 60
    assert line.startswith("unknown item 'y\\ny\\n") and line.endswith("' (the rule)")
    assert "characters left out" in line
    assert message_line("short") == "short"


def test_the_app_s_toast_and_log_line_are_bounded_and_escaped(capsys):
    from demo.toasts import error, refused

    value = "\x1b[2J" + "w" * 40_000_000
    shown = refused(f"unknown run '{value}'", "test")
    logged = capsys.readouterr().err
    assert "\x1b" not in shown + logged and len(shown) <= MESSAGE_CHARS + 60 and len(logged) < 400
    toast = error(f"unknown run '{value}'", "test")
    assert "\x1b" not in toast.message and len(toast.message) <= MESSAGE_CHARS + 60
