"""The process's Grid Proxy request tally, added into the database (GridRequestTally) for /metrics.

Called when a web request ends and when a Celery task ends (dashboard.apps connects the signals):
a process that made no grid request writes nothing. One statement per store, an upsert that adds,
so concurrent processes never overwrite each other's counts.
"""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError, connection, transaction

from dashboard.grid import telemetry
from dashboard.models import GridRequestTally

log = logging.getLogger(__name__)

# A long job stores its tally on the way at most this often (job_progress), so a scrape during a
# bulk re-register sees its requests without a write per node.
STORE_EVERY_SECONDS = 15.0
_last_store = 0.0


def grid_requests_store() -> int:
    """Add what this process recorded since the last store; the number of rows touched.

    A database error puts the tally back (counted at the next store) and is logged, never raised:
    the metrics of a request must not fail the request.
    """
    global _last_store
    _last_store = time.monotonic()
    tally = telemetry.drain()
    if not tally:
        return 0
    table = connection.ops.quote_name(GridRequestTally._meta.db_table)
    rows = [
        (endpoint, outcome, bucket, count, tally.seconds[(endpoint, outcome, bucket)])
        for (endpoint, outcome, bucket), count in sorted(tally.counts.items())
    ]
    try:
        # Sorted rows and one transaction: two processes upserting the same rows lock them in one order.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {table} (endpoint, outcome, bucket, count, seconds) VALUES (%s, %s, %s, %s, %s) "
                f"ON CONFLICT (endpoint, outcome, bucket) DO UPDATE SET "
                f"count = {table}.count + excluded.count, seconds = {table}.seconds + excluded.seconds",
                rows,
            )
    except DatabaseError:
        telemetry.restore(tally)
        log.warning("could not store %d grid request tallies; kept for the next store", len(rows), exc_info=True)
        return 0
    return len(rows)


def grid_requests_store_due() -> int:
    """grid_requests_store, if the last store is older than STORE_EVERY_SECONDS (for jobs on the way).

    Never inside a transaction: one rolled back would take the drained tally with it.
    """
    if connection.in_atomic_block or time.monotonic() - _last_store < STORE_EVERY_SECONDS:
        return 0
    return grid_requests_store()
