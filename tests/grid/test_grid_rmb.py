"""The RMB door (grid/rmb/) against real Redis, with the stand-in peer (sim/grid/rmb_peer.py) or a
hostile one answering what a real node never would."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from contextlib import ExitStack

import pytest
import redis

from dashboard.capacity import GiB
from dashboard.grid.budget import RedisInFlight, RedisWindow, RequestBudget
from dashboard.grid.rmb import POOLS, STATISTICS, VERSION, RmbClient, Target
from dashboard.grid.rmb.client import REQUEST_QUEUE
from dashboard.grid.types import MalformedPayload, NodeSilent, RmbRefused
from sim.grid.rmb_peer import StandInPeer, envelope
from tests.conftest import stand_in_peer_serving
from tests.hostile_redis import rmb_client as rmb_client_on

DEADLINE = 0.6  # seconds a silent node is waited for: short, since nothing here measures time
SILENT_DEADLINE = 0.05  # where only a silent node is asked: nothing has to answer within it
ONE_SSD = int(931.5 * GiB)
HALF_SSD = int(465.75 * GiB)


@pytest.fixture
def redis_url(rmb_redis_url):
    return rmb_redis_url


@pytest.fixture
def grid(rmb_nodes):
    return rmb_nodes


def rmb_client(redis_url, deadline: float = DEADLINE) -> RmbClient:
    return rmb_client_on(redis_url, deadline=deadline)


@pytest.fixture
def rmb(redis_url):
    return rmb_client(redis_url)


@pytest.fixture
def peer(grid, redis_url):
    """The stand-in peer serving in a thread: peer(delay=..., error_rate=...) -> StandInPeer."""
    with ExitStack() as running:
        yield lambda **options: running.enter_context(stand_in_peer_serving(grid, redis_url, **options))


def hostile_peer(redis_url, answer_of):
    """A peer that takes one request and answers what answer_of(request) makes of it (raw text or a dict)."""
    conn = redis.Redis.from_url(redis_url)

    def serve():
        item = conn.blpop([REQUEST_QUEUE], timeout=5)
        if item is None:
            return
        request = json.loads(item[1])
        answer = answer_of(request)
        conn.rpush(request["ret"], answer if isinstance(answer, str | bytes) else json.dumps(answer))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def pools_answer(pools, *, twin=None):
    return lambda request: envelope(request["ref"], twin or request["dst"][0], body=pools)


def target(node_id, twin, total=ONE_SSD):
    return Target(node_id=node_id, twin_id=twin, total_sru=total)


def test_it_hears_a_nodes_pools_from_the_stand_in_peer(peer, rmb):
    peer()
    pools = rmb.storage_pools(target(2311, 3311, 2 * HALF_SSD))
    assert [(p.type, p.size) for p in pools] == [("ssd", HALF_SSD), ("ssd", HALF_SSD)]


def test_it_sends_the_request_in_rmb_peers_shape(redis_url, rmb):
    seen = {}

    def keep(request):
        seen.update(request)
        return envelope(request["ref"], 3310, body=[{"name": "a", "type": "ssd", "size": ONE_SSD, "used": 0}])

    hostile_peer(redis_url, keep)
    rmb.storage_pools(target(2310, 3310))
    assert (seen["ver"], seen["cmd"], seen["dst"], seen["tag"], seen["dat"]) == (1, POOLS, [3310], None, "")
    assert seen["exp"] > seen["now"]


def test_it_reads_the_nodes_counters_and_build(peer, rmb):
    peer()
    stats = rmb.statistics(target(2310, 3310))
    version = rmb.version(target(2310, 3310))
    assert (stats.total.sru, stats.deployments, version.zos) == (ONE_SSD, 0, "v3.14.0-sim")


def test_each_node_answers_its_own_build(grid, peer, rmb):
    grid.add_node(2313, cru=8, mru=31 * GiB, sru=ONE_SSD, twin_id=3313, zos_build="v3.13.2-sim")
    peer()
    assert rmb.version(target(2313, 3313)).zos == "v3.13.2-sim"
    assert rmb.version(target(2310, 3310)).zos == "v3.14.0-sim"


def test_a_node_with_no_build_refuses_the_version_call(peer, rmb):
    peer()
    with pytest.raises(RmbRefused, match="node 2311 refused zos.system.version over RMB: .*no ZOS build"):
        rmb.version(target(2311, 3311, 2 * HALF_SSD))


def test_an_err_answer_becomes_words_with_the_nodes_message(peer, rmb):
    peer(error_rate=1.0)
    with pytest.raises(
        RmbRefused, match=r"node 2310 refused zos.storage.pools over RMB: simulated failure .*\(code 500\)"
    ):
        rmb.storage_pools(target(2310, 3310))


def test_a_node_on_standby_is_silent_until_the_deadline(peer, redis_url):
    peer()
    rmb = rmb_client(redis_url, deadline=SILENT_DEADLINE)
    with pytest.raises(NodeSilent, match=r"node 2312 did not answer zos.storage.pools over RMB within 0.05 s"):
        rmb.storage_pools(target(2312, 3312))


def test_a_page_with_a_silent_node_hears_the_others(peer, rmb):
    peer(delay=0.05)
    answers = rmb.ask_many(POOLS, [target(2310, 3310), target(2311, 3311, 2 * HALF_SSD), target(2312, 3312)])
    assert [type(answers[n]).__name__ for n in (2310, 2311, 2312)] == ["tuple", "tuple", "NodeSilent"]


def test_an_answer_that_is_not_json_is_refused(redis_url, rmb):
    hostile_peer(redis_url, lambda request: "{not json")
    with pytest.raises(
        MalformedPayload, match="node 2310 answered zos.storage.pools over RMB with an answer that is not JSON"
    ):
        rmb.storage_pools(target(2310, 3310))


def test_an_answer_whose_dat_is_not_base64_is_refused(redis_url, rmb):
    hostile_peer(redis_url, lambda request: {**envelope(request["ref"], 3310, body=[]), "dat": "%%%"})
    with pytest.raises(MalformedPayload, match="dat is not base64 of JSON"):
        rmb.storage_pools(target(2310, 3310))


def test_a_million_pools_is_refused(redis_url, rmb):
    # Made before the call (it takes a while): a million pools, each as small as JSON allows.
    dat = base64.b64encode(json.dumps([{}] * 10**6).encode()).decode()
    hostile_peer(redis_url, lambda request: {**envelope(request["ref"], 3310, body=[]), "dat": dat})
    with pytest.raises(MalformedPayload, match="bytes, more than the 256 KiB one may be"):
        rmb.storage_pools(target(2310, 3310))


def test_more_pools_than_a_node_has_are_refused(redis_url, rmb):
    many = [{"name": f"p{i}", "type": "hdd", "size": GiB, "used": 0} for i in range(65)]
    hostile_peer(redis_url, pools_answer(many))
    with pytest.raises(MalformedPayload, match="65 pools, more than the 64 a node may have"):
        rmb.storage_pools(target(2310, 3310))


def test_a_negative_pool_size_is_refused(redis_url, rmb):
    hostile_peer(redis_url, pools_answer([{"name": "a", "type": "ssd", "size": -1, "used": 0}]))
    with pytest.raises(MalformedPayload, match="pool 0 \\(a\\)'s size is -1, must be a whole number of bytes"):
        rmb.storage_pools(target(2310, 3310))


def test_pools_larger_than_the_nodes_ssd_total_are_refused(redis_url, rmb):
    hostile_peer(redis_url, pools_answer([{"name": "a", "type": "ssd", "size": 2 * ONE_SSD, "used": 0}]))
    with pytest.raises(MalformedPayload, match="more than the node's SSD total"):
        rmb.storage_pools(target(2310, 3310))


def test_a_pool_name_with_a_control_character_is_refused(redis_url, rmb):
    hostile_peer(redis_url, pools_answer([{"name": "a\x00b", "type": "ssd", "size": ONE_SSD, "used": 0}]))
    with pytest.raises(MalformedPayload, match="pool 0's name is not text"):
        rmb.storage_pools(target(2310, 3310))


def test_a_twin_answering_for_another_is_refused(redis_url, rmb):
    hostile_peer(redis_url, pools_answer([{"name": "a", "type": "ssd", "size": ONE_SSD, "used": 0}], twin=3999))
    with pytest.raises(
        MalformedPayload, match=r"twin 3999 answered the zos.storage.pools call to node 2310 \(twin 3310\)"
    ):
        rmb.storage_pools(target(2310, 3310))


def test_an_answer_to_another_call_is_not_taken(redis_url, rmb):
    other = {"name": "a", "type": "ssd", "size": ONE_SSD, "used": 0}
    hostile_peer(redis_url, lambda request: envelope("another-ref", 3310, body=[other]))
    with pytest.raises(NodeSilent, match="1 answer\\(s\\) that matched no call came meanwhile"):
        rmb.storage_pools(target(2310, 3310))


def test_a_peer_restarted_mid_call_loses_the_call_and_the_next_is_answered(redis_url, grid, peer, rmb):
    # The old peer took the call off the queue and died before answering: the call ends at its deadline.
    lost = threading.Thread(target=lambda: redis.Redis.from_url(redis_url).blpop([REQUEST_QUEUE], timeout=5))
    lost.start()
    with pytest.raises(NodeSilent, match="or the peer lost the call"):
        rmb_client(redis_url, deadline=SILENT_DEADLINE).storage_pools(target(2310, 3310))
    lost.join(5)
    peer()  # the new peer
    assert rmb.storage_pools(target(2310, 3310))[0].size == ONE_SSD


def test_a_call_sent_while_the_peer_is_down_is_answered_when_it_comes_back(grid, redis_url, rmb):
    stand_in = StandInPeer(grid, redis_url, stop=threading.Event())
    late = threading.Timer(0.2, stand_in.serve_forever)
    late.start()
    try:
        assert rmb.storage_pools(target(2310, 3310))[0].size == ONE_SSD
    finally:
        stand_in.stop.set()
        late.join(5)  # a stopped peer still waiting on the queue would take the next test's call


def test_a_redis_that_cannot_be_reached_is_said_not_raised(rmb):
    closed = RmbClient(
        "redis://127.0.0.1:1/0",
        deadline=DEADLINE,
        budget=RequestBudget(window=RedisWindow("redis://127.0.0.1:1/0", socket_timeout=0.2), limit=5, reserve=0),
        in_flight=RedisInFlight("redis://127.0.0.1:1/0", cap=2, socket_timeout=0.2),
        socket_timeout=0.2,
    )
    answers = closed.ask_many(POOLS, [target(2310, 3310)])
    assert "the RMB peer's Redis (redis://127.0.0.1:1/0) failed" in str(answers[2310])


def test_the_in_flight_cap_is_shared_and_released(redis_url):
    cap = RedisInFlight(redis_url, cap=1, key=f"test-rmb-if:{uuid.uuid4().hex}")
    assert (cap.lease("a", seconds=5), cap.lease("b", seconds=5)) == (True, False)
    cap.release("a")
    assert cap.lease("b", seconds=5)


def test_statistics_and_version_answers_are_parsed_strictly(redis_url, rmb):
    hostile_peer(redis_url, lambda request: envelope(request["ref"], 3310, body={"zos": "x" * 500}))
    with pytest.raises(MalformedPayload, match="zos.system.version: zos is not text"):
        rmb.version(target(2310, 3310))
    hostile_peer(redis_url, lambda request: envelope(request["ref"], 3310, body={"total": {"mru": -5}}))
    with pytest.raises(MalformedPayload, match="node 2310 statistics"):
        rmb.statistics(target(2310, 3310))


def test_the_request_body_travels_base64(redis_url, rmb):
    seen = {}

    def keep(request):
        seen["dat"] = request["dat"]
        return envelope(request["ref"], 3310, body={"zos": "v3"})

    hostile_peer(redis_url, keep)
    rmb.ask_many(VERSION, [target(2310, 3310)], body={"probe": 1})
    assert json.loads(base64.b64decode(seen["dat"])) == {"probe": 1}


def test_commands_named_by_the_door_are_zos_own(peer, rmb):
    peer()
    assert rmb.ask_many(STATISTICS, [target(2310, 3310)])[2310].total.cru == 8
