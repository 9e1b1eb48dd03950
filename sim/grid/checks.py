"""The simulated grid's input checks: what its administration and the Grid interface refuse to be told."""

from __future__ import annotations

from dashboard.capacity import format_size
from dashboard.grid.types import NODE_STATUSES


def positive(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 2**32 - 1:
        raise ValueError(f"{what} must be a positive whole number (got {value!r})")
    return value


def bounded(value: object, what: str, *, low: int, high: int, unit: str = "bytes", why_low: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be a whole number of {unit} (got {value!r})")
    shown = (lambda n: f"{n}") if unit == "cores" else format_size
    if value < low:
        reason = f" ({why_low})" if why_low else ""
        raise ValueError(f"{what} is {shown(value)}, must be at least {shown(low)}{reason}")
    if value > high:
        raise ValueError(f"{what} is {shown(value)}, more than any single node has (at most {shown(high)})")
    return value


def flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false (got {value!r})")
    return value


def status(status: object) -> str:
    if status not in NODE_STATUSES:
        raise ValueError(f"status {status!r} is not one of {', '.join(NODE_STATUSES)}")
    return status  # type: ignore[return-value]


def text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be text (got {value!r})")
    if len(value) > limit:
        raise ValueError(f"{what} is longer than {limit} characters")
    return value.strip()
