"""The fleet watch (services.watch): every registered node read again in pages, each page one transaction."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard import node_events
from dashboard.capacity import GiB
from dashboard.grid.proxy import GridProxyClient
from dashboard.models import Deployment, Job, Node, NodeEvent
from dashboard.services.job_run import job_execute
from dashboard.services.jobs import job_claim
from dashboard.services.onboarding import OnboardRequest, grid_onboard
from dashboard.services.watch import fleet_watch, fleet_watch_request
from tests.gridproxy_fleet import FleetProxy, fleet_node, start_fleet_proxy

pytestmark = pytest.mark.django_db


@pytest.fixture
def proxy():
    fleet, server = start_fleet_proxy(FleetProxy())
    fleet.add(*(fleet_node(n, farm_id=4242 if n < 8 else 4243) for n in range(1, 11)))
    yield fleet
    server.shutdown()
    server.server_close()


def client(proxy) -> GridProxyClient:
    return GridProxyClient(proxy.url, retries=0, deadline=10.0)


@pytest.fixture
def registered(proxy):
    grid_onboard(request=OnboardRequest(farm_ids=(4242, 4243)), grid=client(proxy))
    return proxy


def test_it_reads_every_registered_node_a_page_at_a_time(registered):
    registered.requests = 0

    result = fleet_watch(grid=client(registered), page_size=4)

    assert (result.nodes, result.read, result.pages) == (10, 10, 3)
    assert registered.requests == 3  # 4 + 4 + 2 ids, one request each


def test_what_changed_on_the_grid_is_on_the_nodes_after_one_run(registered):
    registered.change(3, status="down")
    registered.change(5, used_resources={"mru": 11 * GiB})
    registered.change(9, total_resources={"sru": 2 * int(931.5 * GiB)})

    result = fleet_watch(grid=client(registered), page_size=4)

    nodes = {n.grid_id: n for n in Node.objects.all()}
    assert nodes[3].status == "down"
    assert nodes[5].used_mru == 11 * GiB
    assert nodes[9].total_sru == 2 * int(931.5 * GiB)
    assert result.changed == 3


def test_the_figures_follow_the_readings(registered):
    registered.change(3, status="down")

    fleet_watch(grid=client(registered))

    node = Node.objects.get(grid_id=3)
    assert node.placeable_now == 0
    assert node.phantom_reasons.get("down") == node.slices_free > 0


def test_a_proxy_that_refuses_node_ids_is_read_by_farm_pages(registered):
    registered.refuse_node_ids = True
    registered.change(4, status="standby")
    registered.add(fleet_node(99, farm_id=4242))  # on the farm, never registered: not the watch's to add

    result = fleet_watch(grid=client(registered), page_size=4)

    assert result.by_farm and result.read == 10
    assert Node.objects.get(grid_id=4).status == "standby"
    assert not Node.objects.filter(grid_id=99).exists()
    assert "refused node_ids" in result.notes[0]


def test_a_node_gone_from_the_grid_is_listed_with_why_and_keeps_its_reading(registered):
    seen_before = Node.objects.get(grid_id=6).seen_at
    del registered.nodes[6]

    result = fleet_watch(grid=client(registered), page_size=4)

    assert result.missed == [[6, "the grid does not know this node any more (404)"]]
    assert Node.objects.get(grid_id=6).seen_at == seen_before
    assert "did not answer for 1 node" in result.words()


def test_a_page_the_grid_fails_lists_its_nodes_and_the_run_goes_on(registered):
    registered.fail_next = 1

    result = fleet_watch(grid=client(registered), page_size=4)

    assert result.read == 6 and result.missed_total == 4
    assert [m[0] for m in result.missed] == [1, 2, 3, 4]
    assert "503" in result.missed[0][1]


def test_a_watch_asked_while_one_runs_is_a_skipped_job_that_says_which(registered):
    first = fleet_watch_request(source="command")

    second = fleet_watch_request(source="beat")

    assert first.state == Job.State.QUEUED
    assert second.state == Job.State.SUCCEEDED and second.pk != first.pk
    assert f"job #{first.pk}" in second.outcome.words() and "skipped" in second.outcome.words()


@pytest.fixture
def configured(registered, settings, tmp_path):
    settings.GRID_BACKEND = "gridproxy"
    settings.GRID_PROXY_URL = registered.url
    settings.GRID_RETRIES = 0
    settings.VAR_DIR = tmp_path  # the request budget's file, this test's own
    return registered


def run_watch_job() -> Job:
    job = fleet_watch_request(source="command")
    claimed = job_claim(job_id=job.pk)
    job_execute(job=claimed)
    job.refresh_from_db()
    return job


def test_the_watch_job_reports_steps_progress_and_its_result(configured):
    job = run_watch_job()

    assert job.state == Job.State.SUCCEEDED
    assert (job.progress_done, job.progress_total) == (10, 10)
    assert job.outcome.read == 10
    assert any("reading 10 registered node(s)" in step["step"] for step in job.steps)


def test_the_fleet_page_says_the_oldest_reading_and_which_nodes_the_grid_missed_and_why(configured, support_client):
    del configured.nodes[6]
    job = run_watch_job()

    page = support_client.get("/").content.decode()

    assert 'id="watch-status"' in page and "Oldest reading" in page
    assert f"job #{job.pk}" in page
    assert "node 6</a>: the grid does not know this node any more (404)" in page


def test_manage_fleet_watch_here_runs_it_and_says_what_it_read(configured):
    out = StringIO()

    call_command("fleet_watch", "--here", stdout=out)

    assert "fleet watch of every registered node" in out.getvalue()
    assert "read 10 of 10 node(s)" in out.getvalue()


def test_manage_fleet_watch_refuses_here_with_wait(configured):
    with pytest.raises(CommandError, match="one of --here and --wait"):
        call_command("fleet_watch", "--here", "--wait")


# --- the events the readings show -------------------------------------------------------------


def events_of(grid_id: int) -> list[str]:
    return list(NodeEvent.objects.filter(node__grid_id=grid_id).order_by("pk").values_list("kind", flat=True))


def test_each_change_the_watch_reads_is_a_node_event(registered):
    registered.change(2, status="down")
    registered.change(3, status="standby", power={"state": "Down", "target": "Down"})
    registered.change(4, uptime=60)
    registered.change(5, used_resources={"mru": 11 * GiB})
    registered.change(6, total_resources={"sru": 2 * int(931.5 * GiB)})
    registered.change(7, healthy=False)

    result = fleet_watch(grid=client(registered), page_size=4)

    assert events_of(2) == [node_events.WENT_DOWN]
    assert events_of(3) == [node_events.STANDBY]
    assert events_of(4) == [node_events.REBOOTED]
    assert events_of(5) == [node_events.USED_MOVED]
    assert events_of(6) == [node_events.TOTAL_CHANGED]
    assert events_of(7) == [node_events.UNHEALTHY]
    assert events_of(1) == [] and result.events == 6


def test_a_wake_asked_that_did_not_happen_then_did(registered):
    registered.change(3, status="standby", power={"state": "Down", "target": "Down"})
    fleet_watch(grid=client(registered))
    registered.change(3, power={"target": "Up"})
    fleet_watch(grid=client(registered))
    registered.change(3, status="up", power={"state": "Up"})
    fleet_watch(grid=client(registered))

    assert events_of(3) == [node_events.STANDBY, node_events.WAKE_NOT_WOKEN, node_events.WOKEN]


def test_used_capacity_that_moved_with_an_outcome_reported_is_no_event(registered):
    node = Node.objects.get(grid_id=5)
    Deployment.objects.create(node=node, slice_index=0, cru=1, mru=4 * GiB, sru=150 * GiB, state="deployed")
    registered.change(5, used_resources={"mru": 7 * GiB})

    fleet_watch(grid=client(registered))

    assert events_of(5) == []


def test_subscribers_hear_of_their_kind_once_the_page_commits(registered, django_capture_on_commit_callbacks):
    heard = []
    listener = heard.extend
    node_events.node_events_subscribe(node_events.USED_MOVED, listener)
    try:
        registered.change(5, used_resources={"mru": 11 * GiB})
        registered.change(2, status="down")
        with django_capture_on_commit_callbacks(execute=True):
            fleet_watch(grid=client(registered))
    finally:
        node_events.node_events_unsubscribe(node_events.USED_MOVED, listener)

    assert [(e.node.grid_id, e.kind) for e in heard] == [(5, node_events.USED_MOVED)]
