"""Helpers of the tests that SIGKILL a real worker (tests/jobs/test_jobs_kill.py, test_waves_kill.py, bench's
kill loop): its PostgreSQL sessions, the Redis redelivery, and what a killed bulk run left of each node.
The worker itself is conftest's `worker_process` fixture."""

from __future__ import annotations

import sys
from pathlib import Path

from django.db import connection
from kombu import Connection

from dashboard.models import Node

BASE_DIR = Path(__file__).resolve().parent.parent
CELERY = Path(sys.executable).parent / "celery"

WORKER_SESSION = "jobs-kill-test-worker"


def worker_sessions() -> list[str]:
    """States of the subprocess worker's PostgreSQL sessions (named by application_name)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [WORKER_SESSION],
        )
        return [row[0] for row in cursor.fetchall()]


def redeliver_unacked(app) -> None:
    """What the Redis transport does once the visibility timeout has passed, without waiting for it."""
    with Connection(app.conf.broker_url, transport_options={"visibility_timeout": 0}) as conn:
        conn.default_channel.qos.restore_visible(num=100)


def bulk_node_states() -> dict[int, str]:
    """Node id -> "old" (legacy carve, generation 1) or "new" (zos carve, generation 2), else "half"."""
    states = {}
    for node in Node.objects.all():
        slices = list(node.slices.values_list("generation", "sru"))
        generations = {g for g, _ in slices}
        if (node.carved_policy_name, node.catalog_generation, generations) == ("legacy", 1, {1}):
            states[node.grid_id] = "old"
        elif (node.carved_policy_name, node.catalog_generation, generations) == ("zos", 2, {2}) and {
            sru for _, sru in slices
        } == {node.carved_slice_sru}:
            states[node.grid_id] = "new"
        else:
            states[node.grid_id] = "half"
    return states
