"""SIGKILL a real worker process in the middle of a re-register.

The worker is `.venv/bin/celery -A config worker` in a subprocess, pointed at this test's
database by name and at the same Redis broker and simulated grid. JOB_TEST_PAUSE (honoured only
with DEBUG on, see dashboard/jobs/services/jobs.py) holds it at a named point: "claimed" (job claimed,
nothing read), "planned" (capacity read and carve done, no transaction yet) or "swapped" (INSIDE
the final transaction, after the slices were deleted and created). There it is killed with -9.

Then: the catalog is entirely the old one or entirely the new one, the deployed slice is still
the same row, and once a worker runs again the job ends, succeeded or failed with a reason:
- "redelivery": the Redis transport gives an unacknowledged message back after its visibility
  timeout (an hour by default, 60 s at least in settings). The test does not wait for it: it asks
  kombu to restore the unacked messages as if the timeout had passed (the same restore_visible a
  worker runs), and the new worker re-claims the job because its heartbeat is stale.
- "reaper": jobs_reap fails the job (what happens on the filesystem broker, which never redelivers);
  the message that then comes back is dropped, the job stays failed.
"""

import os
import signal
import time

import pytest
from celery.contrib.testing.worker import start_worker

from dashboard.capacity import GiB
from dashboard.jobs.services.job_reaper import jobs_reap
from dashboard.jobs.services.jobs import job_request
from dashboard.models import Job, Node, Slice
from tests.killed_workers import bulk_node_states, redeliver_unacked, worker_sessions
from tests.support import wait_until, worker_stops_quickly

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def catalog(node) -> list[tuple]:
    return list(Slice.objects.filter(node=node).order_by("index").values_list("pk", "index", "mru", "sru", "state"))


def is_new_catalog(rows: list[tuple], old: list[tuple]) -> bool:
    """The zos carve of node 1774: the deployed slice as it was, then five free 154 GiB slices numbered
    after the seven the node used (slice numbers are never reused). 154 = (931.5 - 133 - 25) / 5 rounded
    down: the 133 GiB slice kept, and the heard 20 GiB zos-cache with its next 5 GiB step."""
    return rows[0] == old[0] and [r[1:] for r in rows[1:]] == [(i, 4 * GiB, 154 * GiB, "free") for i in range(7, 12)]


@pytest.mark.parametrize(
    "point, recovery",
    [("claimed", "redelivery"), ("planned", "reaper"), ("swapped", "redelivery"), ("swapped", "reaper")],
)
def test_it_survives_a_sigkill(
    point, recovery, legacy_node_1774, worker_process, broker_purged, settings, job_finished
):
    old = catalog(legacy_node_1774)
    proc, marker = worker_process(JOB_TEST_PAUSE=f"{point}:120")
    job = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job
    wait_until(marker.exists, timeout=60, what=f"the worker to reach {point!r}")
    if point == "swapped":
        assert "idle in transaction" in worker_sessions()  # killed with its transaction open

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    wait_until(lambda: not worker_sessions(), timeout=30, what="PostgreSQL to drop the dead worker's session")
    assert catalog(legacy_node_1774) == old  # nothing was committed: entirely old
    job.refresh_from_db()
    assert (job.state, job.attempts) == (Job.State.RUNNING, 1)

    settings.JOB_HEARTBEAT_TIMEOUT = 1
    time.sleep(1.1)
    if recovery == "reaper":
        assert jobs_reap() == 1
    redeliver_unacked(broker_purged)
    with (
        worker_stops_quickly(broker_purged),
        start_worker(broker_purged, pool="solo", perform_ping_check=False, shutdown_timeout=30),
    ):
        if recovery == "reaper":
            wait_until(
                lambda: not broker_purged.connection_for_write().default_channel.client.llen("celery"),
                timeout=10,
                what="the redelivered message to be taken",
            )
        job = job_finished(job, timeout=30)

    rows = catalog(legacy_node_1774)
    assert rows == old or is_new_catalog(rows, old)
    assert rows[0] == old[0]  # the deployed slice: same row, same size
    if recovery == "redelivery":
        assert (job.state, job.attempts, is_new_catalog(rows, old)) == (Job.State.SUCCEEDED, 2, True)
    else:
        assert (job.state, rows) == (Job.State.FAILED, old)
        assert job.error.startswith("worker lost: no heartbeat since ")


