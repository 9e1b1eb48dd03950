"""Reading one Grid Proxy answer: its headers (`count`, `Retry-After`), its body as JSON, the proxy's own
words from an error body, and a list entry's label; every failure a MalformedPayload naming the URL."""

from __future__ import annotations

import json
from typing import Any

from dashboard.grid.text import text_printable
from dashboard.grid.types import MalformedPayload

# A Retry-After above this is not waited for as asked (the request's deadline caps it anyway).
RETRY_AFTER_MAX_SECONDS = 60.0


# A `count` header above this is not a count of nodes (the whole grid has a few thousand): ignored.
MAX_ANNOUNCED_COUNT = 10_000_000


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "..."
        return f"a string ({shown!r})"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def count_header(headers) -> int | None:
    """The `count` header of a ret_count=true answer, or None when absent or not a sane whole number."""
    raw = (headers or {}).get("count", "")
    raw = raw.strip() if isinstance(raw, str) else ""
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_ANNOUNCED_COUNT:
        return None
    return int(raw)


def retry_after_seconds(headers, *, default: float) -> float:
    """Seconds a 429's Retry-After asks for (delta-seconds; an HTTP date or garbage: `default`), bounded."""
    raw = (headers or {}).get("Retry-After", "")
    raw = raw.strip() if isinstance(raw, str) else ""
    try:
        seconds = float(raw) if raw else default
    except ValueError:
        seconds = default
    if not seconds >= 0:  # NaN, negative
        seconds = default
    return min(seconds, RETRY_AFTER_MAX_SECONDS)


def parsed_at(parse, payload: Any, url: str):
    try:
        return parse(payload)
    except MalformedPayload as exc:
        raise MalformedPayload(f"{exc} (from {url})") from None


def json_decoded(body: bytes, url: str, *, node_id: int | None) -> Any:
    where = f"node {node_id}: " if node_id is not None else ""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise MalformedPayload(f"{where}the answer from {url} is not JSON ({detail})") from None


def proxy_words(body: bytes) -> str:
    """The proxy's own words from {"error": "..."} (or the start of a non-JSON body)."""
    text = body[:4096].decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # a deeply nested body must not escape as a crash
        return short_words(text)
    if isinstance(data, dict):
        for key in ("error", "message", "Message"):
            if isinstance(data.get(key), str):
                return short_words(data[key])
    return short_words(text)


def entry_label(item: Any, position: int) -> str:
    if isinstance(item, dict):
        node_id = item.get("nodeId")
        if isinstance(node_id, int) and not isinstance(node_id, bool):
            return str(node_id)
    return f"position {position}"


def short_words(value: Any, limit: int = 300) -> str:
    """One printable line: the grid's words end up in job rows and on a terminal (grid.text's rule)."""
    return text_printable(value, limit)
