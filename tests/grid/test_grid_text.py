"""dashboard.grid.text: what no column may hold, and how a page shows what it must not show raw."""

import pytest

from dashboard.grid.text import char_is_hidden, text_escaped_parts, text_printable, text_problem
from dashboard.templatetags.dashboard_tags import visible


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("farm one", ""),
        ("tab\tnew\nline\r", ""),
        ("\u202egnp.exe", ""),  # a bidi control can be stored; it is shown escaped
        ("ab\x00", "a NUL character (U+0000) at character 3"),
        ("a\ud800", "a lone surrogate (U+D800) at character 2"),
        ("\x1b[31m", "a control character (U+001B) at character 1"),
        ("\x85", "a control character (U+0085) at character 1"),
    ],
)
def test_what_no_column_may_hold(text, problem):
    assert text_problem(text) == problem


def test_an_id_is_one_line():
    assert text_problem("c-1\n", allow_whitespace=False) == "a control character (U+000A) at character 4"


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200f", "\x1b", "\x00", "\u200b", "\ufeff"])
def test_hidden_characters_are_escaped_apart(char):
    assert char_is_hidden(char)
    assert list(text_escaped_parts(f"a{char}b")) == [("a", False), (char, True), ("b", False)]


def test_a_page_shows_them_as_their_escape_in_a_marked_span_and_escapes_the_rest():
    shown = visible("<b>x</b>\u202etxt.exe\x1b[0m")
    assert shown.startswith("&lt;b&gt;x&lt;/b&gt;")
    assert '<span class="hidden-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">\\u202e</span>' in shown
    assert '<span class="hidden-char" title="U+001B control character">\\x1b</span>' in shown
    assert "\u202e" not in shown and "\x1b" not in shown


def test_a_message_is_one_printable_line():
    assert text_printable("a\x00b\n\n c\u202ed", limit=300) == "a\ufffdb c\ufffdd"
    assert text_printable("x" * 400, limit=10) == "xxxxxxx..."
