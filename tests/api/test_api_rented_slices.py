"""Issue 35 finding 2: a rented slice is someone's; a report can neither take it nor free it."""

import datetime as dt

import pytest
from django.utils import timezone

from dashboard.models import Deployment, Slice
from tests.factories import sim_node_1774

pytestmark = pytest.mark.django_db
URL = "/api/v1/deployments"
AT = (timezone.now() - dt.timedelta(minutes=5)).replace(microsecond=0).isoformat()


@pytest.fixture
def rented_slice(sim_node):
    node = sim_node_1774(sim_node)
    Slice.objects.filter(node=node).update(created_at=timezone.now() - dt.timedelta(days=1))
    Slice.objects.filter(node=node, index=3).update(state=Slice.State.RENTED, rented_by_twin_id=4711)
    return node


def _report(api_call, token, outcome, **fields):
    body = {"node_id": 1774, "slice_index": 3, "marketplace_id": "m-9", "outcome": outcome, "at": AT, **fields}
    return api_call("post", URL, token, json=body)


def test_finding_2_deployed_on_a_rented_slice_is_a_409_naming_the_renter(api_call, api_token, rented_slice):
    response = _report(api_call, api_token("report"), "deployed")
    assert response.status_code == 409, response.content
    assert "twin 4711, who rents it" in response.json()["detail"]
    assert Slice.objects.get(node=rented_slice, index=3).state == Slice.State.RENTED
    assert not Deployment.objects.filter(marketplace_id="m-9").exists()


def test_finding_2_released_cannot_free_a_rented_slice(api_call, api_token, rented_slice):
    token = api_token("report")
    _report(api_call, token, "deployed")
    response = _report(api_call, token, "released")
    assert response.status_code == 409
    assert Slice.objects.get(node=rented_slice, index=3).state == Slice.State.RENTED


def test_a_free_slice_is_still_taken_by_a_deployed_report(api_call, api_token, rented_slice):
    response = _report(api_call, api_token("report"), "deployed", slice_index=4)
    assert response.status_code == 201, response.content
    assert Slice.objects.get(node=rented_slice, index=4).state == Slice.State.DEPLOYED
