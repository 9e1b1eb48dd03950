"""dashboard.tasks through a real Celery worker (solo pool, in a thread) on Redis and PostgreSQL.

Jobs are requested the way the page and the command do (job_request, message sent on commit);
the worker claims and runs them; the tests read the Job rows the page would poll.
"""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import Job, Slice

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def catalog(node) -> list[tuple]:
    return list(Slice.objects.filter(node=node).order_by("index").values_list("pk", "index", "mru", "sru", "state"))


def reregister(node, **kwargs) -> Job:
    return job_request(kind=Job.Kind.REREGISTER, node=node, **kwargs).job


def queue_drained(app, timeout: float = 10.0) -> None:
    """Wait until the worker has taken every message from the queue (it may still hold some)."""
    deadline = time.monotonic() + timeout
    with app.connection_for_write() as conn:
        redis = conn.default_channel.client
        while redis.llen("celery"):
            assert time.monotonic() < deadline, "the worker did not take its messages"
            time.sleep(0.05)


def test_it_reregisters_node_1774_from_7_to_6_slices(legacy_node_1774, live_worker, job_finished):
    deployed = catalog(legacy_node_1774)[0]
    job = job_finished(reregister(legacy_node_1774))
    assert job.state == Job.State.SUCCEEDED, job.error
    assert (job.result["before"]["slices"], job.result["after"]["slices"]) == (7, 6)
    assert catalog(legacy_node_1774)[0] == deployed and len(catalog(legacy_node_1774)) == 6


def test_it_changes_nothing_when_run_a_second_time(legacy_node_1774, live_worker, job_finished):
    job_finished(reregister(legacy_node_1774))
    before = catalog(legacy_node_1774)
    second = job_finished(reregister(legacy_node_1774))
    assert (second.state, second.result["changed"], second.result["removed"], second.result["added"]) == (
        Job.State.SUCCEEDED,
        False,
        [],
        [],
    )
    assert catalog(legacy_node_1774) == before


def test_it_dry_runs_without_changing_the_catalog(legacy_node_1774, live_worker, job_finished):
    before = catalog(legacy_node_1774)
    job = job_finished(reregister(legacy_node_1774, dry_run=True))
    assert (job.state, job.result["dry_run"], job.result["after"]["slices"], len(job.result["added"])) == (
        Job.State.SUCCEEDED,
        True,
        6,
        5,
    )
    assert catalog(legacy_node_1774) == before


def test_it_records_progress_and_a_heartbeat(legacy_node_1774, live_worker, job_finished):
    job = job_finished(reregister(legacy_node_1774))
    assert (job.step, job.attempts, job.progress_done, job.progress_total) == ("done", 1, 3, 3)
    assert job.started_at <= job.heartbeat_at <= job.finished_at


def test_it_fails_the_job_when_the_grid_is_down(legacy_node_1774, gridproxy_down, live_worker, job_finished):
    before = catalog(legacy_node_1774)
    job = job_finished(reregister(legacy_node_1774))
    assert job.state == Job.State.FAILED and gridproxy_down.split("//")[1] in job.error
    assert catalog(legacy_node_1774) == before


def test_it_fails_the_job_when_the_node_is_not_on_the_grid(legacy_node_1774, live_worker, job_finished):
    legacy_node_1774.grid.remove_node(1774)
    before = catalog(legacy_node_1774)
    job = job_finished(reregister(legacy_node_1774))
    assert job.state == Job.State.FAILED and "1774" in job.error
    assert catalog(legacy_node_1774) == before


def test_it_fails_the_job_when_the_grid_answers_a_malformed_payload(
    legacy_node_1774, gridproxy_serving, live_worker, job_finished
):
    gridproxy_serving(
        {"/nodes/1774": {"nodeId": 1774, "farmId": 1, "status": "up", "capacity": {"total_resources": "lots"}}}
    )
    before = catalog(legacy_node_1774)
    job = job_finished(reregister(legacy_node_1774))
    assert job.state == Job.State.FAILED and "total_resources" in job.error
    assert catalog(legacy_node_1774) == before


def test_it_runs_a_precheck_job(legacy_node_1774, live_worker, job_finished):
    job = job_finished(job_request(kind=Job.Kind.PRECHECK, node=legacy_node_1774).job)
    assert (job.state, job.result["placeable_now"], job.result["phantom_slices"]) == (Job.State.SUCCEEDED, 5, [6])


def test_it_leaves_a_job_alone_while_another_worker_holds_it_and_beats(legacy_node_1774, broker_purged, live_worker):
    job = Job.objects.create(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    # Another worker holds the job and beats; a second delivery of its message arrives here and is
    # put off until the heartbeat would be stale (it stays reserved, so only the queue drains).
    holder = job_claim(job_id=job.pk)
    broker_purged.send_task("dashboard.job_run", args=[job.pk])
    queue_drained(broker_purged)
    time.sleep(0.5)
    job.refresh_from_db()
    assert (job.state, job.attempts, job.heartbeat_at) == (Job.State.RUNNING, 1, holder.heartbeat_at)


def test_it_takes_over_a_job_whose_pool_child_was_just_killed(
    legacy_node_1774, broker_purged, live_worker, settings, job_finished
):
    settings.JOB_HEARTBEAT_TIMEOUT = 2
    job = Job.objects.create(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    # A child claimed it and was killed a moment ago: its message is back at once, the heartbeat still fresh.
    job_claim(job_id=job.pk)
    broker_purged.send_task("dashboard.job_run", args=[job.pk], task_id=str(job.pk))
    job = job_finished(job, timeout=30)
    assert (job.state, job.attempts, len(catalog(legacy_node_1774))) == (Job.State.SUCCEEDED, 2, 6)


def test_it_reclaims_a_redelivered_job_whose_worker_died(
    legacy_node_1774, broker_purged, live_worker, settings, job_finished
):
    job = Job.objects.create(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    # The first worker claimed it long ago and vanished; its message comes back.
    job_claim(job_id=job.pk, now=timezone.now() - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT + 5))
    broker_purged.send_task("dashboard.job_run", args=[job.pk], task_id=str(job.pk))
    job = job_finished(job)
    assert (job.state, job.attempts, len(catalog(legacy_node_1774))) == (Job.State.SUCCEEDED, 2, 6)


def test_it_reaps_a_lost_job_through_the_beat_task(
    legacy_node_1774, broker_purged, live_worker, settings, job_finished
):
    job = Job.objects.create(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    job_claim(job_id=job.pk, now=timezone.now() - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT + 5))
    broker_purged.send_task("dashboard.jobs_reap")
    job = job_finished(job)
    assert job.error.startswith("worker lost: no heartbeat since ")


def test_it_shows_progress_while_a_bulk_job_runs(legacy_fleet, live_worker, job_finished):
    legacy_fleet(40)
    seen = set()
    job = job_request(kind=Job.Kind.BULK_REREGISTER).job
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            row = Job.objects.filter(pk=job.pk).values("state", "progress_done", "progress_total").get()
            if row["state"] == Job.State.RUNNING and row["progress_total"]:
                seen.add(row["progress_done"])
            time.sleep(0.005)
        connection.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        job = job_finished(job, timeout=60)
    finally:
        stop.set()
        watcher.join()
    assert job.state == Job.State.SUCCEEDED and job.result["reregistered"] == 40
    assert len(seen) > 1 and min(seen) < 40  # the page saw it move, not only the end
