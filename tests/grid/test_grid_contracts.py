"""Grid.contracts(node_id): a node's live contracts, from the simulated grid and from the Grid Proxy's shape."""

import threading

import pytest
import requests

from dashboard.capacity import GiB, SliceSize
from dashboard.grid.paging import ReadStopped
from dashboard.grid.proxy import GridProxyClient
from dashboard.grid.types import MalformedPayload
from sim.grid import SimulatedGrid, serve_simulator
from tests.gridproxy_canned import Answer, sample, start_canned_proxy

SLICE = SliceSize(cru=1, mru=4 * GiB, sru=100 * GiB)


@pytest.fixture
def grid(tmp_path):
    grid = SimulatedGrid(tmp_path / "simgrid.sqlite3")
    grid.add_node(1774, cru=8, mru=64 * GiB, sru=2000 * GiB, farm_id=4242)
    grid.add_node(11, cru=4, mru=16 * GiB, sru=256 * GiB, farm_id=1)
    return grid


@pytest.fixture
def url(grid):
    server = serve_simulator(grid, port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _client(url, **options):
    return GridProxyClient(url, connect_timeout=1, read_timeout=2, retries=0, backoff=0.001, **options)


def test_it_lists_every_vm_of_the_node_whoever_deployed_it(grid):
    ours = grid.deploy_vm(1774, SLICE, name="s1774_0_1")
    outside = grid.deploy_vm(1774, SLICE, name="someone_else")
    grid.deploy_vm(11, SLICE, name="elsewhere")

    listed = grid.contracts(1774).contracts

    assert [c.workload_id for c in listed] == [ours.workload_id, outside.workload_id]


def test_a_deleted_vm_leaves_no_contract(grid):
    vm = grid.deploy_vm(1774, SLICE, name="gone")
    grid.delete_vm(1774, vm.workload_id)

    assert grid.contracts(1774).contracts == ()


def test_a_down_node_keeps_its_contracts(grid):
    grid.deploy_vm(1774, SLICE, name="vm")
    grid.set_status(1774, "down")

    assert len(grid.contracts(1774).contracts) == 1


def test_the_client_reads_the_simulator_over_http_as_the_simulator_sees_it(grid, url):
    for n in range(3):
        grid.deploy_vm(1774, SLICE, name=f"vm{n}")

    with _client(url) as client:
        read = client.contracts(1774)

    assert read.contracts == grid.contracts(1774).contracts


def test_the_client_reads_every_page(grid, url):
    for n in range(5):
        grid.deploy_vm(1774, SLICE, name=f"vm{n}")

    with _client(url, contracts_page_size=2) as client:
        read = client.contracts(1774)

    assert (len(read.contracts), read.requests) == (5, 3)


def test_the_simulated_proxy_refuses_a_parameter_it_does_not_know(url):
    answer = requests.get(f"{url}/contracts", params={"node_id": 1774, "nodes": 1}, timeout=5)

    assert (answer.status_code, "invalid path" in answer.json()["error"]) == (400, True)


def test_the_real_shape_is_read_with_its_kinds(gridproxy_serving):
    url = gridproxy_serving({"/contracts": sample("contracts-node-1774.json")})

    with _client(url) as client:
        read = client.contracts(1774)

    assert [(c.contract_id, c.deployment_type, c.holds_capacity) for c in read.contracts] == [
        (81723, "network", False),
        (81724, "vm", True),
        (90210, "vm", True),
    ]


def test_the_client_asks_for_live_contracts_of_the_node():
    canned, server = start_canned_proxy()
    canned.answer("/contracts", [])
    try:
        with _client(canned.url) as client:
            client.contracts(1774)
    finally:
        server.shutdown()
        server.server_close()

    assert "node_id=1774&state=Created%2CGracePeriod" in canned.queries[-1]


@pytest.mark.parametrize(
    "entry, words",
    [
        ({"contract_id": 5, "twin_id": 1, "state": "Deleted", "type": "node", "details": {"nodeId": 1774}}, "state"),
        ({"contract_id": 5, "twin_id": 1, "state": "Created", "type": "node", "details": {"nodeId": 99}}, "nodeId"),
        ({"contract_id": "5", "twin_id": 1, "state": "Created", "type": "node"}, "contract_id"),
        ({"contract_id": 5, "twin_id": 1, "state": "Created", "type": "vm", "details": {"nodeId": 1774}}, "type"),
        (
            {
                "contract_id": 5,
                "twin_id": 1,
                "state": "Created",
                "type": "node",
                "details": {"nodeId": 1774, "deployment_data": "x" * 100_000},
            },
            "deployment_data",
        ),
        ("not an object", "must be an object"),
    ],
)
def test_an_entry_that_cannot_be_trusted_fails_the_whole_node(gridproxy_serving, entry, words):
    good = sample("contracts-node-1774.json")[1]
    url = gridproxy_serving({"/contracts": [good, entry]})

    with _client(url) as client, pytest.raises(MalformedPayload) as failed:
        client.contracts(1774)

    assert words in str(failed.value)


def test_a_proxy_that_ignores_page_is_stopped(gridproxy_serving):
    entries = sample("contracts-node-1774.json")
    url = gridproxy_serving({"/contracts": entries})

    with _client(url, contracts_page_size=3) as client, pytest.raises(ReadStopped) as stopped:
        client.contracts(1774)

    assert "page 2" in str(stopped.value)


def test_a_proxy_that_invents_contracts_stops_at_the_page_ceiling(gridproxy_serving):
    def endless(query):
        page = int(query["page"])
        return [
            {
                "contract_id": page * 10 + n,
                "twin_id": 1,
                "state": "Created",
                "type": "node",
                "details": {"nodeId": 1774},
            }
            for n in range(2)
        ]

    url = gridproxy_serving({"/contracts": Answer(body=endless)})

    with _client(url, contracts_page_size=2, max_pages=4) as client, pytest.raises(ReadStopped) as stopped:
        client.contracts(1774)

    assert "4 full pages" in str(stopped.value)


def test_more_contracts_than_announced_are_refused(gridproxy_serving):
    url = gridproxy_serving({"/contracts": Answer(body=sample("contracts-node-1774.json"), headers={"count": "2"})})

    with _client(url) as client, pytest.raises(ReadStopped) as stopped:
        client.contracts(1774)

    assert "past the 2" in str(stopped.value)
