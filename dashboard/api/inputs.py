"""The API's door for values: text, times and whole numbers that the code and the database can hold.

Each is a pydantic type used by the schemas (so a refusal is a 400 naming the field, before any
view runs) and described in the OpenAPI schema where JSON Schema can say it:

- `Text` / `Line`: no NUL, lone surrogate or control character (dashboard.grid.text, the rule the
  grid's parser keeps too); a `Line` (an id) has no tab or newline either.
- `ReportTime`: a date and time with its UTC offset, within REPORT_MAX_AGE_DAYS back and
  CLOCK_SKEW ahead of now, returned in UTC (so nothing with a local offset is ever written, and a
  moment past the calendar's ends once in UTC, year 1 at +01:00, never reaches the database).
- `WindowTime`: the same door for a maintenance window's edges, which lie ahead: within
  REPORT_MAX_AGE_DAYS back and `WINDOW_AHEAD` (a year and a day) ahead, returned in UTC.
- `Whole` and its bounds: what a PostgreSQL integer column holds (models.INTEGER_MAX); `Strict`, the
  same in a JSON body, where `true` is not 1.
- `Size`: bytes, or a size with its unit ("4GiB", "151 GiB"), read by capacity.parse_size: the one
  parser of the placement page, the CLI and the API.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from django.utils import timezone
from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema

from dashboard import capacity
from dashboard.capacity.outcomes import moment_problem
from dashboard.deployments.services.outcomes import CLOCK_SKEW, report_max_age
from dashboard.grid.text import text_problem
from dashboard.models import INTEGER_MAX
from dashboard.nodes.services.withholds import WINDOW_AHEAD


def _text_checked(value: str, *, lines: bool) -> str:
    problem = text_problem(value, allow_whitespace=lines)
    if problem:
        raise ValueError(f"contains {problem}; send the text without it")
    return value


def _paragraphs(value: str) -> str:
    return _text_checked(value, lines=True)


def _line(value: str) -> str:
    return _text_checked(value, lines=False)


def _moment_within(value: datetime, *, future: timedelta) -> datetime:
    """The time in UTC, or ValueError when it is older than a report may be or further ahead than `future`."""
    problem = moment_problem(value, now=timezone.now(), past=report_max_age(), future=future)
    if problem:
        raise ValueError(f"{value.isoformat()} cannot be taken: {problem}")
    return value.astimezone(UTC)


def _moment(value: datetime) -> datetime:
    return _moment_within(value, future=CLOCK_SKEW)


def _window_moment(value: datetime) -> datetime:
    return _moment_within(value, future=WINDOW_AHEAD)


Text = Annotated[str, AfterValidator(_paragraphs)]
Line = Annotated[str, AfterValidator(_line)]
ReportTime = Annotated[datetime, AfterValidator(_moment)]
WindowTime = Annotated[datetime, AfterValidator(_window_moment)]
Whole = Annotated[int, Field(ge=0, le=INTEGER_MAX)]
Counting = Annotated[int, Field(ge=1, le=INTEGER_MAX)]
# A JSON body's whole number, strictly: `true` is not 1, "5" is not 5 (query strings keep Whole).
Strict = Annotated[int, Field(strict=True, ge=0, le=INTEGER_MAX)]

__all__ = ["INTEGER_MAX", "Counting", "Line", "ReportTime", "Size", "Strict", "Text", "Whole", "WindowTime"]


def _size(value):
    if isinstance(value, int | str) and not isinstance(value, bool):
        try:
            return capacity.parse_size(value)
        except capacity.SizeError as exc:
            raise ValueError(str(exc).removeprefix("size: ")) from None
    raise ValueError("not a size; send bytes or a size with its unit, e.g. 4GiB")


Size = Annotated[
    int,
    BeforeValidator(_size),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "description": "bytes, or a size with a 1024-based unit: 4GiB, 151 GiB, 512MiB",
        }
    ),
]
