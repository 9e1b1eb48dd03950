"""A job whose grid read is slow: it keeps its heartbeat, keeps its node, and fails on its budget.

A real worker (in a thread) runs a re-register clicked on the node page against a loopback
proxy that drips its answer one byte a second. The reaper runs all the while with a heartbeat
limit shorter than the read, and a second re-register is asked for all the while.
"""

import time

import pytest
from django.urls import reverse

from dashboard.jobs.services.job_reaper import jobs_reap
from dashboard.jobs.services.jobs import job_request
from dashboard.models import Job, Slice
from tests.gridproxy_canned import Answer, sample

# slow: it asserts that the job ended within its budget, on the clock.
pytestmark = [pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEP_BUDGET = 6


@pytest.fixture
def dripping_proxy(gridproxy_serving, settings):
    url = gridproxy_serving({"/nodes/1774": Answer(200, sample("node-1774.json"), drip=1.0)})
    settings.GRID_DEADLINE = 60.0
    settings.GRID_STEP_DEADLINE = float(STEP_BUDGET)
    settings.GRID_READ_TIMEOUT = 10.0
    # Shorter than the read: without a beat during the read, the reaper would call the worker lost.
    settings.JOB_HEARTBEAT_TIMEOUT = 2
    return url


def test_it_fails_a_web_reregister_on_its_deadline_not_as_a_lost_worker(
    legacy_node_1774, dripping_proxy, live_worker, admins_client
):
    before = list(Slice.objects.filter(node=legacy_node_1774).values_list("pk", flat=True))
    response = admins_client.post(reverse("node-reregister", args=[1774]))
    job = Job.objects.get(kind=Job.Kind.REREGISTER)
    assert response.status_code == 302

    started, reaped, second_jobs = time.monotonic(), 0, 0
    while Job.objects.get(pk=job.pk).is_active:
        assert time.monotonic() - started < STEP_BUDGET + 20, "the job outlived its budget"
        reaped += jobs_reap()
        second = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774, source="command")
        if second.created:
            # The first may end between the loop's check and this request: a second job is then the
            # next click's, not a second one at once (the one-active-job constraint allowed it).
            first = Job.objects.get(pk=job.pk)
            second_jobs += first.is_active or first.finished_at > second.job.created_at
            break
        time.sleep(0.25)
    job.refresh_from_db()

    assert job.state == Job.State.FAILED
    assert job.error == f"the grid proxy did not finish answering within {STEP_BUDGET} s ({dripping_proxy}/nodes/1774)"
    assert (reaped, second_jobs) == (0, 0)
    assert Job.objects.exclude(pk=job.pk).filter(created_at__lt=job.finished_at).count() == 0
    assert list(Slice.objects.filter(node=legacy_node_1774).values_list("pk", flat=True)) == before
