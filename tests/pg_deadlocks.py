"""PostgreSQL's own count of deadlocks, for the tests of concurrent writers."""

import time

from django.db import connection


def pg_deadlocks() -> int:
    """PostgreSQL's count of deadlocks in this test database, read until it holds for a second: a backend
    sends its counts when idle (at most once a second) and when it ends."""
    last = None
    with connection.cursor() as cursor:
        for _ in range(10):
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
            count = cursor.fetchone()[0]
            if count == last:
                return count
            last = count
            time.sleep(1.1)
    return count
