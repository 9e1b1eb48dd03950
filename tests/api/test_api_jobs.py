"""GET /api/v1/jobs: the jobs list, newest first, filtered and paged."""

import pytest

from dashboard.capacity import GiB
from dashboard.jobs.services.jobs import job_request
from dashboard.models import Job

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_jobs(sim_node, django_capture_on_commit_callbacks):
    a = sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    b = sim_node(1775, cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    with django_capture_on_commit_callbacks(execute=False):
        job_request(kind=Job.Kind.PRECHECK, node=a, source="command")
        job_request(kind=Job.Kind.REREGISTER, node=b, source="command")


def test_it_lists_jobs_newest_first(api_call, api_token, two_jobs):
    body = api_call("get", "/api/v1/jobs", api_token("read")).json()
    assert [(j["kind"], j["node_id"], j["state"]) for j in body["jobs"]] == [
        ("reregister", 1775, "queued"),
        ("precheck", 1774, "queued"),
    ]


def test_it_filters_by_kind(api_call, api_token, two_jobs):
    assert api_call("get", "/api/v1/jobs", api_token("read"), kind="precheck").json()["count"] == 1


def test_it_refuses_an_unknown_state_naming_the_field(api_call, api_token):
    response = api_call("get", "/api/v1/jobs", api_token("read"), state="asleep")
    assert (response.status_code, response.json()["field"]) == (400, "state")


def test_it_refuses_a_token_without_read(api_call, api_token):
    assert api_call("get", "/api/v1/jobs", api_token("act")).status_code == 403
