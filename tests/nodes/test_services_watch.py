"""The fleet watch (nodes.services.watch): every registered node read again in pages, each page one transaction."""

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from dashboard.alerts.services.alerts import alerts_evaluate
from dashboard.capacity import GiB, node_events
from dashboard.grid.proxy import GridProxyClient
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import Deployment, Job, Node, NodeEvent
from dashboard.nodes.services.onboarding import OnboardRequest, grid_onboard
from dashboard.nodes.services.watch import fleet_watch, fleet_watch_request
from tests.alert_receiver import AlertReceiver
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


# --- the node page's timeline -----------------------------------------------------------------


def test_the_node_timeline_shows_the_events_uptime_health_and_power(registered, support_client):
    registered.change(3, status="standby", power={"state": "Down", "target": "Up"}, healthy=False)
    fleet_watch(grid=client(registered))

    whole = support_client.get("/nodes/3/events/")
    part = support_client.get("/nodes/3/events/", headers={"HX-Request": "true"})

    page = part.content.decode()
    assert whole.status_code == part.status_code == 200
    assert "<html" not in page and 'id="node-events"' in page
    assert "Went to standby" in page and "Wake asked, not woken" in page and "Unhealthy" in page
    assert "wake asked, not woken</span>" in page
    assert re.search(r'id="uptime-percent">\d+\.\d %', page)


def test_the_node_page_loads_the_timeline(registered, support_client):
    page = support_client.get("/nodes/3/").content.decode()
    assert 'hx-get="/nodes/3/events/"' in page and 'href="/nodes/3/events/"' in page


def test_a_user_in_no_group_may_not_read_the_timeline(registered, nogroup_client):
    assert nogroup_client.get("/nodes/3/events/").status_code == 403


def test_the_timeline_only_answers_get(registered, support_client):
    assert support_client.post("/nodes/3/events/").status_code == 405


def test_the_api_gives_the_uptime_and_the_grid_condition(registered, api_call, api_token):
    registered.change(3, status="standby", power={"state": "Down", "target": "Up"}, healthy=False)
    fleet_watch(grid=client(registered))
    token = api_token("read")

    row = next(n for n in api_call("get", "/api/v1/nodes", token).json()["nodes"] if n["node_id"] == 3)
    detail = api_call("get", "/api/v1/nodes/3", token).json()["grid_condition"]

    assert 0 <= row["uptime_percent_30d"] <= 100
    assert detail["wake_pending"] is True and detail["healthy"] is False
    assert (detail["power_state"], detail["power_target"], detail["uptime_seconds"]) == ("down", "up", 86_400)
    assert detail["no_contracts"] is True


def test_the_fleet_table_has_an_uptime_column(registered, support_client):
    fleet_watch(grid=client(registered))
    page = support_client.get("/").content.decode()
    assert "Up 30 d" in page and page.count('class="num uptime"') == 10


# --- the alerts the events make ---------------------------------------------------------------


def test_a_node_down_past_the_limit_and_a_wake_not_done_alert_their_farm_and_its_route(registered, settings):
    farm_receiver, everyone = AlertReceiver(), AlertReceiver()
    settings.ALERT_URLS = [everyone.url]
    settings.ALERT_FARM_URLS = {4243: [farm_receiver.url]}
    try:
        registered.change(9, status="down")
        registered.change(3, status="standby", power={"state": "Down", "target": "Up"})
        fleet_watch(grid=client(registered))
        later = timezone.now() + timedelta(hours=1)

        evaluation = alerts_evaluate(now=later)
    finally:
        farm_receiver.close()
        everyone.close()

    fired = {(a.rule, a.subject) for a in evaluation.fired}
    assert {("node-down", "farm 4243"), ("wake-not-woken", "farm 4242")} <= fired
    assert [m["title"] for m in farm_receiver.messages] == ["[firing] Nodes down: farm 4243"]
    assert len(everyone.messages) >= 2  # the global route hears every farm's


def test_a_hardware_change_alerts_until_the_node_is_re_read_a_day_later(registered):
    registered.change(6, total_resources={"sru": 2 * int(931.5 * GiB)})
    fleet_watch(grid=client(registered))

    soon = {(a.rule, a.subject) for a in alerts_evaluate(now=timezone.now() + timedelta(hours=1), deliver=False).fired}
    much_later = alerts_evaluate(now=timezone.now() + timedelta(days=2), deliver=False)

    assert ("hardware-changed", "farm 4242") in soon
    assert ("hardware-changed", "farm 4242") in {(a.rule, a.subject) for a in much_later.resolved}


def test_the_watch_reads_the_simulated_grid_of_the_embedded_default(sim_node):
    for node_id in range(1, 6):
        sim_node(node_id, cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    sim_node.grid.set_status(3, "down")

    result = fleet_watch(grid=sim_node.grid, page_size=2)

    assert (result.read, result.pages, result.missed_total) == (5, 3, 0)
    assert Node.objects.get(grid_id=3).status == "down"
    assert events_of(3) == [node_events.WENT_DOWN]


def test_the_fleet_page_says_so_when_readings_fall_two_intervals_behind(configured, support_client):
    run_watch_job()
    Node.objects.filter(grid_id=4).update(seen_at=timezone.now() - timedelta(hours=2))

    page = support_client.get("/").content.decode()

    assert "older than two watch intervals" in page
