"""Onboarding and the fleet watch against a Grid Proxy answering in today's shapes, and one whose answers
do not read: every node registered and its ZOS-light known; a refused answer loud (the command's output
and exit, the job, the fleet page, /metrics, an alert) and nothing stored overwritten by it."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from dashboard.alerts import rules
from dashboard.alerts.selectors.alerts import alert_figures
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import Job, Node
from dashboard.nodes.services.watch import fleet_watch_request
from tests.gridproxy_fleet import FleetProxy, fleet_node, start_fleet_proxy

pytestmark = pytest.mark.django_db

# tfgrid-sdk-go grid-proxy/pkg/types/validators.go Zos4NodesFeatures: a ZOS-light node.
LIGHT = ["zmount", "zdb", "volume", "gateway-name-proxy", "gateway-fqdn-proxy", "qsfs", "zlogs", "zmachine-light",
         "network-light", "mycelium"]  # fmt: skip
# What the old parser and the old simulator demanded, and no proxy sends.
INVENTED = {"wireguard": True, "yggdrasil": True, "public_ip": True}


@pytest.fixture
def proxy(settings, tmp_path):
    fleet, server = start_fleet_proxy(FleetProxy())
    settings.GRID_BACKEND, settings.GRID_PROXY_URL, settings.GRID_RETRIES = "gridproxy", fleet.url, 0
    settings.VAR_DIR = tmp_path  # the request budget's file, this test's own
    yield fleet
    server.shutdown()
    server.server_close()


def two_farms(proxy) -> None:
    """Two farms of 200 nodes: every 10th ZOS-light, every 25th with no features known ([])."""
    for n in range(1, 401):
        node = fleet_node(n, farm_id=100 if n <= 200 else 101)
        if n % 10 == 0:
            node["features"] = list(LIGHT)
        elif n % 25 == 0:
            node["features"] = []
        proxy.add(node)


def onboard(*extra: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(
        "node_register", "--farm-id", "100", "--farm-id", "101", "--policy", "legacy", "--max-new-nodes", "400",
        *extra, stdout=out, stderr=err,
    )  # fmt: skip
    return out.getvalue(), err.getvalue()


def test_two_farms_of_todays_nodes_register_every_node_and_know_the_light_ones(proxy):
    two_farms(proxy)
    out, _ = onboard()
    assert "registered 400 new node(s)" in out
    light = dict(Node.objects.values_list("grid_id", "light"))
    assert {n for n, is_light in light.items() if is_light} == set(range(10, 401, 10))
    assert {n for n, is_light in light.items() if is_light is None} == {n for n in range(25, 401, 25) if n % 10}
    assert sum(1 for is_light in light.values() if is_light is False) == 400 - 40 - 8


def test_a_proxy_whose_every_node_is_malformed_fails_the_command_with_the_reason(proxy):
    for n in range(1, 6):
        proxy.add({**fleet_node(n, farm_id=100), "features": INVENTED})
    with pytest.raises(CommandError) as raised:
        onboard()
    assert "every node the grid sent (5) was refused" in str(raised.value)
    assert "features is an object, must be a list of strings" in str(raised.value)
    assert not Node.objects.exists()


def test_the_progress_line_counts_the_nodes_it_could_not_read(proxy):
    proxy.add(fleet_node(1, farm_id=100), {**fleet_node(2, farm_id=100), "features": INVENTED})
    out, err = onboard()
    assert "1 node(s) so far, 1 could not be read" in err
    assert "could not read 2: node 2: features is an object" in out


def test_a_refused_reading_overwrites_nothing_stored(proxy):
    for n in range(1, 6):
        proxy.add(fleet_node(n, farm_id=100))
    onboard()
    before = list(Node.objects.order_by("grid_id").values_list("grid_id", "total_mru", "used_mru", "status", "light"))
    for n in range(1, 6):
        proxy.change(n, features=INVENTED, status="down", used_resources={"mru": 20 * 1024**3})
    with pytest.raises(CommandError, match="was refused"):
        onboard()
    after = list(Node.objects.order_by("grid_id").values_list("grid_id", "total_mru", "used_mru", "status", "light"))
    assert after == before


def run_watch_job() -> Job:
    job = fleet_watch_request(source="command")
    job_execute(job=job_claim(job_id=job.pk))
    job.refresh_from_db()
    return job


def test_a_watch_that_reads_no_node_fails_and_every_door_says_why(proxy, support_client, settings):
    for n in range(1, 4):
        proxy.add(fleet_node(n, farm_id=100))
    onboard()
    for n in range(1, 4):
        proxy.change(n, features=INVENTED)

    job = run_watch_job()

    assert job.state == Job.State.FAILED and "3 node(s) could not be read" in job.error
    assert job.result["refused_total"] == 3 and "features is an object" in job.result["refused"][0][1]
    page = support_client.get("/").content.decode()
    assert 'id="nodes-unreadable"' in page and "3 nodes could not be read" in page
    settings.METRICS_TOKEN = "scrape"
    metrics = support_client.get("/metrics", headers={"Authorization": "Bearer scrape"}).content.decode()
    assert "slicedash_grid_nodes_unreadable 3.0" in metrics
    fired = rules.nodes_unreadable(alert_figures(now=timezone.now(), limits=rules.Limits()), rules.Limits())
    assert fired and "features is an object" in fired[0].detail


def test_a_watch_that_reads_its_nodes_says_nothing_of_it(proxy, support_client):
    proxy.add(fleet_node(1, farm_id=100))
    onboard()
    assert run_watch_job().state == Job.State.SUCCEEDED
    assert 'id="nodes-unreadable"' not in support_client.get("/").content.decode()


def test_the_api_says_light_unknown_when_the_proxy_listed_no_features(proxy, api_call, api_token):
    proxy.add(fleet_node(1, farm_id=100), {**fleet_node(2, farm_id=100), "features": []})
    proxy.add({**fleet_node(3, farm_id=100), "features": list(LIGHT)})
    onboard()
    token = api_token("read")
    light = {n: api_call("get", f"/api/v1/nodes/{n}", token).json()["carries"]["light"] for n in (1, 2, 3)}
    assert light == {1: False, 2: None, 3: True}
