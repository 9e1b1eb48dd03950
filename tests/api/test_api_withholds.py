"""/api/v1/nodes/{id}/withhold: POST withholds (act scope, an admin's token), DELETE releases, GET reads."""

import datetime as dt

import pytest
from django.utils import timezone

from dashboard.models import AuditEvent, Node, NodeWithhold
from tests.factories import sim_node_1774

pytestmark = pytest.mark.django_db
PATH = "/api/v1/nodes/1774/withhold"


@pytest.fixture
def node(sim_node):
    return sim_node_1774(sim_node)


def test_it_withholds_with_a_reason_and_says_until_when(api_call, api_token, node):
    until = (timezone.now() + dt.timedelta(hours=4)).replace(microsecond=0)
    response = api_call("post", PATH, api_token("act"), json={"reason": "disk swap", "ends_at": until.isoformat()})
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["withheld"], body["withheld_reason"], body["windows"][0]["open"]) == (True, "disk swap", True)
    assert dt.datetime.fromisoformat(body["withheld_until"]) == until


def test_it_audits_the_withhold_as_the_tokens_user(api_call, api_token, node):
    api_call("post", PATH, api_token("act"), json={"reason": "disk swap"})
    event = AuditEvent.objects.get(action="node withheld")
    assert (event.source, event.actor.username) == ("api", "api-admins")


def test_a_future_window_is_not_in_force_yet(api_call, api_token, node):
    starts = (timezone.now() + dt.timedelta(hours=2)).isoformat()
    body = api_call("post", PATH, api_token("act"), json={"reason": "disk swap", "starts_at": starts}).json()
    assert (body["withheld"], body["windows"][0]["open"]) == (False, False)


def test_a_window_that_ends_before_it_starts_is_a_400_and_writes_nothing(api_call, api_token, node):
    now = timezone.now()
    response = api_call(
        "post",
        PATH,
        api_token("act"),
        json={"reason": "x", "starts_at": (now + dt.timedelta(hours=2)).isoformat(), "ends_at": now.isoformat()},
    )
    assert (response.status_code, response.json()["field"], NodeWithhold.objects.count()) == (400, "until", 0)


def test_a_time_without_a_zone_is_a_400(api_call, api_token, node):
    response = api_call("post", PATH, api_token("act"), json={"reason": "x", "ends_at": "2030-01-01T10:00:00"})
    assert (response.status_code, NodeWithhold.objects.count()) == (400, 0)


def test_a_reason_is_needed(api_call, api_token, node):
    assert api_call("post", PATH, api_token("act"), json={"reason": ""}).status_code == 400


def test_a_read_token_cannot_withhold(api_call, api_token, node):
    assert api_call("post", PATH, api_token("read"), json={"reason": "x"}).status_code == 403
    assert not NodeWithhold.objects.exists()


def test_a_read_token_reads_the_windows(api_call, api_token, node):
    api_call("post", PATH, api_token("act"), json={"reason": "disk swap"})
    body = api_call("get", PATH, api_token("read", role="support")).json()
    assert (body["withheld_reason"], len(body["windows"])) == ("disk swap", 1)


def test_delete_releases_and_is_audited(api_call, api_token, node):
    token = api_token("act")
    api_call("post", PATH, token, json={"reason": "disk swap"})
    response = api_call("delete", PATH, token)
    assert (response.status_code, response.json()["withheld"]) == (200, False)
    assert AuditEvent.objects.filter(action="node withhold released", source="api").count() == 1


def test_delete_on_a_node_not_withheld_is_a_400(api_call, api_token, node):
    assert api_call("delete", PATH, api_token("act")).status_code == 400


def test_an_unregistered_node_is_a_404(api_call, api_token, node):
    assert api_call("post", "/api/v1/nodes/9/withhold", api_token("act"), json={"reason": "x"}).status_code == 404


def test_the_wrong_method_is_refused(api_call, api_token, node):
    assert api_call("put", PATH, api_token("act"), json={"reason": "x"}).status_code == 405
    assert Node.objects.get(pk=node.pk).withheld_reason == ""
