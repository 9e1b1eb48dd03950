"""Text from outside, pure: what no column may hold, what a page must never show raw, and credentials.

Shared by every door that takes text in (the Grid Proxy's parser, the API's fields and query
parameters, the pages' forms) and every place that shows text someone else wrote (support pages).
It lives in the grid package because the grid's parser may import only the grid and the capacity
types (tests/test_architecture.py); everything above the grid may import it too.

- Refused (`text_problem`): NUL (PostgreSQL refuses it in text), a lone surrogate (UTF-8 cannot
  encode it) and every other control character (an escape sequence must not reach a terminal or a
  log). Tab, newline and carriage return are whitespace: a ZOS error may hold them. Format
  characters (bidi controls, zero-width ones) can be stored, but are never shown raw.
- Shown (`text_escaped_parts`): a bidi control (U+202E turns the rest of a line round, so "exe.txt"
  reads as "txt.exe") or a control character is cut out of the text and named by its escape
  ("\\u202e"); the page marks it so support sees that it is there.
- `text_printable`: one printable line for messages (job errors, logs): the same characters become
  U+FFFD, whitespace runs become one space, and a long text is cut.
- `url_credentials_split` / `text_credentials_redacted`: a URL's user:password is taken out in one
  place, so it never appears in a message, a job result, a log or an API answer.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit, urlunsplit

# Whitespace a text field may hold (folded or kept by the caller).
WHITESPACE = frozenset("\t\n\r")
# Bidirectional controls (Unicode's "Bidi_Control" property): each can reorder what a person reads.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
)
# Shown escaped besides the bidi controls: invisible characters that hide or join text.
INVISIBLE = frozenset("\u200b\u200c\u200d\u2060\ufeff")
REDACTED = "***"


def text_problem(text: str, *, allow_whitespace: bool = True) -> str:
    """Why `text` cannot be stored ("" when it can): the first NUL, lone surrogate or control character.

    The answer names the character and its position, e.g. "a NUL character (U+0000) at character 4".
    """
    for position, char in enumerate(text):
        if char in WHITESPACE and allow_whitespace:
            continue
        what = _unstorable(char)
        if what:
            return f"{what} at character {position + 1}"
    return ""


def _unstorable(char: str) -> str:
    code = ord(char)
    if code == 0:
        return "a NUL character (U+0000)"
    if 0xD800 <= code <= 0xDFFF:
        return f"a lone surrogate (U+{code:04X})"
    if unicodedata.category(char) == "Cc":
        return f"a control character (U+{code:04X})"
    return ""


def char_is_hidden(char: str) -> bool:
    """A character a page must not show raw: a control, a bidi control, a surrogate or an invisible one."""
    code = ord(char)
    return (
        char in BIDI_CONTROLS
        or char in INVISIBLE
        or 0xD800 <= code <= 0xDFFF
        or (unicodedata.category(char) == "Cc" and char not in WHITESPACE)
    )


def char_escape(char: str) -> str:
    """The escape a page shows in place of a hidden character: "\\u202e", "\\x1b"."""
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def char_name(char: str) -> str:
    """ "U+202E RIGHT-TO-LEFT OVERRIDE": what a hidden character is, for a tooltip."""
    return f"U+{ord(char):04X} {unicodedata.name(char, 'control character')}"


def text_escaped_parts(text: str) -> Iterator[tuple[str, bool]]:
    """(piece, hidden) in order: plain runs, and each hidden character on its own (as its escape)."""
    run: list[str] = []
    for char in text:
        if char_is_hidden(char):
            if run:
                yield "".join(run), False
                run = []
            yield char, True
        else:
            run.append(char)
    if run:
        yield "".join(run), False


def text_has_hidden(text: str) -> bool:
    return any(char_is_hidden(char) for char in text)


# NUL, the other control characters and lone surrogates become U+FFFD in a message.
_UNPRINTABLE = {code: "\ufffd" for code in [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0xD800, 0xE000)]}
_UNPRINTABLE.update({ord(char): "\ufffd" for char in BIDI_CONTROLS})


def text_printable(value: object, limit: int = 300) -> str:
    """One printable line for a message: whitespace folded, controls and bidi controls as U+FFFD, cut to `limit`."""
    text = " ".join(str(value).split()).translate(_UNPRINTABLE)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def url_credentials_split(url: str) -> tuple[str, tuple[str, str] | None]:
    """(the URL without user:password, (user, password) or None). A URL that does not parse is returned as is."""
    try:
        parts = urlsplit(url)
        username, password = parts.username, parts.password
        host = parts.hostname
        port = parts.port
    except ValueError:
        return url, None
    if username is None and password is None:
        return url, None
    netloc = host or ""
    if ":" in netloc:  # an IPv6 literal
        netloc = f"[{netloc}]"
    if port is not None:
        netloc += f":{port}"
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return clean, (unquote(username or ""), unquote(password or ""))


def url_redacted(url: str) -> str:
    """The URL with its user:password shown as ***, e.g. https://***@proxy.example.com."""
    clean, credentials = url_credentials_split(url)
    if credentials is None:
        return url
    scheme, rest = clean.split("://", 1) if "://" in clean else ("", clean)
    return f"{scheme}://{REDACTED}@{rest}" if scheme else f"{REDACTED}@{rest}"


def text_credentials_redacted(text: str, *urls: str) -> str:
    """`text` with the user:password of each of `urls` (and its password alone) replaced by ***."""
    for url in urls:
        _, credentials = url_credentials_split(url)
        if credentials is None:
            continue
        userinfo = urlsplit(url).netloc.rpartition("@")[0]  # as written, percent-encoding included
        text = text.replace(f"{userinfo}@", f"{REDACTED}@")
        user, password = credentials
        written = userinfo.partition(":")[2]
        for secret in {password, written}:
            if len(secret) >= 3:  # a one- or two-letter password would blank out ordinary words
                text = text.replace(secret, REDACTED)
    return text


__all__ = [
    "BIDI_CONTROLS",
    "char_escape",
    "char_is_hidden",
    "char_name",
    "text_credentials_redacted",
    "text_escaped_parts",
    "text_has_hidden",
    "text_printable",
    "text_problem",
    "url_credentials_split",
    "url_redacted",
]
