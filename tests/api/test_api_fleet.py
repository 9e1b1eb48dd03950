"""GET /api/v1/fleet and /api/v1/nodes: the fleet page's totals, filters and paging, as JSON."""

import pytest

from dashboard.capacity import GiB
from dashboard.figures.services.farm_totals import farm_totals_refresh

pytestmark = pytest.mark.django_db
NODE = dict(cru=8, mru=31 * GiB, sru=int(931.5 * GiB))


@pytest.fixture
def fleet(sim_node):
    """Three nodes: 1774 (legacy carve, stale, farm 4242), 1775 and 1776 (the default carve, farm 7)."""
    return [
        sim_node(1774, policy_name="legacy", farm_id=4242, **NODE),
        sim_node(1775, farm_id=7, **NODE),
        sim_node(1776, farm_id=7, **NODE),
    ]


def test_it_gives_the_fleet_totals(api_call, api_token, fleet):
    totals = api_call("get", "/api/v1/fleet", api_token("read")).json()
    assert (totals["nodes"], totals["nominal"], totals["stale"]) == (3, 7 + 6 + 6, 1)


def test_it_lets_a_support_token_read(api_call, api_token, fleet):
    assert api_call("get", "/api/v1/fleet", api_token("read", role="support")).status_code == 200


def test_it_lists_nodes_with_their_figures(api_call, api_token, fleet):
    body = api_call("get", "/api/v1/nodes", api_token("read")).json()
    first = body["nodes"][0]
    assert (body["count"], first["node_id"], first["nominal"], first["stale"]) == (3, 1774, 7, True)


def test_it_filters_as_the_fleet_page(api_call, api_token, fleet):
    body = api_call("get", "/api/v1/nodes", api_token("read"), farm_id=7, stale="false").json()
    assert [n["node_id"] for n in body["nodes"]] == [1775, 1776]
    assert body["totals"]["nodes"] == 2


def test_it_pages(api_call, api_token, fleet):
    body = api_call("get", "/api/v1/nodes", api_token("read"), per_page=2, page=2, sort="-node_id").json()
    assert (body["page"], body["pages"], [n["node_id"] for n in body["nodes"]]) == (2, 2, [1774])


def test_it_refuses_an_unknown_sort_naming_the_field(api_call, api_token, fleet):
    response = api_call("get", "/api/v1/nodes", api_token("read"), sort="colour")
    assert response.status_code == 400
    assert response.json()["field"] == "sort"


def test_it_refuses_an_unknown_status_naming_the_field(api_call, api_token):
    response = api_call("get", "/api/v1/nodes", api_token("read"), status="sleepy")
    assert (response.status_code, response.json()["field"]) == (400, "status")


def test_it_refuses_a_wrong_method(api_call, api_token):
    assert api_call("post", "/api/v1/fleet", api_token("read"), json={}).status_code == 405


def test_it_reads_a_page_of_nodes_in_a_constant_number_of_queries(
    api_call, api_token, legacy_fleet, django_assert_max_num_queries
):
    token = api_token("read")
    legacy_fleet(3)
    farm_totals_refresh()  # as the services do on commit (figures.services.farm_totals)
    api_call("get", "/api/v1/nodes", token)  # warm: last_used is stamped once a minute
    # The token, its user's two permission sets, the farms marked changed (none), the kept farm totals, the page,
    # the page's uptime (its nodes, their status events: nodes.selectors.uptime), and the live holds.
    with django_assert_max_num_queries(9):
        assert api_call("get", "/api/v1/nodes", token).status_code == 200
    legacy_fleet(60, first=100)
    farm_totals_refresh()
    with django_assert_max_num_queries(9):
        assert len(api_call("get", "/api/v1/nodes", token).json()["nodes"]) == 50


def test_it_gives_deployable_now_after_wake_and_blocked(api_call, api_token, fleet, sim_node):
    sim_node(1777, farm_id=7, status="standby", **NODE)
    sim_node(1778, farm_id=7, status="down", **NODE)
    totals = api_call("get", "/api/v1/fleet", api_token("read")).json()
    assert (totals["deployable_now"], totals["deployable_after_wake"], totals["deployable_blocked"]) == (18, 6, 6)


def test_it_filters_nodes_by_tier(api_call, api_token, fleet, sim_node):
    sim_node(1777, farm_id=7, status="standby", **NODE)
    page = api_call("get", "/api/v1/nodes?tier=after-wake", api_token("read")).json()
    assert [(n["node_id"], n["tier"]) for n in page["nodes"]] == [(1777, "after-wake")]
