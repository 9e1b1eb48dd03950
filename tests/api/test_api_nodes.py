"""/api/v1/nodes/{id}: one node; POST .../precheck (a live read) and .../reregister (a job)."""

import pytest

from dashboard.capacity import GiB
from dashboard.models import AuditEvent, Job
from tests.factories import sim_node_1774

pytestmark = pytest.mark.django_db
NODE = dict(cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242)


@pytest.fixture
def node_1774(sim_node):
    """Node 1774 with the legacy carve and slice 0 deployed: slice 6 is phantom."""
    return sim_node_1774(sim_node, deployed=(0,))


def test_it_gives_the_catalog_and_figures(api_call, api_token, node_1774):
    body = api_call("get", "/api/v1/nodes/1774", api_token("read")).json()
    assert [s["state"] for s in body["catalog"]][:2] == ["deployed", "free"]
    assert (body["figures"]["nominal"], body["figures"]["stale"]) == (7, True)


def test_it_gives_the_reading_ages(api_call, api_token, node_1774):
    reading = api_call("get", "/api/v1/nodes/1774", api_token("read")).json()["reading"]
    assert reading["seen_at"] is not None
    assert 0 <= reading["prechecked_age_seconds"] < 60


def test_it_gives_the_nodes_report_time_and_whether_its_figures_are_uncertain(api_call, api_token, node_1774):
    from datetime import timedelta

    from django.utils import timezone

    from dashboard.models import Node

    Node.objects.filter(grid_id=1774).update(
        reported_at=timezone.now() - timedelta(minutes=12), seen_at=timezone.now() - timedelta(hours=5)
    )
    reading = api_call("get", "/api/v1/nodes/1774", api_token("read")).json()["reading"]
    assert 12 * 60 <= reading["reported_age_seconds"] < 13 * 60 and reading["uncertain"] is True


def test_it_answers_404_for_an_unregistered_node(api_call, api_token):
    response = api_call("get", "/api/v1/nodes/9", api_token("read"))
    assert (response.status_code, response.json()["detail"]) == (404, "node 9 is not registered")


def test_it_prechecks_one_slice_live(api_call, api_token, node_1774):
    body = api_call("post", "/api/v1/nodes/1774/precheck", api_token("precheck"), json={"slice_index": 6}).json()
    assert (body["placeable_now"], body["phantom_slices"]) == (5, [6])
    assert body["slice"]["fits"] is False
    assert "memory" in body["slice"]["words"]


def test_it_prechecks_every_free_slice_without_a_body(api_call, api_token, node_1774):
    response = api_call("post", "/api/v1/nodes/1774/precheck", api_token("precheck"))
    assert (response.status_code, response.json()["free_slices"], response.json()["slice"]) == (200, 6, None)


def test_it_refuses_a_precheck_of_a_slice_that_is_not_free(api_call, api_token, node_1774):
    response = api_call("post", "/api/v1/nodes/1774/precheck", api_token("precheck"), json={"slice_index": 0})
    assert (response.status_code, response.json()["field"]) == (400, "slice_index")


def test_it_refuses_a_precheck_to_a_read_token(api_call, api_token, node_1774):
    assert api_call("post", "/api/v1/nodes/1774/precheck", api_token("read"), json={}).status_code == 403


def test_it_answers_503_when_the_grid_cannot_be_read(api_call, api_token, node_1774, gridproxy_down):
    response = api_call("post", "/api/v1/nodes/1774/precheck", api_token("precheck"), json={})
    assert response.status_code == 503
    assert "nothing was recorded" in response.json()["detail"]


def test_it_starts_a_reregister_job(api_call, api_token, node_1774, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        response = api_call("post", "/api/v1/nodes/1774/reregister", api_token("act"), json={})
    job = Job.objects.get()
    assert (response.status_code, response.json()["job"]["id"], job.source, job.requested_by.username) == (
        202,
        job.pk,
        "api",
        "api-admins",
    )


def test_it_returns_the_active_job_instead_of_a_second(
    api_call, api_token, node_1774, django_capture_on_commit_callbacks
):
    token = api_token("act")
    with django_capture_on_commit_callbacks(execute=False):
        api_call("post", "/api/v1/nodes/1774/reregister", token, json={})
        again = api_call("post", "/api/v1/nodes/1774/reregister", token, json={"dry_run": True})
    assert (again.status_code, again.json()["created"], Job.objects.count()) == (200, False, 1)


def test_it_audits_a_job_requested_through_the_api(api_call, api_token, node_1774, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        api_call("post", "/api/v1/nodes/1774/reregister", api_token("act"), json={})
    assert AuditEvent.objects.filter(action="job.requested", source="api").count() == 1


def test_it_refuses_a_reregister_to_a_precheck_token(api_call, api_token, node_1774):
    assert api_call("post", "/api/v1/nodes/1774/reregister", api_token("precheck"), json={}).status_code == 403


def test_it_gives_what_the_nodes_refusals_taught(api_call, api_token, sim_node):
    from dashboard.capacity import GiB
    from dashboard.deployments.services.deploy import slices_deploy_all_free

    node = sim_node(2877, cru=24, mru=64 * GiB, sru=1863 * GiB, per_vm_overhead_mru=GiB)
    slices_deploy_all_free(node=node)
    body = api_call("get", "/api/v1/nodes/2877", api_token("read")).json()
    assert body["lessons"]["hidden_mru_per_vm"] == GiB
    assert [o["kind"] for o in body["lessons"]["observations"]] == ["memory"]
    assert body["figures"]["phantom_by_reason"] == {"memory": 3}  # the free slices the lesson rules out


def test_the_job_says_which_token_asked(api_call, api_token, node_1774, django_capture_on_commit_callbacks):
    secret = api_token("act", name="deployer")
    with django_capture_on_commit_callbacks(execute=False):
        body = api_call("post", "/api/v1/nodes/1774/reregister", secret, json={}).json()
    job = Job.objects.get()
    token = api_token.tokens[0]
    assert (job.requested_by, job.requested_token) == (token.user, token)
    assert body["job"]["requested_token"] == {"prefix": token.prefix, "name": "deployer"}
    assert job.asked_by == f"api-admins, with token {token.prefix}… (deployer)"
    requested = AuditEvent.objects.get(action="job.requested")
    assert requested.detail["token"]["prefix"] == token.prefix and token.prefix in requested.message


def test_a_job_asked_with_a_token_made_in_someone_elses_name_names_the_token_and_its_maker(
    api_call, api_token, role_user, node_1774, django_capture_on_commit_callbacks
):
    from dashboard.access.services.tokens import api_token_create

    # Only a superuser may make a token in someone else's name (issue 22): the job still names both.
    chief = role_user("admins", username="chief")
    minted = api_token_create(
        user=chief, name="minted", scopes="act", by=role_user("admins", username="ops", is_superuser=True)
    )
    with django_capture_on_commit_callbacks(execute=False):
        api_call("post", "/api/v1/nodes/1774/reregister", minted.secret, json={})
    job = Job.objects.get()
    assert job.asked_by == f"chief, with token {minted.token.prefix}… (minted)"
    assert AuditEvent.objects.get(action="job.requested").detail["token"]["made_by"] == "ops"
