"""Writing one set of columns on many rows of a table in one statement (the bulk writers and the farm totals use it).

An UPDATE from one array per column (`unnest`): bulk_update writes a CASE per column with an arm per
row, and building it took ~2.5 ms a node in Python (100 nodes a re-register batch), most of a batch's time.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection
from django.db.models import Model
from django.utils import timezone


def rows_update(
    model: type[Model],
    columns: Sequence[tuple[str, str]],
    rows: Sequence[tuple],
    *,
    stamped: Sequence[str] = (),
    json: Sequence[str] = (),
    json_kept_if_null: Sequence[str] = (),
) -> None:
    """Set `columns` (name, PostgreSQL type; the first is the primary key) from `rows`, in one statement.

    `stamped` columns take the time of the write. A column in `json` holds JSON text, cast on the way
    in; one in `json_kept_if_null` also keeps the stored value when the row gives None.
    """
    if not rows:
        return
    now = timezone.now()
    names = [name for name, _type in columns]
    quote = connection.ops.quote_name
    assignments = [
        f"{quote(n)} = u.{quote(n)}{'::jsonb' if n in json else ''}" for n in names[1:] if n not in json_kept_if_null
    ]
    assignments.extend(f"{quote(n)} = COALESCE(u.{quote(n)}::jsonb, t.{quote(n)})" for n in json_kept_if_null)
    assignments.extend(f"{quote(n)} = %s" for n in stamped)
    arrays = ", ".join(f"%s::{column_type}[]" for _name, column_type in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(model._meta.db_table)} AS t SET {', '.join(assignments)} "
            f"FROM unnest({arrays}) AS u({', '.join(quote(n) for n in names)}) WHERE t.{quote(names[0])} = u.{quote(names[0])}",
            [now] * len(stamped) + [list(column) for column in zip(*rows, strict=True)],
        )
