"""GridProxyClient against a real HTTP server on loopback serving the proxy's JSON shapes."""

import copy
import socket
import time

import pytest

from dashboard.capacity import GiB, Resources, SliceSize
from dashboard.grid.proxy import DEPLOY_NOT_SUPPORTED, GridProxyClient
from dashboard.grid.types import (
    DeployNotSupported,
    GridError,
    GridUnavailable,
    MalformedPayload,
    NodeNotFound,
    NodeOffline,
)
from tests.gridproxy_canned import Answer, sample, start_canned_proxy


@pytest.fixture
def proxy():
    canned, server = start_canned_proxy()
    yield canned
    server.shutdown()
    server.server_close()


def client_for(proxy, **options) -> GridProxyClient:
    settings = {"connect_timeout": 1.0, "read_timeout": 2.0, "retries": 3, "backoff": 0.001}
    settings.update(options)
    return GridProxyClient(proxy.url, **settings)


# --- GET /nodes/{id} ----------------------------------------------------------------------


def test_it_reads_a_node_with_its_nested_capacity(proxy):
    proxy.answer("/nodes/1774", sample("node-1774.json"))

    node = client_for(proxy).node(1774)

    assert node.total == Resources(cru=8, mru=33285996544, sru=1000190509056, hru=0)
    assert node.used == Resources(cru=1, mru=7623566950, sru=164282499072, hru=0)
    assert (node.farm_id, node.farm_name, node.twin_id, node.status, node.dedicated) == (
        4242,
        "mitana",
        9011,
        "up",
        True,
    )


def test_it_reads_rented_by_twin_zero_as_not_rented(proxy):
    proxy.answer("/nodes/1774", sample("node-1774.json"))

    assert client_for(proxy).node(1774).rented_by_twin_id is None


def test_it_says_a_404_node_is_not_on_the_grid_with_the_url(proxy):
    proxy.answer("/nodes/1774", Answer(404, {"error": "node not found"}))

    with pytest.raises(NodeNotFound) as raised:
        client_for(proxy).node(1774)

    assert str(raised.value) == f"node 1774 is not on the grid (404 from {proxy.url}/nodes/1774)"


def test_it_refuses_an_answer_about_another_node(proxy):
    other = sample("node-1774.json") | {"nodeId": 11}
    proxy.answer("/nodes/1774", other)

    with pytest.raises(MalformedPayload, match="answered with node 11"):
        client_for(proxy).node(1774)


def test_it_refuses_a_node_id_that_is_not_a_positive_number(proxy):
    with pytest.raises(ValueError, match="node id must be a positive whole number"):
        client_for(proxy).node(0)
    assert proxy.hits == {}


# --- retries and unavailability --------------------------------------------------------


def test_it_retries_500s_and_then_succeeds(proxy):
    proxy.answer("/nodes/1774", Answer(500, {"error": "db hiccup"}), Answer(502), sample("node-1774.json"))

    node = client_for(proxy).node(1774)

    assert node.node_id == 1774
    assert proxy.hits["/nodes/1774"] == 3


def test_it_retries_a_rate_limit_answer(proxy):
    proxy.answer("/nodes/1774", Answer(429, {"error": "slow down"}), sample("node-1774.json"))

    assert client_for(proxy).node(1774).node_id == 1774
    assert proxy.hits["/nodes/1774"] == 2


def test_it_gives_up_on_500_forever_and_says_status_url_and_tries(proxy):
    proxy.answer("/nodes/1774", Answer(500, {"error": "database is down"}))

    with pytest.raises(GridUnavailable) as raised:
        client_for(proxy, retries=2).node(1774)

    message = str(raised.value)
    assert f"answered 500 Internal Server Error for {proxy.url}/nodes/1774 after 3 tries: database is down" in message
    assert proxy.hits["/nodes/1774"] == 3


@pytest.mark.slow  # a wall-clock assertion
def test_it_gives_up_on_a_proxy_that_does_not_answer_in_time(proxy):
    proxy.answer("/nodes/1774", Answer(200, sample("node-1774.json"), delay=0.6))

    started = time.monotonic()
    with pytest.raises(GridUnavailable) as raised:
        client_for(proxy, read_timeout=0.1, retries=1).node(1774)

    assert "timed out waiting for the answer (read timeout 0.1s), after 2 tries" in str(raised.value)
    assert time.monotonic() - started < 2


def test_it_says_connection_refused_when_nothing_listens():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = GridProxyClient(
        f"http://127.0.0.1:{port}", connect_timeout=0.5, read_timeout=0.5, retries=1, backoff=0.001
    )

    with pytest.raises(GridUnavailable) as raised:
        client.node(1774)

    assert str(raised.value) == (
        f"the grid proxy at http://127.0.0.1:{port}/nodes/1774 is unavailable: connection refused, after 2 tries"
    )


def test_it_does_not_retry_a_client_error(proxy):
    proxy.answer("/nodes", Answer(400, {"error": "couldn't parse size"}))

    with pytest.raises(GridError, match="refused .* with 400 Bad Request: couldn't parse size"):
        client_for(proxy).nodes()
    assert proxy.hits["/nodes"] == 1


