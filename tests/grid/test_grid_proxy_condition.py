"""The proxy's health, power and uptime fields (grid/proxy/parse.py): read when present, "not said" when absent, refused when absurd."""

import copy

import pytest

from dashboard.grid import get_grid
from dashboard.grid.proxy import GridProxyClient
from dashboard.grid.proxy.parse import parse_node
from dashboard.grid.types import GridUnavailable, MalformedPayload
from tests.gridproxy_canned import Answer, sample, start_canned_proxy


def node(**changes) -> dict:
    payload = copy.deepcopy(sample("node-1774.json"))
    payload.update(changes)
    return payload


def test_it_reads_health_power_and_uptime_as_the_proxy_sends_them():
    parsed = parse_node(node(healthy=False, power={"state": "Down", "target": "Up"}, uptime=3600))
    assert (parsed.healthy, parsed.power_state, parsed.power_target, parsed.uptime) == (False, "down", "up", 3600)


def test_an_older_proxy_without_them_is_not_said_not_false():
    payload = node()
    for key in ("healthy", "power", "uptime"):
        payload.pop(key, None)
    parsed = parse_node(payload)
    assert (parsed.healthy, parsed.power_state, parsed.power_target, parsed.uptime) == (None, "", "", None)


def test_a_farm_without_a_power_manager_reports_empty_power():
    parsed = parse_node(node(power={"state": "", "target": ""}))
    assert (parsed.power_state, parsed.power_target) == ("", "")


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"power": "Up"}, "power is"),
        ({"power": {"state": "Sleeping", "target": "Up"}}, "power.state"),
        ({"uptime": -5}, "uptime"),
        ({"uptime": "long"}, "uptime"),
        ({"healthy": "yes"}, "healthy"),
    ],
)
def test_an_absurd_value_is_refused_by_name(changes, named):
    with pytest.raises(MalformedPayload, match=named):
        parse_node(node(**changes))


def test_the_list_shape_carries_them_too():
    (entry,) = [e for e in sample("nodes-page.json") if e["nodeId"] == 11]
    assert parse_node(entry).healthy is True


# --- statistics have their own deadline -------------------------------------------------------


@pytest.fixture
def proxy():
    canned, server = start_canned_proxy()
    yield canned
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_a_statistics_read_has_its_own_deadline_longer_than_a_node_read(proxy):
    proxy.answer("/nodes/1774/statistics", Answer(200, sample("node-1774-statistics.json"), delay=1.2))
    proxy.answer("/nodes/1774", Answer(200, sample("node-1774.json"), delay=1.2))
    client = GridProxyClient(proxy.url, retries=0, deadline=0.6, statistics_deadline=5.0)

    assert client.statistics(1774).workloads >= 0
    with pytest.raises(GridUnavailable, match="within 0.6 s"):
        client.node(1774)


def test_get_grid_gives_the_statistics_deadline_and_the_budget(settings, tmp_path):
    settings.GRID_BACKEND, settings.GRID_PROXY_URL = "gridproxy", "http://127.0.0.1:1"
    settings.GRID_STATISTICS_DEADLINE, settings.VAR_DIR = 27.0, tmp_path
    grid = get_grid()
    assert grid.statistics_deadline == 27.0 and grid.budget is not None
