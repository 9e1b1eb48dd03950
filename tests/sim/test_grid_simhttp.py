"""The simulator behind the Grid Proxy's HTTP paths, read end to end by the real client."""

import threading

import pytest
import requests

from dashboard.capacity import GiB, SliceSize
from dashboard.grid.proxy import GridProxyClient
from dashboard.grid.types import NodeNotFound, NodeOffline, PoolsNotAvailable
from sim.grid import SimulatedGrid, serve_simulator
from tests.gridproxy_canned import sample
from tests.support import wait_until

ZOS_SLICE = SliceSize(cru=1, mru=4 * GiB, sru=151 * GiB)


@pytest.fixture
def grid(tmp_path):
    grid = SimulatedGrid(tmp_path / "simgrid.sqlite3")
    grid.add_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana", country="Egypt")
    grid.add_node(11, cru=4, mru=16 * GiB, sru=256 * GiB, farm_id=1)
    grid.add_node(3001, cru=2, mru=4 * GiB, sru=128 * GiB, farm_id=7, status="down")
    return grid


@pytest.fixture
def url(grid):
    server = serve_simulator(grid, port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def client(url):
    with GridProxyClient(url, connect_timeout=1, read_timeout=2, retries=1, backoff=0.001) as client:
        yield client


def test_the_client_reads_a_simulated_node_as_the_simulator_sees_it(grid, client):
    grid.deploy_vm(1774, ZOS_SLICE, name="vm")

    node = client.node(1774)

    assert (node.total, node.used, node.farm_name) == (grid.node(1774).total, grid.node(1774).used, "mitana")


def test_the_proxy_face_tells_no_pools_and_the_client_says_where_they_come_from(grid, client):
    assert client.node(1774).pools_sru is None
    assert grid.storage_pools(1774)  # the node itself knows them

    with pytest.raises(PoolsNotAvailable, match="not available through the Grid Proxy; ZOS answers them over RMB"):
        client.storage_pools(1774)


def test_the_client_reads_a_farm_page(client):
    page = client.nodes(farm_id=4242)

    assert ([n.node_id for n in page.nodes], page.skipped) == ([1774], ())


def test_the_client_reads_statistics_with_the_hidden_overhead(grid, client):
    grid.add_node(9, cru=8, mru=31 * GiB, sru=931 * GiB, per_vm_overhead_mru=GiB)
    grid.deploy_vm(9, ZOS_SLICE, name="vm")

    assert client.statistics(9) == grid.statistics(9)


def test_the_client_learns_an_unknown_node_is_not_on_the_grid(client):
    with pytest.raises(NodeNotFound):
        client.node(404)


def test_the_client_learns_a_down_node_is_offline(client):
    with pytest.raises(NodeOffline, match="node 3001 is down"):
        client.statistics(3001)


def test_it_answers_404_like_the_proxy(url):
    answer = requests.get(f"{url}/nodes/404", timeout=2)

    assert (answer.status_code, answer.json()) == (404, {"error": "node not found"})


def test_it_answers_statistics_of_a_down_node_like_the_proxy(url):
    answer = requests.get(f"{url}/nodes/3001/statistics", timeout=2)

    assert (answer.status_code, answer.json()) == (
        500,
        {"error": "cannot fetch statistics from node 3001 with status: down"},
    )


def test_a_node_has_every_field_the_proxy_sample_has(url):
    node = requests.get(f"{url}/nodes/1774", timeout=2).json()

    assert set(sample("node-1774.json")) <= set(node)
    assert set(node["capacity"]) == {"total_resources", "used_resources"}


def test_a_page_entry_has_every_field_the_proxy_sample_has(url):
    entry = requests.get(f"{url}/nodes", timeout=2).json()[0]

    assert set(sample("nodes-page.json")[0]) <= set(entry)


def test_statistics_have_every_field_the_proxy_sample_has(url):
    stats = requests.get(f"{url}/nodes/1774/statistics", timeout=2).json()

    assert set(sample("node-1774-statistics.json")) == set(stats)
    assert set(sample("node-1774-statistics.json")["users"]) == set(stats["users"])


def test_it_refuses_a_page_that_is_not_a_number(url):
    answer = requests.get(f"{url}/nodes", params={"page": "two"}, timeout=2)

    assert answer.status_code == 400
    assert "couldn't parse page" in answer.json()["error"]


def test_it_is_read_only(url):
    assert requests.post(f"{url}/nodes", timeout=2).status_code == 405


@pytest.fixture
def strict_url(grid):
    server = serve_simulator(grid, port=0, request_read_deadline=1.0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", server.server_address
    server.shutdown()
    server.server_close()


class HandTimer:
    """The simulator's request read deadline, fired by the test's hand instead of by the clock."""

    made: list["HandTimer"] = []

    def __init__(self, seconds, cut_off):
        self.seconds, self.cut_off, self.cancelled, self.daemon = seconds, cut_off, False, False
        HandTimer.made.append(self)

    def start(self):
        pass

    def cancel(self):
        self.cancelled = True


@pytest.fixture
def hand_timed(grid):
    """(url, address, the timers the server made): the read deadline passes when the test fires one."""
    HandTimer.made = []
    server = serve_simulator(grid, port=0, request_read_deadline=1.0, timer=HandTimer)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", server.server_address, HandTimer.made
    server.shutdown()
    server.server_close()


def dripped_request(address) -> tuple[bytes, float]:
    """A request sent a byte every 0.2 s (about 7 s in all) to a server that allows 1 s: (its answer, seconds)."""
    import socket
    import time

    started = time.monotonic()
    with socket.create_connection(address, timeout=10) as conn:
        try:
            for byte in b"GET /nodes/1774 HTTP/1.1\r\nHost: x\r\n\r\n":
                conn.sendall(bytes([byte]))
                time.sleep(0.2)
            answer = conn.recv(100)
        except OSError:
            answer = b""
    return answer, time.monotonic() - started


def test_it_cuts_off_a_client_that_drips_its_request(hand_timed):
    import socket

    _url, address, timers = hand_timed
    with socket.create_connection(address, timeout=10) as conn:
        conn.sendall(b"GET /nodes/17")  # the request's first bytes, and no more
        wait_until(lambda: timers, timeout=10, what="the server to start the request's read deadline")
        timers[0].cut_off()  # the deadline passes
        try:
            answer = conn.recv(100)
        except OSError:
            answer = b""
    assert answer == b""  # hung up on, unanswered


@pytest.mark.slow  # a wall-clock assertion
def test_it_cuts_off_a_client_that_drips_its_request_within_the_deadline_on_the_clock(strict_url):
    answer, took = dripped_request(strict_url[1])
    assert not answer.startswith(b"HTTP/1.1 200") and took < 3


def test_it_keeps_an_idle_kept_alive_connection_past_the_request_deadline(hand_timed):
    url, _address, timers = hand_timed
    with GridProxyClient(url, connect_timeout=1, read_timeout=2, retries=0) as client:
        assert client.node(1774).node_id == 1774
        # Idle now: no read deadline may be running (the clock starts at a request's first byte).
        assert [t.cancelled for t in timers] == [True]
        assert client.node(1774).node_id == 1774
    assert [t.cancelled for t in timers] == [True, True]


@pytest.mark.slow  # waits on the real clock
def test_it_keeps_an_idle_kept_alive_connection_past_the_request_deadline_on_the_clock(strict_url):
    import time

    url, _ = strict_url
    with GridProxyClient(url, connect_timeout=1, read_timeout=2, retries=0) as client:
        assert client.node(1774).node_id == 1774
        time.sleep(1.5)
        assert client.node(1774).node_id == 1774
