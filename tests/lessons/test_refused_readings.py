"""A node whose latest answer the parser refused says so on its own page (issue 43): what was refused, why,
by which reader, and that its figures are its last good reading's. One reason a node, cleared by a good
reading. The fleet watch, onboarding, re-register and precheck each keep it."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from dashboard.catalogs.services.precheck import precheck_run
from dashboard.catalogs.services.reregister import node_capacity_read
from dashboard.grid import get_grid
from dashboard.grid.types import MalformedPayload
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.lessons.services.refused_readings import readings_refused
from dashboard.models import Job, Node
from dashboard.nodes.services.watch import fleet_watch_request
from tests.gridproxy_fleet import FleetProxy, fleet_node, start_fleet_proxy

pytestmark = pytest.mark.django_db

# What the old parser demanded and no proxy sends: today's parser refuses it (features must be a list).
INVENTED = {"wireguard": True, "yggdrasil": True, "public_ip": True}
REFUSED = "features is an object, must be a list of strings"


@pytest.fixture
def proxy(settings, tmp_path):
    """Nodes 1 and 2 of farm 100, onboarded from a loopback Grid Proxy in today's shapes."""
    fleet, server = start_fleet_proxy(FleetProxy())
    settings.GRID_BACKEND, settings.GRID_PROXY_URL, settings.GRID_RETRIES = "gridproxy", fleet.url, 0
    settings.VAR_DIR = tmp_path  # the request budget's file, this test's own
    fleet.add(fleet_node(1, farm_id=100), fleet_node(2, farm_id=100))
    onboard()
    yield fleet
    server.shutdown()
    server.server_close()


def onboard(*extra: str) -> str:
    out = StringIO()
    call_command("node_register", "--farm-id", "100", "--policy", "legacy", *extra, stdout=out, stderr=StringIO())
    return out.getvalue()


def run_watch() -> Job:
    job = fleet_watch_request(source="command")
    job_execute(job=job_claim(job_id=job.pk))
    job.refresh_from_db()
    return job


def refused(grid_id: int) -> tuple[str, str]:
    return Node.objects.filter(grid_id=grid_id).values_list("refused_reading_by", "refused_reading").get()


def test_a_node_the_watch_could_not_read_says_so_on_its_page(proxy, support_client):
    kept = Node.objects.filter(grid_id=2).values_list("used_mru", "deployable", "seen_at").get()
    proxy.change(2, features=INVENTED, used_resources={"mru": 20 * 1024**3})

    run_watch()

    page = support_client.get("/nodes/2/").content.decode()
    assert 'id="refused-reading"' in page and "(fleet watch, " in page and REFUSED in page
    assert "the figures on this page are from its last good reading" in page
    assert Node.objects.filter(grid_id=2).values_list("used_mru", "deployable", "seen_at").get() == kept
    assert 'id="refused-reading"' not in support_client.get("/nodes/1/").content.decode()


def test_the_next_good_reading_clears_it(proxy, support_client):
    proxy.change(2, features=INVENTED)
    run_watch()
    proxy.change(2, features=[])

    run_watch()

    assert refused(2) == ("", "")
    assert 'id="refused-reading"' not in support_client.get("/nodes/2/").content.decode()


def test_onboarding_keeps_the_refusal_of_a_known_node_and_a_dry_run_writes_none(proxy):
    proxy.change(1, features=INVENTED)
    onboard("--dry-run")
    assert refused(1) == ("", "")

    onboard()

    assert refused(1)[0] == "onboarding" and REFUSED in refused(1)[1]
    assert refused(2) == ("", "")


def test_a_precheck_keeps_the_refusal(proxy):
    proxy.change(2, features=INVENTED)
    with pytest.raises(MalformedPayload):
        precheck_run(node=Node.objects.get(grid_id=2))
    assert refused(2)[0] == "precheck" and REFUSED in refused(2)[1]


def test_a_reregister_read_keeps_the_refusal(proxy):
    proxy.change(2, features=INVENTED)
    with pytest.raises(MalformedPayload):
        node_capacity_read(grid=get_grid(), node_id=2)
    assert refused(2)[0] == "re-register" and REFUSED in refused(2)[1]


def test_one_reason_a_node_the_latest_cut_to_its_column(proxy):
    readings_refused({2: "first: " + "x" * 1000}, by="precheck")
    readings_refused({2: "second: the answer is not JSON", 404: "not registered"}, by="fleet watch")
    assert refused(2) == ("fleet watch", "second: the answer is not JSON")
    readings_refused({1: "y" * 1000}, by="precheck")
    assert len(refused(1)[1]) == Node._meta.get_field("refused_reading").max_length
    assert not Node.objects.filter(grid_id=404).exists()
