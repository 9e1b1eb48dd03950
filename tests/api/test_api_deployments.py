"""/api/v1/deployments: the failed ones (GET) and the outcomes the marketplace reports (POST)."""

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.models import AuditEvent, Deployment, Node, Slice
from tests.factories import sim_node_1774

pytestmark = pytest.mark.django_db
URL = "/api/v1/deployments"
MEMORY_ERROR = (
    "workload s1774_6 within deployment 7 failed with error: failed to satisfy required capacity: "
    "cannot fulfil required memory size 4294967296 bytes out of usable 4187593113 bytes"
)
NOW = timezone.now().replace(microsecond=0)
AT = (NOW - dt.timedelta(hours=1)).isoformat()


@pytest.fixture
def node_1774(sim_node):
    node = sim_node_1774(sim_node)
    Slice.objects.filter(node=node).update(created_at=NOW - dt.timedelta(days=1))  # older than the reports
    return node


@pytest.fixture
def report(api_call, api_token, django_capture_on_commit_callbacks):
    """report(**fields) -> response; a report token, a failure of slice 6 of node 1774 unless told otherwise."""
    token = api_token("report")

    def send(**fields):
        body = {
            "node_id": 1774,
            "slice_index": 6,
            "marketplace_id": "contract-42",
            "outcome": "failed",
            "error": MEMORY_ERROR,
            "at": AT,
            **fields,
        }
        body = {k: v for k, v in body.items() if v is not None}
        with django_capture_on_commit_callbacks(execute=False):
            return api_call("post", URL, token, json=body)

    return send


def test_it_records_a_reported_failure_classified(report, node_1774):
    response = report()
    deployment = response.json()["deployment"]
    assert response.status_code == 201
    assert (deployment["state"], deployment["cause"], deployment["needed_bytes"], deployment["usable_bytes"]) == (
        "failed",
        "memory",
        4294967296,
        4187593113,
    )


def test_it_records_an_outcome_reported_twice_once(report, node_1774):
    first, second = report(), report()
    assert (first.status_code, second.status_code, second.json()["created"]) == (201, 200, False)
    assert Deployment.objects.filter(marketplace_id="contract-42").count() == 1


def test_it_audits_a_report_once(report, node_1774):
    report(), report()
    assert AuditEvent.objects.filter(action="deployment.reported-failed", source="api").count() == 1


def test_it_keeps_the_slice_free_after_a_failure(report, node_1774):
    report()
    assert Slice.objects.get(node=node_1774, index=6).state == "free"


def test_it_marks_the_slice_deployed(report, node_1774):
    report(outcome="deployed", slice_index=2, error="")
    node = Node.objects.get(pk=node_1774.pk)
    assert (Slice.objects.get(node=node, index=2).state, node.slices_deployed, node.slices_free) == ("deployed", 1, 6)


def test_it_frees_the_slice_when_released(report, node_1774):
    report(outcome="deployed", slice_index=2, error="")
    response = report(outcome="released", slice_index=2)
    assert (response.status_code, response.json()["deployment"]["state"]) == (200, "deleted")
    assert Slice.objects.get(node=node_1774, index=2).state == "free"
    assert Deployment.objects.count() == 1


def test_it_refuses_a_second_deployment_on_a_deployed_slice(report, node_1774):
    report(outcome="deployed", slice_index=2, error="")
    response = report(outcome="deployed", slice_index=2, marketplace_id="contract-43")
    assert (response.status_code, response.json()["field"]) == (409, "slice_index")


def test_it_refuses_a_report_contradicting_the_record(report, node_1774):
    report()
    response = report(outcome="deployed")
    assert (response.status_code, response.json()["field"]) == (409, "outcome")


def test_it_refuses_the_same_id_on_another_slice(report, node_1774):
    report()
    assert report(slice_index=5).json()["field"] == "marketplace_id"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"marketplace_id": ""}, "marketplace_id"),
        ({"outcome": "exploded"}, "outcome"),
        ({"slice_index": -1}, "slice_index"),
        ({"slice_index": 99}, "slice_index"),
        ({"node_id": 9}, "node_id"),
        ({"at": "2026-05-01T12:00:00"}, "at"),
        ({"at": "yesterday"}, "at"),
        ({"at": "2999-01-01T00:00:00Z"}, "at"),
    ],
)
def test_it_answers_bad_input_with_400_naming_the_field(report, node_1774, fields, field):
    response = report(**fields)
    assert (response.status_code, response.json()["field"]) == (400, field)
    assert Deployment.objects.count() == 0


def test_it_names_a_missing_field(api_call, api_token, node_1774):
    response = api_call(
        "post", URL, api_token("report"), json={"node_id": 1774, "slice_index": 6, "outcome": "failed", "at": AT}
    )
    assert (response.status_code, response.json()["field"]) == (400, "marketplace_id")


def test_it_refuses_a_report_from_a_read_token(api_call, api_token, node_1774):
    assert api_call("post", URL, api_token("read"), json={}).status_code == 403


def test_it_shows_a_reported_memory_refusal_on_the_failed_deployments_page(report, node_1774, support_client):
    report()
    response = support_client.get(reverse("deployments-failed"))
    assert b'data-cause="memory"' in response.content
    assert b"cannot fulfil required memory size" in response.content
    assert b"ZOS refused the VM for memory" in response.content


def test_it_lists_failed_deployments(report, node_1774, api_call, api_token):
    report()
    body = api_call("get", URL, api_token("read"), outcome="failed", cause="memory").json()
    assert [(d["marketplace_id"], d["cause"]) for d in body["deployments"]] == [("contract-42", "memory")]
    assert body["deployments"][0]["words"].startswith("slice 6 on node 1774 failed: ZOS refused the VM for memory")


def test_it_filters_failed_deployments_by_node(report, node_1774, api_call, api_token):
    report()
    assert api_call("get", URL, api_token("read"), node_id=1).json()["count"] == 0


def test_it_refuses_an_outcome_it_cannot_list(api_call, api_token):
    response = api_call("get", URL, api_token("read"), outcome="deployed")
    assert (response.status_code, response.json()["field"]) == (400, "outcome")


def test_it_refuses_a_reversed_date_range(api_call, api_token):
    response = api_call("get", URL, api_token("read"), since="2026-02-01", until="2026-01-01")
    assert (response.status_code, response.json()["field"]) == (400, "until")
