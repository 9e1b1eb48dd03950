"""The first screen says what can be fixed: phantom slices on up nodes (red only above zero), apart
from capacity that waits on a wake or a repair (neutral), in the cards and the API alike (issue 25)."""

import re

import pytest
from django.urls import reverse

from dashboard.figures.services.farm_totals import farm_totals_refresh
from dashboard.models import Node


def figures(nodes, statuses_and_phantoms):
    for node, (status, phantom) in zip(nodes, statuses_and_phantoms, strict=True):
        Node.objects.filter(pk=node.pk).update(status=status, phantom_slices=phantom, placeable_now=0)
    farm_totals_refresh()


def card(page: str, card_id: str) -> str:
    return re.search(rf'<div class="([^"]*)" id="{card_id}">(.*?)</div>', page, re.S).group(0)


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["", "?status=standby"], ids=["kept totals", "filtered aggregate"])
def test_phantoms_only_on_standby_or_down_nodes_show_no_red(legacy_fleet, support_client, api_call, api_token, query):
    nodes = legacy_fleet(3)
    figures(nodes, [("standby", 4), ("down", 3), ("standby", 0)])
    page = support_client.get(reverse("fleet") + query).content.decode()
    assert "bad" not in card(page, "phantom-up").split(">")[0] and "none to fix" in card(page, "phantom-up")
    waiting = 7 if not query else 4
    assert f"<dd>{waiting}<" in card(page, "phantom-waiting")
    if not query:
        body = api_call("get", "/api/v1/fleet", api_token()).json()
        assert (body["phantom"], body["phantom_on_up_nodes"], body["phantom_waiting"]) == (7, 0, 7)


@pytest.mark.django_db
def test_a_phantom_on_an_up_node_is_red_with_its_own_count(legacy_fleet, support_client, api_call, api_token):
    nodes = legacy_fleet(3)
    figures(nodes, [("standby", 4), ("up", 2), ("down", 3)])
    page = support_client.get(reverse("fleet")).content.decode()
    up = card(page, "phantom-up")
    assert 'class="total bad"' in up and "<dd>2<" in up
    assert "<dd>7<" in card(page, "phantom-waiting")
    body = api_call("get", "/api/v1/fleet", api_token()).json()
    assert (body["phantom"], body["phantom_on_up_nodes"], body["phantom_waiting"]) == (9, 2, 7)
