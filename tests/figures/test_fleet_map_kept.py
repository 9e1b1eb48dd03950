"""The fleet map's kept cells (Django's cache, keyed on the farm and its totals' computed_at) always
show the map read live from the nodes, whoever wrote them, and a read never writes.

The independent answer is the live map: the same rendering over the Node rows at the moment of reading.
"""

import pytest
from django.core.cache import caches

from dashboard.capacity import GiB
from dashboard.figures.selectors.fleet import FleetFilters
from dashboard.figures.selectors.fleet_map import CACHE, STATES, _live_farms, fleet_map
from dashboard.figures.services.farm_totals import farm_totals_refresh
from dashboard.models import FarmTotals, FarmTotalsChanged, Node
from tests.node_writes import WRITES

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def empty_cache():
    caches[CACHE].clear()
    yield
    caches[CACHE].clear()


def assert_kept_is_live():
    kept = fleet_map()
    live = _live_farms(Node.objects.all())
    assert kept.farms == live  # farm ids, names, counts and the cells' HTML byte for byte
    assert kept.counts == {state: sum(f.counts.get(state, 0) for f in live) for state in STATES}


@pytest.fixture
def three_farms(legacy_fleet, sim_node):
    legacy_fleet(3, farm_id=1)
    legacy_fleet(2, first=20, farm_id=2)
    sim_node(4242, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=3, farm_name='mitana <&> "quoted"')
    farm_totals_refresh()
    assert_kept_is_live()
    return legacy_fleet


def test_it_keeps_the_live_map_byte_for_byte_under_each_farms_state(three_farms):
    stamp = FarmTotals.objects.get(farm_id=3).computed_at
    kept = caches[CACHE].get(f"fleet-map:3:{stamp.isoformat()}:-")
    assert kept.farm_name == 'mitana <&> "quoted"' and 'data-node="4242"' in kept.html


def test_a_second_reader_makes_nothing_again(three_farms, django_assert_num_queries):
    # The marks, the farms with live holds (none), the farms' rows and their IPv4 bounds (the tooltips' one
    # query for the whole map): no node is read.
    with django_assert_num_queries(4):
        fleet_map()


def test_one_farm_is_read_from_its_kept_cells(three_farms, django_assert_num_queries):
    with django_assert_num_queries(4):  # as the whole map's, for one farm
        (farm,) = fleet_map(filters=FleetFilters(farm_id=2)).farms
    assert farm == [f for f in _live_farms(Node.objects.all()) if f.farm_id == 2][0]


@pytest.mark.parametrize("write", WRITES)
def test_after_every_kind_of_write_the_map_is_the_live_map_before_and_after_the_refresh(three_farms, sim_node, write):
    WRITES[write](three_farms.grid, sim_node)
    assert_kept_is_live()  # the farms written are behind: rendered live
    farm_totals_refresh()
    assert_kept_is_live()  # refreshed: rendered once more, under their new computed_at
    assert_kept_is_live()  # and read from the cache


def test_a_farm_behind_is_rendered_live_and_not_kept(three_farms, django_assert_num_queries):
    Node.objects.filter(grid_id=2).update(status="down")
    # The marks, the farms with holds, the farms' rows, farm 1's nodes, the farms' IPv4 bounds (tooltips).
    with django_assert_num_queries(5):
        fleet_map()
    with django_assert_num_queries(5):  # still behind: live again, nothing kept under the old key
        assert 'data-node="2" data-state="down"' in fleet_map().farms[0].cells_html


def test_a_read_writes_nothing(three_farms):
    Node.objects.filter(farm_id=1).update(status="standby")
    marks = list(FarmTotalsChanged.objects.values_list("pk", flat=True))
    stamps = list(FarmTotals.objects.order_by("farm_id").values_list("farm_id", "computed_at"))
    fleet_map()
    fleet_map(filters=FleetFilters(farm_id=1))
    assert list(FarmTotalsChanged.objects.values_list("pk", flat=True)) == marks
    assert list(FarmTotals.objects.order_by("farm_id").values_list("farm_id", "computed_at")) == stamps
