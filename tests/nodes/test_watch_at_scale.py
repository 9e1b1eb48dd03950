"""The issue's "done when": a proxy whose nodes change between reads, other work reading it at the same time
through the one budget, and one watch run: every change in the API, the events and alerts, no 429."""

import multiprocessing
import os
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.alerts.services.alerts import alerts_evaluate
from dashboard.capacity import GiB, node_events
from dashboard.grid.budget import RedisWindow, RequestBudget, background
from dashboard.grid.proxy import GridProxyClient
from dashboard.models import Node, NodeEvent
from dashboard.nodes.services.onboarding import OnboardRequest, grid_onboard
from dashboard.nodes.services.watch import fleet_watch
from tests.budget_clients import read_through_budget
from tests.gridproxy_fleet import FleetProxy, fleet_node, start_fleet_proxy

REDIS_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/1")
NODES = 300
FARMS = (71, 72, 73)


@pytest.fixture
def proxy():
    # The real proxy's limiter: 20 a second from this address, then 429 with Retry-After: 1.
    fleet, server = start_fleet_proxy(FleetProxy(rate_limit=20, delay=0.02))
    fleet.add(*(fleet_node(n, farm_id=FARMS[n % 3]) for n in range(1, NODES + 1)))
    yield fleet
    server.shutdown()
    server.server_close()


@pytest.mark.slow
@pytest.mark.django_db
def test_every_change_shows_after_one_watch_with_other_work_reading_and_no_429(proxy, api_call, api_token):
    key = f"slicedash:test-budget:fleet:{uuid.uuid4().hex}"
    budget = RequestBudget(window=RedisWindow(REDIS_URL, key=key), limit=15, reserve=3)
    grid = GridProxyClient(proxy.url, retries=0, deadline=30.0, budget=budget)
    with background():
        grid_onboard(request=OnboardRequest(farm_ids=FARMS), grid=grid)
    changed = {
        "down": list(range(1, 11)),
        "used": list(range(11, 21)),
        "total": list(range(21, 26)),
        "rebooted": list(range(26, 31)),
    }
    for n in changed["down"]:
        proxy.change(n, status="down")
    for n in changed["used"]:
        proxy.change(n, used_resources={"mru": proxy.nodes[n]["used_resources"]["mru"] + 8 * GiB})
    for n in changed["total"]:
        proxy.change(n, total_resources={"sru": proxy.nodes[n]["total_resources"]["sru"] // 2})  # a disk gone
    for n in changed["rebooted"]:
        proxy.change(n, uptime=30)

    # Three other processes read the same proxy through the same budget while the watch runs.
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        others = pool.starmap_async(
            read_through_budget, [(proxy.url, "redis", REDIS_URL, 15, 3, 25, i == 0, key) for i in range(3)]
        )
        with background():
            result = fleet_watch(grid=grid, page_size=20)
        assert sum(others.get(timeout=120)) == 75

    assert proxy.refused_for_rate == 0
    assert result.read == NODES and result.missed_total == 0
    token = api_token("read")
    for n in changed["down"]:
        assert api_call("get", f"/api/v1/nodes/{n}", token).json()["status"] == "down"
    for n in changed["used"]:
        used = api_call("get", f"/api/v1/nodes/{n}", token).json()["used"]["mru"]
        assert used == proxy.nodes[n]["used_resources"]["mru"]
    for n in changed["total"]:
        assert (
            api_call("get", f"/api/v1/nodes/{n}", token).json()["total"]["sru"]
            == proxy.nodes[n]["total_resources"]["sru"]
        )
    kinds = dict(NodeEvent.objects.values_list("node__grid_id", "kind"))
    assert all(kinds[n] == node_events.WENT_DOWN for n in changed["down"])
    assert all(kinds[n] == node_events.USED_MOVED for n in changed["used"])
    assert all(kinds[n] == node_events.TOTAL_CHANGED for n in changed["total"])
    assert all(kinds[n] == node_events.REBOOTED for n in changed["rebooted"])
    # A catalog carved on the old disk no longer fits the new total: stale, and its reason says so.
    assert Node.objects.filter(grid_id__in=changed["total"], stale=True).count() == len(changed["total"])
    fired = {(a.rule, a.subject) for a in alerts_evaluate(now=timezone.now() + timedelta(hours=1), deliver=False).fired}
    assert {("node-down", f"farm {f}") for f in FARMS} <= fired
    assert any(rule == "hardware-changed" for rule, _ in fired)