def test_it_fails_a_job_that_overruns_its_soft_time_limit(legacy_node_1774, worker_process, job_finished):
    old = catalog(legacy_node_1774)
    worker_process(
        pool="prefork", JOB_TEST_PAUSE="planned:30", CELERY_TASK_SOFT_TIME_LIMIT="2", CELERY_TASK_TIME_LIMIT="40"
    )
    job = job_finished(job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job, timeout=60)
    assert (job.state, job.error) == (Job.State.FAILED, "timed out after 2 s")
    assert catalog(legacy_node_1774) == old


def test_it_stops_a_bulk_job_at_its_soft_time_limit_instead_of_going_on(legacy_fleet, worker_process, job_finished):
    legacy_fleet(3)
    worker_process(
        pool="prefork", JOB_TEST_PAUSE="swapped:30", CELERY_TASK_SOFT_TIME_LIMIT="2", CELERY_TASK_TIME_LIMIT="40"
    )
    job = job_finished(job_request(kind=Job.Kind.BULK_REREGISTER).job, timeout=60)
    assert (job.state, job.error) == (Job.State.FAILED, "timed out after 2 s")
    assert set(Node.objects.values_list("carved_policy_name", flat=True)) == {
        "legacy"
    }  # the open transaction rolled back


def test_it_leaves_no_node_half_applied_when_killed_inside_a_bulk_batch(
    legacy_fleet, worker_process, broker_purged, settings, job_finished
):
    from dashboard.models import AuditEvent

    legacy_fleet(30)  # batches of 3 nodes
    proc, marker = worker_process(JOB_TEST_PAUSE="swapped:120:2")  # inside the second batch's transaction
    job = job_request(kind=Job.Kind.BULK_REREGISTER).job
    wait_until(marker.exists, timeout=60, what="the worker to reach the second batch")
    assert "idle in transaction" in worker_sessions()

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    wait_until(lambda: not worker_sessions(), timeout=30, what="PostgreSQL to drop the dead worker's session")
    states = bulk_node_states()
    assert {n for n, state in states.items() if state == "new"} == {1, 2, 3}  # the first batch committed
    assert {n for n, state in states.items() if state != "new"} == set(range(4, 31)) and "half" not in states.values()

    settings.JOB_HEARTBEAT_TIMEOUT = 1
    time.sleep(1.1)
    redeliver_unacked(broker_purged)
    with (
        worker_stops_quickly(broker_purged),
        start_worker(broker_purged, pool="solo", perform_ping_check=False, shutdown_timeout=30),
    ):
        job = job_finished(job, timeout=60)
    assert (job.state, job.attempts, job.result["stale"], job.result["reregistered"]) == (
        Job.State.SUCCEEDED,
        2,
        27,
        27,
    )
    assert set(bulk_node_states().values()) == {"new"}
    events = AuditEvent.objects.filter(job=job, action="job.node-reregistered")
    assert sorted(events.values_list("node__grid_id", flat=True)) == list(range(1, 31))  # each node once


def test_a_bulk_job_the_reaper_fails_after_a_sigkill_keeps_the_count_of_what_was_done(
    legacy_fleet, worker_process, settings
):
    legacy_fleet(30)  # batches of 3 nodes
    proc, marker = worker_process(JOB_TEST_PAUSE="swapped:120:2")  # inside the second batch's transaction
    job = job_request(kind=Job.Kind.BULK_REREGISTER).job
    wait_until(marker.exists, timeout=60, what="the worker to reach the second batch")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    wait_until(lambda: not worker_sessions(), timeout=30, what="PostgreSQL to drop the dead worker's session")

    settings.JOB_HEARTBEAT_TIMEOUT = 1
    time.sleep(1.1)
    assert jobs_reap() == 1  # the filesystem broker's case: nothing is redelivered, the reaper ends the job
    job.refresh_from_db()
    assert (job.state, job.result["stale"], job.result["reregistered"], job.result["failed"]) == (
        Job.State.FAILED,
        30,
        3,
        0,
    )
    assert "3 of 30 stale node(s) re-registered before the worker died" in job.error
    assert {n for n, state in bulk_node_states().items() if state == "new"} == {1, 2, 3}
