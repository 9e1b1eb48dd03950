"""SIGKILL a real worker process in the middle of a re-register.

The worker is `.venv/bin/celery -A dashboard worker` in a subprocess, pointed at this test's
database by name and at the same Redis broker and simulated grid. JOB_TEST_PAUSE (honoured only
with DEBUG on, see dashboard/services/jobs.py) holds it at a named point: "claimed" (job claimed,
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
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from celery.contrib.testing.worker import start_worker
from django.db import connection
from kombu import Connection

from dashboard.capacity import GiB
from dashboard.models import Job, Node, Slice
from dashboard.services.job_reaper import jobs_reap
from dashboard.services.jobs import job_request

pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BASE_DIR = Path(__file__).resolve().parent.parent
CELERY = Path(sys.executable).parent / "celery"


def catalog(node) -> list[tuple]:
    return list(Slice.objects.filter(node=node).order_by("index").values_list("pk", "index", "mru", "sru", "state"))


def is_new_catalog(rows: list[tuple], old: list[tuple]) -> bool:
    """The zos carve of node 1774: the deployed slice as it was, then five free 155 GiB slices numbered
    after the seven the node used (slice numbers are never reused)."""
    return rows[0] == old[0] and [r[1:] for r in rows[1:]] == [(i, 4 * GiB, 155 * GiB, "free") for i in range(7, 12)]


def wait_until(condition, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


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


@pytest.fixture
def worker_process(tmp_path, simgrid_path, broker_purged):
    """worker_process(pool="solo", **env) -> (Popen, marker path): a real worker in its own process."""
    started: list[tuple[subprocess.Popen, object]] = []

    def start(*, pool: str = "solo", **env):
        n = len(started)
        db = connection.settings_dict
        marker = tmp_path / f"paused-{n}"
        # An in-process worker of an earlier test leaves its log set-up (CELERY_LOG_*, _MP_FORK_*) here.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_LOG_", "_MP_FORK_"))}
        environ = inherited | {
            "DATABASE_URL": (
                f"postgres://{quote(db['USER'] or '')}:{quote(db['PASSWORD'] or '')}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
                f"?application_name={WORKER_SESSION}"
            ),
            "CELERY_BROKER_URL": broker_purged.conf.broker_url,
            "SIMGRID_PATH": str(simgrid_path),
            "GRID_BACKEND": "simulator",
            "DEBUG": "true",
            "VAR_DIR": str(tmp_path / "var"),
            "CELERY_SKIP_CHECKS": "1",
            "JOB_TEST_PAUSE_MARKER": str(marker),
            **env,
        }
        log = open(tmp_path / f"worker-{n}.log", "w")
        proc = subprocess.Popen(
            [
                str(CELERY),
                "-A",
                "dashboard",
                "worker",
                f"--pool={pool}",
                "--concurrency=1",
                "--loglevel=INFO",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
                "-n",
                f"killtest{n}@%h",
            ],
            cwd=BASE_DIR,
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append((proc, log))
        # Tests that look at the worker's behaviour need it consuming before they send anything.
        logged = tmp_path / f"worker-{n}.log"
        wait_until(lambda: " ready." in logged.read_text() or proc.poll() is not None, timeout=60, what="the worker")
        assert proc.poll() is None, logged.read_text()
        return proc, marker

    yield start
    for proc, log in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()


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
    with start_worker(broker_purged, pool="solo", perform_ping_check=False, shutdown_timeout=30):
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
    with start_worker(broker_purged, pool="solo", perform_ping_check=False, shutdown_timeout=30):
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
