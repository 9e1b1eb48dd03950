"""SIGKILL a real worker inside a batch of a run in waves: no node half-written, each kept generation
committed with its catalog, the run taken over to the end, then rolled back whole."""

import os
import signal
import time

import pytest
from celery.contrib.testing.worker import start_worker

from dashboard.catalogs.services.reregister.rollback import run_rollback
from dashboard.catalogs.services.reregister.waves import bulk_request
from dashboard.models import CatalogGeneration, Job, Node, Slice, WaveRun
from tests.killed_workers import bulk_node_states, redeliver_unacked, worker_sessions
from tests.support import wait_until, worker_stops_quickly


def sizes() -> dict[int, list[tuple[int, int, int]]]:
    """Each node's slices as (index, memory, disk)."""
    rows: dict[int, list] = {}
    for gid, index, mru, sru in Slice.objects.order_by("node__grid_id", "index").values_list(
        "node__grid_id", "index", "mru", "sru"
    ):
        rows.setdefault(gid, []).append((index, mru, sru))
    return rows


pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_run_in_waves_killed_inside_a_batch_leaves_whole_nodes_and_their_generations(
    legacy_fleet,
    worker_process,
    broker_purged,
    settings,
    job_finished,
):
    legacy_fleet(12)
    before = sizes()
    proc, marker = worker_process(JOB_TEST_PAUSE="swapped:120:2")  # inside the second batch's transaction
    job = bulk_request(parameters={"canary_share": 0, "batch_size": 3}).job
    wait_until(marker.exists, timeout=60, what="the worker to reach the second batch")
    assert "idle in transaction" in worker_sessions()

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    wait_until(lambda: not worker_sessions(), timeout=30, what="PostgreSQL to drop the dead worker's session")
    states = bulk_node_states()
    assert {n for n, state in states.items() if state == "new"} == {1, 2, 3} and "half" not in states.values()
    # The previous catalogs kept are exactly those of the nodes whose new catalog was committed.
    kept = set(CatalogGeneration.objects.filter(job=job).values_list("node__grid_id", flat=True))
    assert kept == {1, 2, 3}

    settings.JOB_HEARTBEAT_TIMEOUT = 1
    time.sleep(1.1)
    redeliver_unacked(broker_purged)
    with (
        worker_stops_quickly(broker_purged),
        start_worker(broker_purged, pool="solo", perform_ping_check=False, shutdown_timeout=30),
    ):
        job = job_finished(job, timeout=60)
    assert (job.state, job.attempts, WaveRun.objects.get(job=job).state) == (Job.State.SUCCEEDED, 2, "done")
    assert set(bulk_node_states().values()) == {"new"}
    assert CatalogGeneration.objects.filter(job=job).count() == 12  # one per node, none twice

    summary = run_rollback(job=job)
    assert (len(summary["rolled_back"]), summary["blocked"]) == (12, {})
    assert sizes() == before and set(Node.objects.values_list("carved_policy_name", flat=True)) == {"legacy"}
