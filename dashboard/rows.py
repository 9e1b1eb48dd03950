"""Writing many rows of a table in one statement (the bulk writers and the farm totals use it).

`rows_update`: an UPDATE from one array per column (`unnest`): bulk_update writes a CASE per column with an
arm per row, and building it took ~2.5 ms a node in Python (100 nodes a re-register batch), most of a batch's time.

`rows_insert`: new rows by COPY: bulk_create prepares every value through its field (a node row has 81),
about 0.2 ms a node in Python, and sends them as arrays that psycopg quotes in Python; COPY's rows are
written by psycopg's C code (issue 43: onboarding 2,000 nodes from the command line).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models import Model
from django.utils import timezone

# Fields whose Python value is already what the column takes: COPY writes it as it is. Any other field
# (JSON, dates, times) goes through the field's own get_db_prep_save, as bulk_create would send it.
_AS_IS = (models.CharField, models.TextField, models.IntegerField, models.BooleanField, models.ForeignKey)


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


def rows_insert(model: type[Model], objects: Sequence[Model], *, with_pk: bool = False) -> None:
    """INSERT these unsaved instances, every concrete field but an automatic primary key, by one COPY.

    What bulk_create would store: each field's value after its pre_save (auto_now, auto_now_add), the
    defaults the constructor set. COPY returns no ids: a caller that needs them gives them (`with_pk`,
    from rows_pks) or reads them back. The table's triggers fire as for an INSERT; a unique violation
    is an IntegrityError.
    """
    if not objects:
        return
    fields = [
        f for f in model._meta.concrete_fields if with_pk or not (f.primary_key and isinstance(f, models.AutoField))
    ]
    stamped = [f for f in fields if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)]
    for obj in objects:
        for f in stamped:
            f.pre_save(obj, add=True)
    db = connections[DEFAULT_DB_ALIAS]  # the wrapper itself: `connection` is a proxy, looked up at every use
    prepared: list[Callable | None] = [None if isinstance(f, _AS_IS) else f.get_db_prep_save for f in fields]
    attnames = [f.attname for f in fields]
    quote = db.ops.quote_name
    sql = f"COPY {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) FROM STDIN"
    started = time.monotonic()
    with db.cursor() as cursor, db.wrap_database_errors, cursor.cursor.copy(sql) as copy:
        for obj in objects:
            values = obj.__dict__
            row = [values[a] for a in attnames]
            copy.write_row(
                [v if prep is None or v is None else prep(v, db) for v, prep in zip(row, prepared, strict=True)]
            )
    if db.queries_logged:
        # As Django's debug cursor logs a statement: query counts (CaptureQueriesContext, the bench) see it.
        db.queries_log.append({"sql": f"{sql} ({len(objects)} rows)", "time": f"{time.monotonic() - started:.3f}"})


def rows_pks(model: type[Model], count: int) -> list[int]:
    """`count` new primary keys from the table's own sequence, for rows_insert(with_pk=True): one statement
    where the rows' keys are needed before they are written (their figures, their slices)."""
    if count <= 0:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [model._meta.db_table, model._meta.pk.column, count],
        )
        return [pk for (pk,) in cursor.fetchall()]
