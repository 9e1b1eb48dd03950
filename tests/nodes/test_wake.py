"""Issue 45: standby. How long a wake takes, measured per farm from the watch's readings (the node events
`wake-not-woken` then `woken`), and whether to wait for one or go elsewhere: on the node page, in the API and
on the placement page."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.capacity import GiB, node_events
from dashboard.models import Node, NodeEvent
from dashboard.nodes.selectors.wake import farm_wakes
from tests.factories import node_1774

pytestmark = pytest.mark.django_db
NOW = timezone.now()


def _event(node: Node, kind: str, minutes_ago: float) -> None:
    NodeEvent.objects.create(node=node, kind=kind, at=NOW - timedelta(minutes=minutes_ago), words=kind)


def _woken(node: Node, *, asked: float, up: float) -> None:
    _event(node, node_events.STANDBY, asked + 60)
    _event(node, node_events.WAKE_NOT_WOKEN, asked)
    _event(node, node_events.WOKEN, up)


def test_a_farms_wakes_are_the_time_from_the_wake_asked_to_up(legacy_fleet):
    a, b, c = legacy_fleet(3, farm_id=5)
    _woken(a, asked=300, up=290)  # 10 minutes
    _woken(b, asked=200, up=186)  # 14 minutes
    _woken(c, asked=100, up=94)  # 6 minutes
    # A wake asked, then the node went down: no wake to measure.
    _event(a, node_events.WAKE_NOT_WOKEN, 50)
    _event(a, node_events.WENT_DOWN, 40)
    wake = farm_wakes([5], now=NOW)[5]
    assert (wake.wakes, wake.median_seconds, wake.longest_seconds) == (3, 600.0, 840.0)
    assert "took about 10 minutes" in wake.words


def test_a_farm_with_no_wake_seen_says_so_and_farmerbots_limit(legacy_fleet):
    legacy_fleet(1, farm_id=6)
    wake = farm_wakes([6], now=NOW)[6]
    assert wake.wakes == 0 and "no wake in farm 6 was measured" in wake.words and "30 minutes" in wake.words


def test_a_standby_node_says_go_elsewhere_when_a_node_up_can_host_its_slice(
    sim_node, support_client, api_call, api_token
):
    sim_node(2733, **node_1774(status="standby", farm_id=9), policy_name="zos")
    sim_node(20, cru=8, mru=16 * GiB, sru=465 * GiB, farm_id=1, policy_name="zos")
    standby = Node.objects.get(grid_id=2733)
    _woken(standby, asked=500, up=487)
    page = support_client.get(reverse("node", args=[2733])).content.decode()
    assert 'id="wake-advice"' in page and "Go elsewhere: 1 node up now could host" in page
    wake = api_call("get", "/api/v1/nodes/2733", api_token("read")).json()["wake"]
    assert (wake["farm_id"], wake["wakes_measured"], wake["median_seconds"], wake["elsewhere"]) == (9, 1, 780.0, 1)


def test_a_standby_node_says_wait_when_nothing_up_can_host_it(sim_node, support_client):
    sim_node(2733, **node_1774(status="standby", farm_id=9), policy_name="zos")
    page = support_client.get(reverse("node", args=[2733])).content.decode()
    assert "Wait for the wake: no node up now could host a slice of this size" in page


def test_an_up_node_gives_no_wake_advice(sim_node, api_call, api_token):
    sim_node(1774, **node_1774(), policy_name="zos")
    assert api_call("get", "/api/v1/nodes/1774", api_token("read")).json()["wake"] is None


def test_placement_says_how_long_its_standby_nodes_take_to_wake(sim_node, support_client):
    sim_node(2733, **node_1774(status="standby", farm_id=9), policy_name="zos")
    _woken(Node.objects.get(grid_id=2733), asked=500, up=480)
    page = support_client.get(reverse("placement"), {"cru": 1, "mru": "4GiB", "sru": "100GiB"}).content.decode()
    assert 'id="standby-wake"' in page and "a wake in their farms took about 20 minutes" in page
