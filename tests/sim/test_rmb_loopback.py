"""The simulated grid's RMB loopback (sim/grid/rmb_loopback.py): the stand-in peer's own answers, read by
the production door's reader, so what the loopback hands the product is what the same node's answer over
Redis (the stand-in peer and the RmbClient) hands it: a hostile answer is refused the same way."""

from __future__ import annotations

import pytest

from dashboard.capacity import GiB
from dashboard.grid.rmb import POOLS, RmbClient, Target, get_rmb
from dashboard.grid.types import MalformedPayload, NodeSilent, PoolMetrics, RmbRefused
from sim.grid.rmb_loopback import LoopbackRmb
from tests.conftest import stand_in_peer_serving
from tests.hostile_redis import rmb_client as rmb_client_on

ONE_SSD = int(931.5 * GiB)
HALF_SSD = int(465.75 * GiB)
# A pool bigger than any disk there is: grid.rmb.parse refuses it.
HOSTILE = (PoolMetrics(name="a", type="ssd", size=2**62, used=0),)


@pytest.fixture
def grid(rmb_nodes):
    return rmb_nodes


@pytest.fixture
def loopback(grid):
    return LoopbackRmb(grid, deadline=0.5)


@pytest.fixture
def over_redis(grid, rmb_redis_url):
    """The same grid's nodes over the suite's Redis: the stand-in peer in a thread, and an RmbClient."""
    with stand_in_peer_serving(grid, rmb_redis_url):
        yield rmb_client_on(rmb_redis_url, deadline=1.0)


def target(node_id: int, twin: int, total: int = ONE_SSD) -> Target:
    return Target(node_id=node_id, twin_id=twin, total_sru=total)


def test_it_hears_a_nodes_pools_as_the_stand_in_peer_tells_them(loopback):
    pools = loopback.storage_pools(target(2311, 3311, 2 * HALF_SSD))
    assert [(p.type, p.size) for p in pools] == [("ssd", HALF_SSD), ("ssd", HALF_SSD)]


def test_it_hears_a_nodes_build(loopback):
    assert loopback.version(target(2310, 3310)).zos == "v3.14.0-sim"


def test_a_node_with_no_build_refuses_the_version_call(loopback):
    with pytest.raises(RmbRefused, match="no ZOS build"):
        loopback.version(target(2311, 3311))


def test_a_node_on_standby_is_silent(loopback):
    with pytest.raises(NodeSilent, match="did not answer zos.storage.pools over RMB within 0.5 s"):
        loopback.storage_pools(target(2312, 3312))


def test_a_call_to_another_twin_than_the_nodes_is_silent(loopback):
    assert isinstance(loopback.ask_many(POOLS, [target(2310, 3311)])[2310], NodeSilent)


def test_pools_above_the_nodes_ssd_total_are_refused_by_the_parser(loopback):
    answers = loopback.pools_many([target(2311, 3311, total=HALF_SSD)])
    assert isinstance(answers[2311], MalformedPayload) and "more than the node's SSD total" in str(answers[2311])


def test_a_hostile_pool_size_is_refused_through_the_loopback_as_over_redis(grid, loopback, over_redis, monkeypatch):
    monkeypatch.setattr(grid, "storage_pools", lambda node_id: HOSTILE)
    in_process = loopback.ask_many(POOLS, [target(2310, 3310)])[2310]
    over_the_wire = over_redis.ask_many(POOLS, [target(2310, 3310)])[2310]
    assert isinstance(in_process, MalformedPayload) and "must be a whole number of bytes" in str(in_process)
    assert (type(in_process), str(in_process)) == (type(over_the_wire), str(over_the_wire))


def test_the_product_gets_the_loopback_on_the_simulator_without_an_rmb_peer(settings):
    settings.GRID_BACKEND, settings.RMB_REDIS_URL = "simulator", ""
    assert isinstance(get_rmb(), LoopbackRmb)
    assert (get_rmb().pools_source, get_rmb().version_told_by) == ("zos", "simulated")


def test_the_grid_proxy_without_an_rmb_peer_has_no_rmb(settings):
    settings.GRID_BACKEND, settings.RMB_REDIS_URL = "gridproxy", ""
    assert get_rmb() is None


def test_an_rmb_peer_is_asked_whatever_the_backend(settings):
    settings.GRID_BACKEND, settings.RMB_REDIS_URL = "simulator", "redis://127.0.0.1:1/0"
    assert isinstance(get_rmb(), RmbClient)


@pytest.mark.django_db
def test_a_precheck_on_the_simulator_says_it_asked_over_the_loopback_not_rmb_peer(sim_node):
    # The words name the door that was asked: on the simulator without an rmb-peer, the loopback.
    from dashboard.catalogs.services.precheck import precheck_run
    from dashboard.models import Node

    node = sim_node(2311, cru=8, mru=31 * GiB, sru=ONE_SSD, twin_id=3311)
    report = precheck_run(node=Node.objects.get(pk=node.pk))
    assert "node 2311 says itself (over the simulated grid's RMB loopback, now)" in report.counters_words
    assert "rmb-peer" not in report.counters_words
