"""A precheck that may answer from the stored reading: young enough, it does; past READING_MAX_AGE_MINUTES,
it reads the grid again (bounded in time) before it answers."""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.capacity import GiB, SliceSize
from dashboard.jobs.services.jobs import job_request
from dashboard.models import Job, Node

NODE = dict(cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242)
PRECHECK = "/api/v1/nodes/1774/precheck"


def read_ago(node_id: int, age: timedelta) -> None:
    at = timezone.now() - age
    Node.objects.filter(grid_id=node_id).update(seen_at=at, prechecked_at=at)


@pytest.mark.django_db
def test_it_answers_from_a_young_stored_reading_without_asking_the_grid(api_call, api_token, sim_node, gridproxy_down):
    sim_node(1774, **NODE)
    read_ago(1774, timedelta(minutes=2))
    body = api_call("post", PRECHECK, api_token("precheck"), json={"max_age_seconds": 600}).json()
    assert (body["read_now"], body["free_slices"], body["placeable_now"]) == (False, 6, 6)
    assert 115 <= body["reading_age_seconds"] < 200


@pytest.mark.django_db
def test_it_reads_again_a_reading_past_the_age_limit_before_it_answers(api_call, api_token, sim_node, settings):
    settings.READING_MAX_AGE_MINUTES = 60
    sim_node(1774, **NODE)
    read_ago(1774, timedelta(hours=2))
    # The caller would take a day-old answer; the product does not give one past its own limit.
    body = api_call("post", PRECHECK, api_token("precheck"), json={"max_age_seconds": 86400}).json()
    assert body["read_now"] is True and body["reading_age_seconds"] < 60
    assert not Node.objects.get(grid_id=1774).reading_uncertain(timezone.now())


@pytest.mark.django_db
def test_it_reads_again_a_reading_older_than_the_callers_own_limit(api_call, api_token, sim_node):
    sim_node(1774, **NODE)
    read_ago(1774, timedelta(minutes=10))
    assert api_call("post", PRECHECK, api_token("precheck"), json={"max_age_seconds": 60}).json()["read_now"] is True


@pytest.mark.django_db
def test_it_says_503_and_keeps_the_old_reading_when_the_reread_cannot_be_done(
    api_call, api_token, sim_node, gridproxy_down
):
    sim_node(1774, **NODE)
    read_ago(1774, timedelta(hours=2))
    response = api_call("post", PRECHECK, api_token("precheck"), json={"max_age_seconds": 86400})
    assert response.status_code == 503
    assert Node.objects.get(grid_id=1774).reading_uncertain(timezone.now())


@pytest.mark.django_db
def test_it_bounds_the_reread_in_time(sim_node, settings, monkeypatch):
    from dashboard.catalogs.services import precheck
    from dashboard.grid.deadline import _step

    settings.PRECHECK_REREAD_DEADLINE = 2.5
    node = sim_node(1774, **NODE)
    read_ago(1774, timedelta(hours=2))
    budgets = []
    real = precheck.precheck_read  # the reads are what the deadline bounds; the writes come after
    monkeypatch.setattr(precheck, "precheck_read", lambda **kw: budgets.append(_step.get().seconds) or real(**kw))
    precheck.precheck_answer(node=Node.objects.get(pk=node.pk), max_age=timedelta(days=1))
    assert budgets == [2.5]


@pytest.mark.django_db
def test_a_precheck_job_refuses_a_bad_max_age(sim_node):
    from dashboard.jobs.services.jobs import JobError

    node = sim_node(1774, **NODE)
    with pytest.raises(JobError, match="max_age_seconds"):
        job_request(kind=Job.Kind.PRECHECK, node=node, parameters={"max_age_seconds": -1})


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_reads_again_a_reading_past_the_age_limit_before_the_precheck_answers(
    sim_node, live_worker, job_finished, settings
):
    settings.READING_MAX_AGE_MINUTES = 60
    node = sim_node(1774, **NODE)
    sim_node.grid.deploy_vm(1774, SliceSize(cru=1, mru=4 * GiB, sru=100 * GiB), name="outside-the-catalog")
    read_ago(1774, timedelta(hours=2))
    job = job_finished(job_request(kind=Job.Kind.PRECHECK, node=node, parameters={"max_age_seconds": 86400}).job)
    assert job.state == Job.State.SUCCEEDED, job.error
    assert job.result["read_now"] is True and job.result["reading_age_seconds"] < 60
    stored = Node.objects.get(pk=node.pk)
    assert stored.used_mru == sim_node.grid.node(1774).used.mru  # the VM the old reading did not know
    assert not stored.reading_uncertain(timezone.now())


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_answers_from_a_young_reading_without_reading_again(sim_node, live_worker, job_finished):
    node = sim_node(1774, **NODE)
    read_ago(1774, timedelta(minutes=1))
    sim_node.grid.deploy_vm(1774, SliceSize(cru=1, mru=4 * GiB, sru=100 * GiB), name="not-read-yet")
    job = job_finished(job_request(kind=Job.Kind.PRECHECK, node=node, parameters={"max_age_seconds": 600}).job)
    assert (job.state, job.result["read_now"]) == (Job.State.SUCCEEDED, False), job.error
    assert Node.objects.get(pk=node.pk).used_mru != sim_node.grid.node(1774).used.mru
