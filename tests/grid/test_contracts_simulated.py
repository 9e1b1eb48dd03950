"""The simulated grid's answers against the schemas written from the real sources (grid/schemas/).

Judged strictly: every object may hold only the fields its Go or Rust type writes, so the simulator
cannot invent a shape (as the `features` object was) that the parser then learns to expect. The Grid
Proxy face is read over HTTP as a client reads it; the stand-in rmb-peer's envelopes and bodies as
they would go onto Redis.
"""

from __future__ import annotations

import base64
import json
import threading

import pytest
import requests

from dashboard.capacity import GiB, SliceSize
from dashboard.grid.schemas import ZOS_COMMANDS
from sim.grid import SimulatedGrid, serve_simulator
from sim.grid.rmb_peer import StandInPeer
from tests.contracts_support import problems

SLICE = SliceSize(cru=1, mru=4 * GiB, sru=151 * GiB)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """One of each kind the shapes can differ for: full, light, GPUs in use, rented, dedicated farm, standby,
    down, with VMs and farm IPs."""
    grid = SimulatedGrid(tmp_path_factory.mktemp("contracts") / "simgrid.sqlite3")
    grid.add_node(
        1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana", zos_build="v3.14.0-sim"
    )
    grid.add_node(1775, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana", light=True)
    grid.add_node(1776, cru=16, mru=64 * GiB, sru=2 * 1024 * GiB, farm_id=4242, gpus=2, country="Belgium", city="Ghent")
    grid.add_node(2733, cru=4, mru=16 * GiB, sru=256 * GiB, farm_id=7, status="standby")
    grid.add_node(3021, cru=4, mru=16 * GiB, sru=256 * GiB, farm_id=7, status="down")
    grid.add_node(3150, cru=4, mru=16 * GiB, sru=256 * GiB, farm_id=8)
    grid.farm_ips_set(4242, 3)
    grid.farm_dedicated(8)
    grid.rent(3150, 4711)
    grid.rent(1776, 7)
    grid.deploy_vm(1774, SLICE, name="vm1", public_ips=1)
    grid.deploy_vm(1776, SLICE, name="gpu1", gpus=1)
    return grid


@pytest.fixture(scope="module")
def proxy(grid):
    server = serve_simulator(grid, port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    def get(path: str, **params):
        answer = requests.get(url + path, params=params, timeout=10)
        return answer.status_code, answer.json()

    yield get
    server.shutdown()
    server.server_close()


NODES = (1774, 1775, 1776, 2733, 3021, 3150)


def test_the_node_list_is_todays_shape(proxy):
    status, nodes = proxy("/nodes", size=100, ret_count="true")
    assert status == 200 and {n["nodeId"] for n in nodes} == set(NODES)
    assert problems("gridproxy", "NodeList", nodes, strict=True) == []


@pytest.mark.parametrize("node_id", NODES)
def test_each_node_is_todays_nested_shape(proxy, node_id):
    status, node = proxy(f"/nodes/{node_id}")
    assert status == 200 and problems("gridproxy", "NodeWithNestedCapacity", node, strict=True) == []


def test_the_features_say_light_and_full_as_zos_lists_them(proxy):
    _, nodes = proxy("/nodes", size=100)
    features = {n["nodeId"]: n["features"] for n in nodes}
    assert "ipv4" in features[1774] and "zmachine" in features[1774]
    assert {"zmachine-light", "network-light"} <= set(features[1775]) and not {"ipv4", "ip"} & set(features[1775])


def test_gpus_carry_the_contract_holding_each(proxy, grid):
    _, node = proxy("/nodes/1776")
    contracts = sorted(g["contract"] for g in node["gpus"])
    assert node["num_gpu"] == 2 and contracts[0] == 0 and contracts[1] > 0 and all(g["vram"] for g in node["gpus"])


def test_statistics_are_todays_shape(proxy):
    status, statistics = proxy("/nodes/1774/statistics")
    assert status == 200 and problems("gridproxy", "NodeStatistics", statistics, strict=True) == []


@pytest.mark.parametrize("node_id", [2733, 3021])
def test_statistics_of_a_node_away_is_the_proxys_error(proxy, node_id):
    status, body = proxy(f"/nodes/{node_id}/statistics")
    assert status == 500 and problems("gridproxy", "Error", body, strict=True) == []


@pytest.mark.parametrize("params", [{"farm_id": 4242}, {"farm_id": 7}, {"page": 1, "size": 50}])
def test_farms_are_todays_shape(proxy, params):
    status, farms = proxy("/farms", **params)
    assert status == 200 and farms and problems("gridproxy", "FarmList", farms, strict=True) == []


@pytest.mark.parametrize("node_id", [1774, 1776, 3150])
def test_contracts_are_todays_shape(proxy, node_id):
    status, contracts = proxy("/contracts", node_id=node_id, state="Created,GracePeriod")
    assert status == 200 and contracts and problems("gridproxy", "ContractList", contracts, strict=True) == []


def test_an_unknown_node_is_the_proxys_error(proxy):
    status, body = proxy("/nodes/999999")
    assert status == 404 and problems("gridproxy", "Error", body, strict=True) == []


# --- the stand-in rmb-peer --------------------------------------------------------------------


@pytest.fixture(scope="module")
def peer(grid):
    # Its answers are made without Redis: `answer` is what it would RPUSH onto the request's `ret`.
    return StandInPeer(grid, "redis://127.0.0.1:6379/15")


def body_of(envelope: dict):
    return json.loads(base64.b64decode(envelope["dat"]))


@pytest.mark.parametrize(
    ("cmd", "asked"),
    [("zos.storage.pools", None), ("zos.statistics.get", None), ("zos.system.version", None),
     ("zos.perf.get", {"name": "cpu-benchmark"})],
)  # fmt: skip
def test_each_answer_and_its_envelope_are_the_real_shapes(grid, peer, cmd, asked):
    twin = grid.node(1774).twin_id
    envelope = peer.answer("ref-1", cmd, twin, asked=asked)
    assert problems("rmb", "Response", envelope, strict=True) == []
    assert envelope["err"] is None and envelope["src"] == str(twin) and envelope["ref"] == "ref-1"
    assert problems("zos", ZOS_COMMANDS[cmd], body_of(envelope), strict=True) == []


def test_a_refusal_is_rmbs_error_envelope(grid, peer):
    envelope = peer.answer("ref-2", "zos.system.version", grid.node(1775).twin_id)  # no build set: refused
    assert problems("rmb", "Response", envelope, strict=True) == [] and envelope["err"]["message"]


def test_a_request_without_a_ref_is_answered_with_none(grid, peer):
    # rmb-rs JsonOutgoingRequest.reference is an Option: grid3's client leaves an empty one out.
    envelope = peer.answer(None, "zos.storage.pools", grid.node(1774).twin_id)
    assert envelope["ref"] is None and problems("rmb", "Response", envelope, strict=True) == []


def test_a_light_nodes_pools_and_counters_are_the_same_shapes(grid, peer):
    # zosbase pkg/zos_api_light routes the same handlers for these commands.
    twin = grid.node(1775).twin_id
    for cmd in ("zos.storage.pools", "zos.statistics.get"):
        assert problems("zos", ZOS_COMMANDS[cmd], body_of(peer.answer("r", cmd, twin)), strict=True) == []
