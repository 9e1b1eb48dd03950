"""Issue 33's first Done-when: node_register against a Grid Proxy stand-in, with the stand-in rmb-peer
(`manage.py simgrid rmb-peer`, a process of its own) answering for two nodes and silent for a third."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from io import StringIO
from pathlib import Path

import pytest
import redis
from django.core.management import call_command

from dashboard.capacity import GiB
from dashboard.grid.rmb.client import REQUEST_QUEUE
from dashboard.models import Node, PoolReport
from sim.grid import SimulatedGrid, serve_simulator

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
ONE_SSD = int(931.5 * GiB)
HALF_SSD = int(465.75 * GiB)
SILENT_DEADLINE = 0.05  # seconds, where only the silent node is asked: nothing has to answer within it


def three_nodes(grid: SimulatedGrid, *, third: str, replace: bool = False) -> None:
    grid.add_node(
        2310, cru=8, mru=31 * GiB, sru=ONE_SSD, twin_id=3310, farm_id=7, zos_build="v3.14.0-sim", replace=replace
    )
    grid.add_node(
        2311,
        cru=8,
        mru=31 * GiB,
        sru=2 * HALF_SSD,
        pools=[HALF_SSD, HALF_SSD],
        twin_id=3311,
        farm_id=7,
        replace=replace,
    )
    grid.add_node(2312, cru=8, mru=31 * GiB, sru=ONE_SSD, twin_id=3312, farm_id=7, status=third, replace=replace)


@pytest.fixture
def grid_proxy(tmp_path, settings):
    """The Grid Proxy stand-in: the simulated grid's HTTP face, every node up."""
    grid = SimulatedGrid(tmp_path / "proxy.sqlite3")
    three_nodes(grid, third="up")
    server = serve_simulator(grid, port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    settings.GRID_BACKEND = "gridproxy"
    settings.GRID_PROXY_URL = f"http://127.0.0.1:{server.server_address[1]}"
    settings.GRID_RETRIES = 0
    yield settings.GRID_PROXY_URL
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def rmb_peer_process(tmp_path_factory):
    """`manage.py simgrid rmb-peer` in a process of its own, over the suite's Redis, one for the module
    (a Django start-up each test was most of the module's time): (the process, the grid it serves)."""
    from django.conf import settings

    url = settings.CELERY_BROKER_URL
    if not url.startswith("redis://"):
        pytest.skip("needs the suite's Redis")
    seen = SimulatedGrid(tmp_path_factory.mktemp("rmb-peer") / "peer.sqlite3")
    three_nodes(seen, third="down")
    env = {**os.environ, "SIMGRID_PATH": str(seen.path), "DJANGO_SETTINGS_MODULE": "config.settings"}
    peer = subprocess.Popen(
        [sys.executable, "manage.py", "simgrid", "rmb-peer", "--redis", url],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        banner = peer.stdout.readline()
        assert "Stand-in rmb-peer" in banner, banner + (peer.stdout.read() if peer.poll() is not None else "")
        yield peer, seen
    finally:
        peer.terminate()
        peer.wait(10)


@pytest.fixture
def rmb_peer(rmb_peer_process, settings) -> SimulatedGrid:
    """The module's rmb-peer, its three nodes as at the start; the third, unreachable from the relay,
    never answers (down on the peer's side). The grid the peer serves."""
    peer, seen = rmb_peer_process
    assert peer.poll() is None, "the module's rmb-peer has exited"
    # Each test starts with the peer's queue and its request budget empty: an earlier test's calls in the
    # same second would otherwise leave a 50 ms call no room, and it would say so instead of what it tests.
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(REQUEST_QUEUE, "slicedash:rmb-budget")
    three_nodes(seen, third="down", replace=True)  # undo what an earlier test changed
    settings.RMB_REDIS_URL = settings.CELERY_BROKER_URL
    settings.RMB_DEADLINE = 1.0
    return seen


def register(node_id: int) -> dict:
    out = StringIO()
    call_command("node_register", str(node_id), "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.mark.slow
def test_done_when_1_two_nodes_answer_their_pools_and_the_silent_third_stays_prudent(grid_proxy, rmb_peer, settings):
    first, second = register(2310), register(2311)
    settings.RMB_DEADLINE = SILENT_DEADLINE  # only the silent node is asked now
    third = register(2312)
    assert (first["pools_source"], first["pools"]) == ("rmb", [ONE_SSD])
    assert first["slice"]["sru"] >= 150 * GiB
    assert (second["pools_source"], second["pools"]) == ("rmb", [HALF_SSD, HALF_SSD])
    assert (third["pools_source"], third["pools"]) == ("", None)
    assert "node 2312 did not answer zos.storage.pools over RMB within 0.05 s" in third["pools_heard"]
    assert "carved for every plausible layout" in third["pools_heard"]


def test_pools_heard_over_rmb_are_a_pool_report_with_its_source_and_time(grid_proxy, rmb_peer):
    register(2311)
    report = PoolReport.objects.get(node__grid_id=2311)
    assert (report.source, [p["size"] for p in report.pools], report.origin) == (
        "rmb",
        [HALF_SSD, HALF_SSD],
        "rmb-peer",
    )


def test_the_nodes_build_is_kept_when_it_answers(grid_proxy, rmb_peer):
    register(2310)
    assert Node.objects.get(grid_id=2310).zos_version == "v3.14.0-sim"


def test_a_node_that_tells_no_build_stays_of_unknown_version(grid_proxy, rmb_peer):
    register(2311)
    assert Node.objects.get(grid_id=2311).zos_version == ""


def test_the_words_say_which_pools_were_heard(grid_proxy, rmb_peer):
    out = StringIO()
    call_command("node_register", "2311", stdout=out)
    assert "node 2311 answered over RMB: SSD pools 465.75 GiB + 465.75 GiB" in out.getvalue()


def test_without_rmb_the_grid_proxy_node_is_carved_prudent_as_before(grid_proxy):
    first = register(2310)
    assert (first["pools_source"], first["pools"], first["pools_heard"]) == ("", None, "")


@pytest.mark.slow
def test_onboarding_a_farm_asks_every_new_node_and_carves_those_that_answered(grid_proxy, rmb_peer):
    call_command("node_register", "--farm-id", "7", stdout=StringIO())
    sources = dict(Node.objects.values_list("grid_id", "pools_source"))
    assert sources == {2310: "rmb", 2311: "rmb", 2312: ""}
    assert Node.objects.get(grid_id=2310).slices.first().sru >= 150 * GiB


def registered_prudent(settings, *node_ids: int) -> None:
    """Registered from the Grid Proxy with no rmb-peer configured: pools unknown."""
    url = settings.RMB_REDIS_URL
    settings.RMB_REDIS_URL = ""
    for node_id in node_ids:
        register(node_id)
    settings.RMB_REDIS_URL = url


@pytest.mark.slow
def test_the_fleet_watch_asks_the_nodes_whose_pools_are_unknown(grid_proxy, rmb_peer, settings):
    from dashboard.grid import get_grid
    from dashboard.nodes.services.watch import fleet_watch

    registered_prudent(settings, 2310, 2311, 2312)
    result = fleet_watch(grid=get_grid())
    assert (result.pools_asked, result.pools_heard) == (3, 2)
    assert dict(Node.objects.values_list("grid_id", "pools_source")) == {2310: "rmb", 2311: "rmb", 2312: ""}


def test_the_fleet_watch_leaves_pools_heard_lately_alone(grid_proxy, rmb_peer, settings):
    from dashboard.grid import get_grid
    from dashboard.nodes.services.watch import fleet_watch

    register(2310)
    assert fleet_watch(grid=get_grid()).pools_asked == 0


def test_pools_heard_make_a_prudent_catalog_stale_with_the_disk_it_gives_back(grid_proxy, rmb_peer, settings):
    from dashboard.grid import get_grid
    from dashboard.nodes.services.watch import fleet_watch

    registered_prudent(settings, 2310)
    fleet_watch(grid=get_grid())
    node = Node.objects.get(grid_id=2310)
    assert (node.carved_pools_known, node.pools_sru) == (False, [ONE_SSD])
    assert node.stale


def test_a_precheck_asks_a_node_whose_pools_are_unknown(grid_proxy, rmb_peer, settings):
    from dashboard.catalogs.services.precheck import precheck_run

    registered_prudent(settings, 2311)
    precheck_run(node=Node.objects.get(grid_id=2311))
    assert Node.objects.get(grid_id=2311).pools_source == "rmb"


def test_the_fleet_page_says_rmb_is_off_without_a_peer(support_client):
    assert "RMB through rmb-peer is off (RMB_REDIS_URL unset)" in support_client.get("/").content.decode()


def test_the_fleet_page_says_how_many_nodes_answered_in_the_last_watch(grid_proxy, rmb_peer, settings, support_client):
    from dashboard.jobs.results import WatchResult
    from dashboard.models import Job

    registered_prudent(settings, 2310, 2311, 2312)
    Job.objects.create(
        kind=Job.Kind.FLEET_WATCH,
        state=Job.State.SUCCEEDED,
        finished_at=Node.objects.first().seen_at,
        result=WatchResult(nodes=3, read=3, pools_asked=3, pools_heard=2).stored(),
    )
    page = support_client.get("/").content.decode()
    assert "RMB is on: the last watch asked 3 nodes their pools, 2 answered." in page


def test_the_fleet_watch_asks_again_a_node_whose_total_changed(grid_proxy, rmb_peer, tmp_path):
    from dashboard.grid import get_grid
    from dashboard.nodes.services.watch import fleet_watch

    register(2310)
    for grid in (SimulatedGrid(tmp_path / "proxy.sqlite3"), rmb_peer):  # a second SSD, as the proxy and the node say
        grid.add_node(
            2310, cru=8, mru=31 * GiB, sru=2 * ONE_SSD, pools=[ONE_SSD, ONE_SSD], twin_id=3310, farm_id=7, replace=True
        )
    result = fleet_watch(grid=get_grid())
    assert (result.pools_asked, Node.objects.get(grid_id=2310).pools_sru) == (1, [ONE_SSD, ONE_SSD])


def test_a_precheck_reads_the_nodes_own_counters_beside_the_proxys(grid_proxy, rmb_peer):
    from dashboard.catalogs.services.precheck import precheck_run

    register(2310)
    report = precheck_run(node=Node.objects.get(grid_id=2310))
    assert "node 2310 says itself (over RMB, now): 3.1 GiB memory and 20 GiB SSD used, 0 deployment(s)" in (
        report.counters_words
    )
    assert report.counters_words.endswith("(they agree)")


def test_a_precheck_of_a_silent_node_says_the_proxys_reading_alone_is_used(grid_proxy, rmb_peer, settings):
    from dashboard.catalogs.services.precheck import precheck_run

    settings.RMB_DEADLINE = SILENT_DEADLINE  # only the silent node is asked
    register(2312)
    report = precheck_run(node=Node.objects.get(grid_id=2312))
    assert "node 2312 did not answer zos.statistics.get over RMB within 0.05 s" in report.counters_words
    assert report.counters_words.endswith("the Grid Proxy's reading alone is used")