# --- payloads that cannot be trusted ------------------------------------------------------


def test_it_reports_an_answer_that_is_not_json(proxy):
    proxy.answer("/nodes/1774", "<html>gateway</html>")

    with pytest.raises(MalformedPayload, match=r"node 1774: the answer from .*/nodes/1774 is not JSON"):
        client_for(proxy).node(1774)


def test_it_refuses_an_answer_larger_than_its_limit(proxy):
    proxy.answer("/nodes/1774", sample("node-1774.json"))

    with pytest.raises(MalformedPayload, match="is larger than 100 B"):
        client_for(proxy, max_body_bytes=100).node(1774)


def _node_1774(**capacity_changes):
    payload = copy.deepcopy(sample("node-1774.json"))
    for dotted, value in capacity_changes.items():
        block, key = dotted.split("__")
        if value is _REMOVE:
            del payload["capacity"][block][key]
        else:
            payload["capacity"][block][key] = value
    return payload


_REMOVE = object()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"total_resources__mru": -5},
            "node 1774: capacity.total_resources.mru is -5, must be a non-negative byte count",
        ),
        (
            {"total_resources__mru": None},
            "node 1774: capacity.total_resources.mru is null, must be a non-negative byte count",
        ),
        ({"total_resources__mru": _REMOVE}, "node 1774: capacity.total_resources.mru is missing"),
        (
            {"total_resources__mru": "33285996544"},
            "capacity.total_resources.mru is a string ('33285996544'), must be a non-negative byte count",
        ),
        (
            {"total_resources__mru": True},
            "capacity.total_resources.mru is a boolean (true), must be a non-negative byte count",
        ),
        (
            {"total_resources__mru": 1.5},
            "capacity.total_resources.mru is 1.5, must be a non-negative byte count (a whole number)",
        ),
        (
            {"total_resources__mru": 65 * 1024 * GiB},
            "capacity.total_resources.mru is 65 TiB (71468255805440 bytes), more than any single node has (limit 64 TiB)",
        ),
        (
            {"total_resources__cru": 5000},
            "capacity.total_resources.cru is 5000, more than any single node has (limit 4096)",
        ),
        ({"total_resources__sru": 2 * 1024**5}, "capacity.total_resources.sru is 2048 TiB"),
        ({"used_resources__sru": -1}, "capacity.used_resources.sru is -1, must be a non-negative byte count"),
        ({"used_resources__mru": 200 * GiB}, "capacity.used_resources.mru is 200 GiB but the node has only 31 GiB"),
    ],
)
def test_it_names_the_field_and_why_when_capacity_is_wrong(proxy, change, message):
    proxy.answer("/nodes/1774", _node_1774(**change))

    with pytest.raises(MalformedPayload) as raised:
        client_for(proxy).node(1774)

    assert message in str(raised.value)


def test_it_accepts_whole_floats_and_a_missing_hru(proxy):
    proxy.answer("/nodes/1774", _node_1774(total_resources__mru=33285996544.0, total_resources__hru=_REMOVE))

    node = client_for(proxy).node(1774)

    assert (node.total.mru, node.total.hru) == (33285996544, 0)


def test_it_accepts_used_memory_above_total_on_a_tiny_node(proxy):
    # A 1.5 GiB node still carries the 2 GiB reserve floor: over total, but honest.
    proxy.answer("/nodes/1774", _node_1774(total_resources__mru=int(1.5 * GiB), used_resources__mru=2 * GiB))

    assert client_for(proxy).node(1774).used.mru == 2 * GiB


def test_it_ignores_extra_fields_and_defaults_missing_optional_ones(proxy):
    payload = sample("node-1774.json") | {"someNewField": {"nested": [1, 2]}, "gpus": None}
    for optional in ("farmName", "twinId", "country", "city", "dedicated", "rentedByTwinId", "updatedAt"):
        payload.pop(optional)
    proxy.answer("/nodes/1774", payload)

    node = client_for(proxy).node(1774)

    assert (node.farm_name, node.twin_id, node.country, node.dedicated, node.updated_at) == ("", None, "", False, None)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("status", "paused", "node 1774: status is a string ('paused'), must be one of up, down, standby"),
        ("status", None, "node 1774: status is null, must be one of up, down, standby"),
        ("farmId", None, "node 1774: farmId is null, must be a positive id"),
        ("farmId", "4242", "node 1774: farmId is a string ('4242'), must be a positive id"),
        ("dedicated", "yes", "node 1774: dedicated is a string ('yes'), must be true or false"),
        ("capacity", None, "node 1774: capacity is null, must be an object"),
    ],
)
def test_it_refuses_node_fields_of_the_wrong_kind(proxy, field, value, message):
    proxy.answer("/nodes/1774", sample("node-1774.json") | {field: value})

    with pytest.raises(MalformedPayload) as raised:
        client_for(proxy).node(1774)

    assert message in str(raised.value)


# --- GET /nodes ---------------------------------------------------------------------------


