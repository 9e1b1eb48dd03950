"""Progress that means something: a job's steps with their times, nodes done, failures so far, time left."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_progress, job_request
from dashboard.models import Job


def _running(node, **fields) -> Job:
    return job_claim(job_id=job_request(kind=Job.Kind.REREGISTER, node=node, source="command", **fields).job.pk)


def test_a_new_kind_of_step_is_added_and_the_same_kind_with_other_numbers_is_not():
    job = Job(steps=[])
    now = timezone.now()
    job.steps = job.steps_with("reading the grid", now)
    assert job.steps_with("reading the grid", now) is None
    job.steps = job.steps_with("10 of 1,000 nodes done", now)
    assert job.steps_with("20 of 1,000 nodes done; 2 failed", now) is not None
    assert job.steps_with("30 of 1,000 nodes done", now) is None
    assert [s["step"] for s in job.steps] == ["reading the grid", "10 of 1,000 nodes done"]


def test_the_step_list_keeps_its_first_and_latest_steps_when_it_is_long():
    job = Job(steps=[])
    now = timezone.now()
    for i in range(100):
        job.steps = job.steps_with(f"step {'ab'[i % 2]}{'x' * i}", now)
    assert len(job.steps) == Job.STEPS_KEPT and job.steps[0]["step"] == "step a"
    assert job.steps[-1]["step"].endswith("x" * 99)


def test_time_left_is_the_pace_so_far_applied_to_the_rest():
    now = timezone.now()
    job = Job(state=Job.State.RUNNING, started_at=now - timedelta(seconds=100), progress_done=250, progress_total=1000)
    assert job.time_left_at(now) == timedelta(seconds=300)
    assert Job(state=Job.State.RUNNING, started_at=now, progress_done=0, progress_total=10).time_left_at(now) is None


@pytest.mark.django_db
def test_job_progress_stores_each_new_step_with_its_time(legacy_fleet):
    job = _running(legacy_fleet(1)[0])
    job_progress(job=job, step="reading node 1's live capacity", done=0, total=3)
    job_progress(job=job, step="carving node 1's catalog", done=1)
    job_progress(job=job, step="carving node 1's catalog", done=2, failed=1)
    job.refresh_from_db()
    assert [s["step"] for s in job.steps] == ["reading node 1's live capacity", "carving node 1's catalog"]
    assert (job.progress_done, job.progress_failed) == (2, 1)


@pytest.mark.django_db
def test_a_finished_job_keeps_the_steps_it_went_through(legacy_fleet):
    job = _running(legacy_fleet(1)[0])
    job_execute(job=job)
    job.refresh_from_db()
    steps = [s["step"] for s in job.steps]
    assert steps[0].startswith("reading node 1") and "saving the new catalog" in steps


@pytest.mark.django_db
def test_a_bulk_job_counts_its_failures_as_it_goes(legacy_fleet):
    legacy_fleet(4)
    legacy_fleet.grid.remove_node(2)
    job = job_claim(job_id=job_request(kind=Job.Kind.BULK_REREGISTER, source="command").job.pk)
    job_execute(job=job)
    job.refresh_from_db()
    assert (job.state, job.progress_failed) == (Job.State.SUCCEEDED, 1)
    assert any("nodes done" in s["step"] for s in job.steps)


@pytest.mark.django_db
def test_the_job_page_shows_nodes_done_failures_and_time_left_of_a_running_bulk_job(support_client, legacy_fleet):
    legacy_fleet(1)
    job = job_claim(job_id=job_request(kind=Job.Kind.BULK_REREGISTER, source="command").job.pk)
    job_progress(job=job, step="finding stale catalogs", done=0, total=0)
    job_progress(job=job, step="300 of 1000 nodes done; 4 failed", done=300, total=1000, failed=4)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=30))
    body = support_client.get(reverse("job", args=[job.pk])).content.decode()
    assert "300 of 1,000" in body and 'data-failed="4"' in body
    assert re.search(r"about 1 min 1[01] s", body)
    steps = body[body.index('aria-label="Steps"') :]
    assert steps.index("finding stale catalogs") < steps.index("300 of 1000 nodes done; 4 failed")


@pytest.mark.django_db
def test_the_job_page_says_a_queued_job_waits_for_a_worker(support_client, legacy_fleet):
    job = job_request(kind=Job.Kind.PRECHECK, node=legacy_fleet(1)[0], source="command").job
    body = support_client.get(reverse("job-progress", args=[job.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert "Waiting for a worker to pick it up" in body and "queued: waiting for a worker" in body
