"""Issue 34 item 7 / issue 35: one validation per withhold rule, every door through it (API, page, CLI)."""

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from dashboard.models import NodeWithhold
from tests.factories import sim_node_1774

pytestmark = pytest.mark.django_db
FAR = "2031-06-01T10:00:00+00:00"  # more than a year and a day ahead


@pytest.fixture
def node(sim_node):
    return sim_node_1774(sim_node)


def test_a_window_until_2031_is_refused_by_every_door(node, api_call, api_token, admins_client):
    api = api_call("post", "/api/v1/nodes/1774/withhold", api_token("act"), json={"reason": "swap", "ends_at": FAR})
    page = admins_client.post(
        reverse("node-withhold", args=[1774]), {"reason": "swap", "ends_at": "2031-06-01 10:00"}, follow=True
    )
    with pytest.raises(CommandError, match="cannot be taken"):
        call_command("node_withhold", "1774", "--reason", "swap", "--until", FAR)
    assert api.status_code == 400
    assert "cannot be taken" in page.content.decode()
    assert not NodeWithhold.objects.exists()


@pytest.mark.parametrize("edge", ["0001-01-01 00:00", "9999-12-31 23:00"])
def test_the_page_refuses_the_calendars_ends(node, admins_client, edge):
    response = admins_client.post(
        reverse("node-withhold", args=[1774]), {"reason": "swap", "starts_at": edge}, follow=True
    )
    assert "cannot be taken" in response.content.decode()
    assert not NodeWithhold.objects.exists()


def test_a_bidi_control_is_refused_in_a_reason(node, api_call, api_token, admins_client):
    reason = "disk \u202eswap"
    api = api_call("post", "/api/v1/nodes/1774/withhold", api_token("act"), json={"reason": reason})
    page = admins_client.post(reverse("node-withhold", args=[1774]), {"reason": reason}, follow=True)
    assert api.status_code == 400 and "U+202E" in api.json()["detail"]
    assert "U+202E" in page.content.decode()
    assert not NodeWithhold.objects.exists()
