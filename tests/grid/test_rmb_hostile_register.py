"""A node whose own pools answer is hostile or a little off (issue 44, MEDIUM 1): that answer is not taken,
for that node alone, with the reason where a person looks (the command's output, the job's result, the
node page, the API); the node is registered and carved as for unknown pools.

The Grid Proxy is the simulated grid's HTTP face; the rmb-peer is a thread on the suite's Redis that
answers twin 3310 (node 2310) as each case makes it, and twin 3311 (node 2311) honestly.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from io import StringIO

import pytest
import redis
from django.core.management import call_command
from django.test import Client

from dashboard.capacity import GiB
from dashboard.catalogs.services.precheck import precheck_run
from dashboard.grid import get_grid
from dashboard.grid.rmb.client import REQUEST_QUEUE
from dashboard.models import Node, PoolReport
from dashboard.nodes.services.watch import fleet_watch
from sim.grid import SimulatedGrid, serve_simulator
from sim.grid.rmb_peer import envelope
from tests.hostile_redis import DripRedis, HungRedis

pytestmark = pytest.mark.django_db
ONE_SSD = int(931.5 * GiB)
HONEST = [{"name": "a", "type": "ssd", "size": ONE_SSD, "used": 0}]


def pools(*sizes: int) -> list[dict]:
    return [{"name": f"p{i}", "type": "ssd", "size": size, "used": 0} for i, size in enumerate(sizes)]


# What twin 3310 answers, as raw text for its request, and words its refusal must hold.
CASES = {
    "nested JSON": (lambda r: "[" * 50_000 + "]" * 50_000, "nested deeper"),
    "a src of ²": (lambda r: json.dumps({**envelope(r["ref"], 3310, body=HONEST), "src": "²"}), "not a twin id"),
    "pools 0.3% over the SSD total": (
        lambda r: json.dumps(envelope(r["ref"], 3310, body=pools(int(ONE_SSD * 1.003)))),
        "more than the node's SSD total",
    ),
    "a first pool too small for the cache": (
        lambda r: json.dumps(envelope(r["ref"], 3310, body=pools(5 * GiB, ONE_SSD - 5 * GiB))),
        "the first pool is 5 GiB",
    ),
    "an err": (
        lambda r: json.dumps(envelope(r["ref"], 3310, err={"code": 1, "message": "storage is sad"})),
        "storage is sad",
    ),
}


@pytest.fixture
def grid_proxy(tmp_path, settings):
    grid = SimulatedGrid(tmp_path / "proxy.sqlite3")
    grid.add_node(2310, cru=8, mru=31 * GiB, sru=ONE_SSD, twin_id=3310, farm_id=7)
    grid.add_node(2311, cru=8, mru=31 * GiB, sru=ONE_SSD, twin_id=3311, farm_id=7)
    server = serve_simulator(grid, port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    settings.GRID_BACKEND = "gridproxy"
    settings.GRID_PROXY_URL = f"http://127.0.0.1:{server.server_address[1]}"
    settings.GRID_RETRIES = 0
    yield grid
    server.shutdown()
    server.server_close()


@pytest.fixture
def peer(settings):
    """peer(answer_of_3310): an rmb-peer thread answering every request until the test ends."""
    url = settings.CELERY_BROKER_URL
    if not url.startswith("redis://"):
        pytest.skip("needs the suite's Redis")
    conn = redis.Redis.from_url(url)
    conn.delete(REQUEST_QUEUE)
    settings.RMB_REDIS_URL, settings.RMB_DEADLINE = url, 1.0
    stop = threading.Event()
    threads = []

    def start(answer_of_3310) -> None:
        def serve():
            while not stop.is_set():
                item = conn.blpop([REQUEST_QUEUE], timeout=0.05)
                if item is None:
                    continue
                request = json.loads(item[1])
                if request["cmd"] == "zos.system.version":
                    answer = envelope(request["ref"], request["dst"][0], body={"zos": "v3.14.0-sim"})
                elif request["dst"] == [3310]:
                    answer = answer_of_3310(request)
                else:
                    answer = envelope(request["ref"], 3311, body=HONEST)
                conn.rpush(request["ret"], answer if isinstance(answer, str) else json.dumps(answer))

        threads.append(threading.Thread(target=serve, daemon=True))
        threads[-1].start()

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)


def register(node_id: int) -> dict:
    out = StringIO()
    call_command("node_register", str(node_id), "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.mark.parametrize("case", CASES)
def test_node_register_takes_the_node_prudent_and_says_why(grid_proxy, peer, case):
    answer, words = CASES[case]
    peer(answer)
    told = register(2310)
    node = Node.objects.get(grid_id=2310)
    assert (told["pools"], told["pools_source"], node.carved_pools_known) == (None, "", False)
    assert words in told["pools_heard"] and "carved for every plausible layout" in told["pools_heard"]
    assert words in node.pools_refused and node.slices.count() > 0
    assert not PoolReport.objects.filter(node=node).exists()


def test_the_node_page_and_the_api_say_why_its_answer_was_not_taken(grid_proxy, peer, role_user, api_token):
    peer(CASES["pools 0.3% over the SSD total"][0])
    register(2310)
    client = Client()
    client.force_login(role_user("support", username="sue", password=None))
    page = client.get("/nodes/2310/").content.decode()
    assert 'id="pools-refused"' in page and "more than the node's SSD total" in page
    detail = Client().get("/api/v1/nodes/2310", headers={"Authorization": f"Bearer {api_token('read')}"}).json()
    assert "more than the node's SSD total" in detail["pools"]["refused"] and detail["pools"]["refused_at"]


def test_an_onboarding_registers_every_node_and_lists_the_answer_it_did_not_take(grid_proxy, peer):
    peer(CASES["pools 0.3% over the SSD total"][0])
    out = StringIO()
    call_command("node_register", "--farm-id", "7", "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert dict(Node.objects.values_list("grid_id", "pools_source")) == {2310: "", 2311: "rmb"}
    assert result["registered"] == 2 and any("node 2310" in note for note in result["notes"])
    assert "more than the node's SSD total" in Node.objects.get(grid_id=2310).pools_refused


def test_a_hostile_answer_in_a_watch_fails_no_node_but_its_own(grid_proxy, peer, settings):
    rmb = settings.RMB_REDIS_URL
    settings.RMB_REDIS_URL = ""
    register(2310), register(2311)  # registered without a peer: pools unknown
    settings.RMB_REDIS_URL = rmb
    nested = base64.b64encode(("[" * 50_000 + "]" * 50_000).encode()).decode()  # in dat: its call is known
    peer(lambda r: json.dumps({**envelope(r["ref"], 3310, body=HONEST), "dat": nested}))
    result = fleet_watch(grid=get_grid())
    assert (result.pools_asked, result.pools_heard) == (2, 1)
    assert any("node 2310" in note and "nested deeper" in note for note in result.notes)
    assert Node.objects.get(grid_id=2311).pools_source == "rmb"


def test_an_answer_taken_later_clears_the_refusal(grid_proxy, peer, settings):
    honest_later = {"answer": CASES["a src of ²"][0]}
    peer(lambda request: honest_later["answer"](request))
    register(2310)
    assert Node.objects.get(grid_id=2310).pools_refused
    honest_later["answer"] = lambda r: envelope(r["ref"], 3310, body=HONEST)
    fleet_watch(grid=get_grid())
    node = Node.objects.get(grid_id=2310)
    assert (node.pools_refused, node.pools_refused_at, node.pools_sru) == ("", None, [ONE_SSD])


def test_a_precheck_says_why_the_nodes_answer_was_not_taken(grid_proxy, peer, settings):
    rmb = settings.RMB_REDIS_URL
    settings.RMB_REDIS_URL = ""
    register(2310)
    settings.RMB_REDIS_URL = rmb
    peer(lambda r: json.dumps({**envelope(r["ref"], 3310), "dat": base64.b64encode(b"\xff").decode()}))
    report = precheck_run(node=Node.objects.get(grid_id=2310))
    assert "not JSON" in report.pools_words and "not JSON" in Node.objects.get(grid_id=2310).pools_refused


@pytest.mark.django_db(transaction=True)
def test_the_api_precheck_asks_the_node_while_holding_no_lock_on_its_row(grid_proxy, peer, settings, api_token):
    """MEDIUM 3: while the precheck waits on the node over RMB (its pools, its counters), a hold, a report
    or a re-register of the same node can lock its row at once."""
    from django.db import DatabaseError, connection, transaction

    rmb = settings.RMB_REDIS_URL
    settings.RMB_REDIS_URL = ""
    register(2310)  # pools unknown: the precheck asks them, and the counters
    settings.RMB_REDIS_URL = rmb
    seen = []

    def answer_after_trying_the_lock(request):
        try:
            with transaction.atomic():
                Node.objects.select_for_update(nowait=True).get(grid_id=2310)
            seen.append((request["cmd"], "free"))
        except DatabaseError:
            seen.append((request["cmd"], "locked"))
        finally:
            connection.close()  # the peer's thread's own connection
        return envelope(request["ref"], 3310, body=HONEST if request["cmd"] == "zos.storage.pools" else None)

    peer(answer_after_trying_the_lock)
    response = Client().post(
        "/api/v1/nodes/2310/precheck",
        "",
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_token('precheck')}"},
    )
    assert response.status_code == 200
    assert sorted(seen) == [("zos.statistics.get", "free"), ("zos.storage.pools", "free")]


def fifteen_prudent_nodes(grid: SimulatedGrid) -> None:
    for node_id in range(2320, 2335):
        grid.add_node(node_id, cru=8, mru=31 * GiB, sru=ONE_SSD, twin_id=node_id + 1000, farm_id=8)
    call_command("node_register", "--farm-id", "8", stdout=StringIO(), stderr=StringIO())


@pytest.mark.parametrize("server", [HungRedis, DripRedis])
def test_a_watch_facing_a_failed_peer_redis_stops_asking_and_says_so(grid_proxy, settings, server):
    fifteen_prudent_nodes(grid_proxy)
    peer = server()
    settings.RMB_REDIS_URL, settings.RMB_DEADLINE = peer.url, 0.3
    try:
        result = fleet_watch(grid=get_grid())
    finally:
        peer.close()
    assert (result.read, result.pools_asked, result.pools_heard) == (15, 15, 0)
    assert any(
        note.startswith("pools: the round stopped asking: ") and "Redis" in note and "failed" in note
        for note in result.notes
    )
    assert peer.accepted <= 3  # one connection, not one per node


@pytest.mark.slow
@pytest.mark.parametrize("server", [HungRedis, DripRedis])
def test_a_watch_facing_a_failed_peer_redis_ends_within_its_own_deadline(grid_proxy, settings, server):
    fifteen_prudent_nodes(grid_proxy)
    peer = server()
    settings.RMB_REDIS_URL, settings.RMB_DEADLINE, settings.GRID_STEP_DEADLINE = peer.url, 3.0, 5.0
    try:
        began = time.monotonic()
        fleet_watch(grid=get_grid())
        took = time.monotonic() - began
    finally:
        peer.close()
    # Before: 5 s a node asked (80 s for these 15). Now one call's deadline, and the proxy's reads.
    assert took < 3.0 + 1.0, f"the watch took {took:.2f} s"


@pytest.mark.slow
def test_an_api_precheck_facing_a_hung_peer_redis_answers_within_its_calls_deadlines(grid_proxy, settings, api_token):
    """Before: one precheck ran 379 s (2 s a socket read, each command retried ten times). Now its two
    calls (the pools, the counters) end by their deadlines and the answer says why."""
    register(2310)  # no peer yet: pools unknown, so the precheck asks them
    headers = {"Authorization": f"Bearer {api_token('precheck')}"}

    def precheck():
        began = time.monotonic()
        answer = Client().post("/api/v1/nodes/2310/precheck", "", content_type="application/json", headers=headers)
        return answer, time.monotonic() - began

    _, without_rmb = precheck()  # what the rest of a precheck costs here (the proxy's read, the writes)
    peer = HungRedis()
    settings.RMB_REDIS_URL, settings.RMB_DEADLINE = peer.url, 1.0
    try:
        response, took = precheck()
    finally:
        peer.close()
    assert response.status_code == 200
    assert "did not answer within the call's deadline" in response.json()["counters_words"]
    assert took < without_rmb + 2 * (1.0 + 0.1), f"the precheck took {took:.2f} s ({without_rmb:.2f} s without RMB)"


def test_the_api_precheck_of_a_node_answering_nested_json_is_a_200_saying_why(grid_proxy, peer, settings, api_token):
    rmb = settings.RMB_REDIS_URL
    settings.RMB_REDIS_URL = ""
    register(2310)
    settings.RMB_REDIS_URL = rmb
    nested = base64.b64encode(("[" * 50_000 + "]" * 50_000).encode()).decode()
    peer(lambda r: json.dumps({**envelope(r["ref"], 3310, body=HONEST), "dat": nested}))
    response = Client().post(
        "/api/v1/nodes/2310/precheck",
        "",
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_token('precheck')}"},
    )
    assert response.status_code == 200  # was a 500: RecursionError out of grid/rmb/parse.py
    assert "nested deeper" in response.json()["pools_words"] and "nested deeper" in response.json()["counters_words"]
