"""The fleet map: one cell per node by farm, its state from the stored figures, in one query.

The map kept per farm (FarmTotals) against the map read live: tests/test_selectors_fleet_map_kept.py.
"""

import re

import pytest

from dashboard import capacity
from dashboard.figures.selectors.fleet import FleetFilters
from dashboard.figures.selectors.fleet_map import STATES, cell_state, fleet_map
from dashboard.figures.services.farm_totals import farm_totals_refresh
from dashboard.models import Node
from tests.support import farm_cell_node_ids as node_ids

GiB = capacity.GiB


def _state(**changes) -> str:
    figures = dict(
        status="up",
        free=4,
        rented=0,
        deployed=2,
        failed=0,
        deployable=6,
        placeable=4,
        phantom=0,
        reasons={},
        stale=False,
    )
    figures.update(changes)
    return cell_state(*figures.values())


@pytest.mark.parametrize(
    ("changes", "state"),
    [
        ({"status": "down", "phantom": 4, "reasons": {"down": 4}}, "down"),
        ({"status": "standby", "stale": True}, "standby"),
        ({"phantom": 1, "reasons": {"memory": 1}, "stale": True}, "memory"),
        ({"phantom": 3, "reasons": {"memory": 1, "pool": 2}}, "pool"),
        ({"phantom": 1, "reasons": {"disk": 1}}, "disk"),
        ({"stale": True}, "stale"),
        ({"placeable": None, "phantom": None}, "unknown"),
        ({"placeable": 0, "free": 0, "deployed": 6}, "full"),
        ({"placeable": 2}, "some"),
        ({"placeable": 3}, "most"),
        ({"placeable": 4}, "most"),
    ],
)
def test_a_cell_says_what_blocks_the_node_first_then_its_room(changes, state):
    assert _state(**changes) == state


@pytest.fixture
def two_farms(sim_node):
    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana", policy_name="legacy")
    sim_node(20, cru=8, mru=16 * GiB, sru=465 * GiB, farm_id=1, farm_name="freefarm")
    sim_node(21, cru=4, mru=8 * GiB, sru=250 * GiB, farm_id=1, farm_name="freefarm", status="down")


@pytest.mark.django_db
def test_it_groups_the_cells_by_farm_in_node_order(two_farms):
    farms = fleet_map().farms
    assert [(f.farm_id, f.farm_name, node_ids(f)) for f in farms] == [
        (1, "freefarm", [20, 21]),
        (4242, "mitana", [1774]),
    ]


@pytest.mark.django_db
def test_it_counts_each_state_per_farm_and_for_the_map(two_farms):
    answer = fleet_map()
    assert answer.farms[0].counts["down"] == 1
    assert answer.nodes == 3 == sum(count for _, _, count in answer.legend)
    assert [state for state, _, _ in answer.legend] == list(STATES)


@pytest.mark.django_db
def test_a_cell_says_the_nodes_figures_in_words(two_farms):
    (farm,) = fleet_map(filters=FleetFilters(search="1774")).farms
    (label,) = re.findall(r'aria-label="([^"]*)"', farm.cells_html)
    assert label.startswith("Node 1774, farm 4242, up: 7 → 6 slices; 7 free")
    assert "stale catalog" in label


@pytest.mark.django_db
def test_it_takes_the_tables_filters(two_farms):
    assert [f.farm_id for f in fleet_map(filters=FleetFilters(search="mitana")).farms] == [4242]
    assert fleet_map(filters=FleetFilters(status="down")).nodes == 1
    assert fleet_map(filters=FleetFilters(farm_id=1, stale=True)).nodes == 0


@pytest.mark.django_db
def test_it_reads_a_filtered_map_in_three_queries_and_the_whole_map_in_four_whatever_the_fleet_size(
    two_farms, django_assert_num_queries
):
    farm_totals_refresh()  # as the services do on commit (figures.services.farm_totals)
    fleet_map()  # the farms' cells made and kept
    # Each map also reads its farms' public IPv4 bounds for their tooltips: one query, whatever the fleet.
    with django_assert_num_queries(3):  # the nodes, their live holds, the farms' IPv4 bounds
        fleet_map(filters=FleetFilters(status="up"))
    with django_assert_num_queries(4):  # the farms marked changed (none), the farms with holds, one row a farm, IPv4
        fleet_map()
    Node.objects.bulk_create(
        Node(
            grid_id=10_000 + i,
            farm_id=i % 7,
            total_cru=8,
            total_mru=16 * GiB,
            total_sru=465 * GiB,
            carved_policy_name="zos",
        )
        for i in range(500)
    )
    with django_assert_num_queries(3):
        assert fleet_map(filters=FleetFilters(status="unknown")).nodes == 500
    farm_totals_refresh()
    fleet_map()
    with django_assert_num_queries(4):
        answer = fleet_map()
    assert answer.nodes == 503