def test_it_reads_a_page_of_nodes_in_the_flat_shape(proxy):
    proxy.answer("/nodes", sample("nodes-page.json"))

    page = client_for(proxy).nodes()

    assert [(n.node_id, n.status) for n in page.nodes] == [(11, "up"), (1774, "up"), (2050, "standby"), (3001, "down")]
    assert page.nodes[1].used.mru == 7623566950


def test_it_asks_for_the_farm_page_and_size(proxy):
    farm_7 = [n for n in sample("nodes-page.json") if n["farmId"] == 7]
    proxy.answer("/nodes", farm_7)

    page = client_for(proxy).nodes(farm_id=7, page=2, size=10)

    assert proxy.queries == ["farm_ids=7&page=2&size=10&ret_count=true"]
    assert (len(page.nodes), page.page, page.size) == (2, 2, 10)


def test_it_skips_a_malformed_node_and_keeps_the_rest_of_the_page(proxy):
    nodes = sample("nodes-page.json")
    nodes[1]["total_resources"]["mru"] = -5
    nodes.append("not a node")
    proxy.answer("/nodes", nodes)

    page = client_for(proxy).nodes()

    assert [n.node_id for n in page.nodes] == [11, 2050, 3001]
    assert page.skipped == (
        ("1774", "node 1774: total_resources.mru is -5, must be a non-negative byte count"),
        ("position 5", "node payload is a string ('not a node'), must be a JSON object"),
    )


def test_it_skips_a_node_listed_twice(proxy):
    nodes = sample("nodes-page.json")
    proxy.answer("/nodes", nodes + [nodes[0]])

    page = client_for(proxy).nodes()

    assert [n.node_id for n in page.nodes] == [11, 1774, 2050, 3001]
    assert page.skipped[0][0] == "11"


def test_it_refuses_a_node_list_that_is_not_a_list(proxy):
    proxy.answer("/nodes", {"error": "nope"})

    with pytest.raises(MalformedPayload, match="the node list from .* is an object, must be a JSON array"):
        client_for(proxy).nodes()


def test_it_refuses_an_unreasonable_page_size(proxy):
    with pytest.raises(ValueError, match="page size must be a whole number from 1 to 1000"):
        client_for(proxy).nodes(size=0)


# --- GET /nodes/{id}/statistics ----------------------------------------------------------


def test_it_reads_node_statistics(proxy):
    proxy.answer("/nodes/1774/statistics", sample("node-1774-statistics.json"))

    stats = client_for(proxy).statistics(1774)

    assert (stats.system.mru, stats.used.mru, stats.deployments, stats.workloads) == (3328599654, 7623566950, 1, 3)


def test_it_says_a_down_node_is_offline_without_retrying(proxy):
    proxy.answer(
        "/nodes/3001/statistics", Answer(500, {"error": "cannot fetch statistics from node 3001 with status: down"})
    )

    with pytest.raises(NodeOffline) as raised:
        client_for(proxy).statistics(3001)

    assert str(raised.value) == (
        f"node 3001 is down: the grid proxy cannot fetch its statistics ({proxy.url}/nodes/3001/statistics)"
    )
    assert proxy.hits["/nodes/3001/statistics"] == 1


def test_it_says_the_relay_failed_when_statistics_fail_otherwise(proxy):
    proxy.answer(
        "/nodes/1774/statistics", Answer(500, {"error": "failed to get get node statistics from relay: timeout"})
    )

    with pytest.raises(GridUnavailable, match="could not get node 1774's statistics from the node"):
        client_for(proxy).statistics(1774)
    assert proxy.hits["/nodes/1774/statistics"] == 1


def test_it_still_retries_statistics_on_a_gateway_error(proxy):
    proxy.answer("/nodes/1774/statistics", Answer(503), sample("node-1774-statistics.json"))

    assert client_for(proxy).statistics(1774).deployments == 1
    assert proxy.hits["/nodes/1774/statistics"] == 2


def test_it_names_the_statistics_field_that_is_wrong(proxy):
    stats = sample("node-1774-statistics.json")
    stats["used"]["mru"] = None
    proxy.answer("/nodes/1774/statistics", stats)

    with pytest.raises(
        MalformedPayload, match="node 1774 statistics: used.mru is null, must be a non-negative byte count"
    ):
        client_for(proxy).statistics(1774)


# --- read-only ----------------------------------------------------------------------------


def test_it_refuses_to_deploy(proxy):
    with pytest.raises(DeployNotSupported) as raised:
        client_for(proxy).deploy_vm(1774, SliceSize(cru=1, mru=4 * GiB, sru=100 * GiB), name="vm1")

    assert str(raised.value) == DEPLOY_NOT_SUPPORTED


def test_it_refuses_to_delete(proxy):
    with pytest.raises(DeployNotSupported):
        client_for(proxy).delete_vm(1774, "1-2-vm1")


def test_it_refuses_a_base_url_that_is_not_http():
    with pytest.raises(ValueError, match="must be an http:// or https:// URL"):
        GridProxyClient("gridproxy.grid.tf")
