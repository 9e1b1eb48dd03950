from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard import capacity
from dashboard.capacity import GiB, Resources
from dashboard.figures.selectors.fleet import FleetFilters, fleet_overview, fleet_page, fleet_rows
from dashboard.figures.services.farm_totals import farm_totals_refresh
from dashboard.figures.services.figures import figures_compute, figures_refresh_all
from dashboard.models import Node, Policy, Slice
from dashboard.nodes.services import registration
from dashboard.nodes.services.registration import node_register
from tests.conftest import rolled_back_after
from tests.factories import TOTAL_1774

pytestmark = pytest.mark.django_db

NODE_1774 = TOTAL_1774  # 31 GiB and 931.5 GiB, in bytes: 33285996544 and 1000190509056
SMALL = Resources(cru=4, mru=16 * GiB, sru=250 * GiB)


def mixed_fleet_build() -> None:
    """1774: legacy catalog, slice 0 deployed, prechecked (5 placeable, 1 phantom).
    2000: fresh zos catalog, never prechecked. 3000 (farm 2): small, one rented, one failed.
    4000 (farm 2): down, legacy catalog on a small node, prechecked with no phantom."""
    now = timezone.now()
    n1774 = node_register(node_id=1774, total=NODE_1774, farm_id=1, farm_name="mitana", policy_name="legacy")
    n1774.slices.filter(index=0).update(state=Slice.State.DEPLOYED)
    Node.objects.filter(pk=n1774.pk).update(placeable_now=5, phantom_slices=1, seen_at=now - timedelta(minutes=5))
    node_register(node_id=2000, total=NODE_1774, farm_id=1, farm_name="mitana")
    n3000 = node_register(node_id=3000, total=SMALL, farm_id=2, farm_name="tf-2")
    n3000.slices.filter(index=0).update(state=Slice.State.RENTED)
    n3000.slices.filter(index=1).update(state=Slice.State.FAILED)
    Node.objects.filter(pk=n3000.pk).update(seen_at=now - timedelta(days=2))
    n4000 = node_register(node_id=4000, total=SMALL, farm_id=2, status="down", policy_name="legacy")
    Node.objects.filter(pk=n4000.pk).update(placeable_now=0, phantom_slices=0, seen_at=now - timedelta(hours=1))
    figures_refresh_all()  # the slice states above were set by hand, not through a service


@pytest.fixture(scope="class")
def mixed_fleet_built(django_db_setup, django_db_blocker):
    """mixed_fleet, built once for the class and rolled back after it (tests/conftest.py rolled_back_after)."""
    with rolled_back_after(django_db_blocker):
        mixed_fleet_build()
        yield


@pytest.fixture
def mixed_fleet(mixed_fleet_built, db):
    """The class's mixed fleet (mixed_fleet_build); what a test writes is undone after it (its savepoint)."""


def by_node(overview):
    return {row.node_id: row for row in overview.rows}


class TestOnAMixedFleet:
    """Four nodes of every kind the fleet page shows (mixed_fleet_build), built once for the class."""

    def test_it_shows_nominal_against_deployable_for_the_legacy_node(self, mixed_fleet):
        row = by_node(fleet_overview())[1774]
        assert (row.nominal, row.deployable, row.gap) == (7, 6, 1)

    def test_it_counts_each_state_of_the_catalog(self, mixed_fleet):
        rows = by_node(fleet_overview())
        assert [(r.free, r.rented, r.deployed, r.failed) for r in rows.values()] == [
            (6, 0, 1, 0),
            (6, 0, 0, 0),
            (1, 1, 0, 1),
            (3, 0, 0, 0),
        ]

    def test_it_shows_the_latest_precheck_and_none_when_never_prechecked(self, mixed_fleet):
        rows = by_node(fleet_overview())
        assert (rows[1774].placeable_now, rows[1774].phantom) == (5, 1)
        assert (rows[2000].placeable_now, rows[2000].phantom) == (None, None)

    def test_it_says_why_a_catalog_is_stale(self, mixed_fleet):
        rows = by_node(fleet_overview())
        assert rows[1774].stale and rows[1774].stale_reason.startswith(
            "carved with policy legacy v1; its policy is zos v1"
        )
        assert (rows[2000].stale, rows[2000].stale_reason) == (False, "")

    def test_it_finds_a_catalog_with_a_failed_slice_stale(self, mixed_fleet):
        row = by_node(fleet_overview())[3000]
        assert (row.stale, row.stale_reason) == (True, "1 free slice(s) where the policy carves 2")

    def test_it_counts_the_deployable_slices_of_a_small_node_around_its_rented_slice(self, mixed_fleet):
        # 16 GiB: 14 GiB after the reserve, 3 slices of 4 GiB; one of them is rented.
        assert by_node(fleet_overview())[3000].deployable == 3

    def test_it_totals_the_fleet(self, mixed_fleet):
        t = fleet_overview().totals
        assert (t.nodes, t.nominal, t.deployable, t.free) == (4, 7 + 6 + 3 + 3, 6 + 6 + 3 + 3, 6 + 6 + 1 + 3)
        assert (t.phantom, t.stale, t.placeable_now, t.unprechecked) == (1, 3, 5, 2)

    def test_it_totals_only_the_rows_shown(self, mixed_fleet):
        t = fleet_overview(filters=FleetFilters(farm_id=2)).totals
        assert (t.nodes, t.nominal) == (2, 6)

    def test_it_names_the_effective_policy_of_each_node(self, mixed_fleet):
        Policy.objects.create(name="farm-2", scope=Policy.Scope.FARM, farm_id=2, version=4)
        figures_refresh_all()
        assert {r.node_id: r.policy for r in fleet_overview().rows}[3000] == "farm-2 v4"

    def test_it_carves_with_the_farm_override(self, mixed_fleet):
        Policy.objects.create(name="farm-2", scope=Policy.Scope.FARM, farm_id=2, slice_mru=2 * GiB)
        figures_refresh_all()
        rows = by_node(fleet_overview())
        # 14 GiB after the reserve: the rented 4 GiB slice plus five of 2 GiB.
        assert (rows[3000].deployable, rows[3000].stale) == (6, True)
        assert rows[2000].deployable == 6

    @pytest.mark.parametrize(
        ("filters", "node_ids"),
        [
            ({"farm_id": 2}, [3000, 4000]),
            ({"status": "down"}, [4000]),
            ({"stale": True}, [1774, 3000, 4000]),
            ({"stale": False}, [2000]),
            ({"has_phantoms": True}, [1774]),
            ({"has_phantoms": False}, [2000, 3000, 4000]),
            ({"farm_id": 1, "stale": True}, [1774]),
            ({"farm_id": 99}, []),
        ],
    )
    def test_it_filters(self, mixed_fleet, filters, node_ids):
        assert [r.node_id for r in fleet_overview(filters=FleetFilters(**filters)).rows] == node_ids

    def test_it_treats_a_legacy_node_on_a_small_node_as_stale(self, mixed_fleet):
        # 4000 was carved legacy: 15 GiB usable // 4 = 3 slices, the zos carve also gives 3, yet the
        # policy differs, so it is stale even though the count agrees.
        row = by_node(fleet_overview())[4000]
        assert (row.nominal, row.deployable, row.stale) == (3, 3, True)

    @pytest.mark.parametrize(
        ("search", "node_ids"),
        [
            ("1774", [1774]),
            ("17", [1774]),
            ("  3000 ", [3000]),
            ("20", [2000]),
            ("2", [2000, 3000, 4000]),  # node 2000, and farm 2
            ("1", [1774, 2000]),  # farm 1 (node 1774 by its digits too)
            ("9", []),
            ("17740", []),
            ("mitana", [1774, 2000]),
            ("MiTa", [1774, 2000]),
            ("tf-", [3000]),
            ("abc", []),
            ("17a", []),
            ("-1", []),
            ("99999999999999999999999", []),
            ("", [1774, 2000, 3000, 4000]),
        ],
    )
    def test_it_searches_by_node_id_farm_id_or_farm_name(self, mixed_fleet, search, node_ids):
        assert [r.node_id for r in fleet_overview(filters=FleetFilters(search=search)).rows] == node_ids

    def test_it_gives_empty_totals_for_a_search_that_matches_nothing(self, mixed_fleet):
        assert fleet_overview(filters=FleetFilters(search="node 1774")).totals.nodes == 0

    def test_it_treats_a_search_as_text_not_as_a_pattern(self, mixed_fleet):
        assert fleet_overview(filters=FleetFilters(search="%")).totals.nodes == 0
        assert fleet_overview(filters=FleetFilters(search="m_tana")).totals.nodes == 0

    @pytest.mark.parametrize(
        ("sort", "node_ids"),
        [
            ("node_id", [1774, 2000, 3000, 4000]),
            ("-node_id", [4000, 3000, 2000, 1774]),
            ("farm", [1774, 2000, 3000, 4000]),
            ("-farm", [3000, 4000, 1774, 2000]),
            ("status", [4000, 1774, 2000, 3000]),
            ("-gap", [1774, 2000, 3000, 4000]),
            ("gap", [2000, 3000, 4000, 1774]),
            ("-phantom", [1774, 4000, 2000, 3000]),
            ("phantom", [2000, 3000, 4000, 1774]),
            ("-free", [1774, 2000, 4000, 3000]),
            ("seen", [2000, 3000, 4000, 1774]),
            ("-seen_at", [1774, 4000, 3000, 2000]),
        ],
    )
    def test_it_sorts_with_node_id_breaking_ties(self, mixed_fleet, sort, node_ids):
        assert [r.node_id for r in fleet_overview(sort=sort).rows] == node_ids

    def test_it_gives_the_figures_of_chosen_nodes(self, mixed_fleet):
        pk = Node.objects.get(grid_id=1774).pk
        rows = fleet_rows(node_pks=[pk])
        assert list(rows) == [pk] and rows[pk].deployable == 6

    def test_it_gives_the_exact_time_a_node_was_last_seen(self, mixed_fleet):
        seen = timezone.now().replace(microsecond=123457) - timedelta(days=400)
        Node.objects.filter(grid_id=2000).update(seen_at=seen)
        assert by_node(fleet_overview())[2000].seen_at == seen
        assert by_node(fleet_overview())[2000].seen_at.utcoffset() == timedelta(0)

    def test_it_gives_one_page_with_the_totals_of_every_matching_node(self, mixed_fleet):
        page = fleet_page(page=2, per_page=3, sort="-node_id")
        assert [r.node_id for r in page.rows] == [1774]
        assert (page.count, page.totals.nodes, page.totals.stale) == (4, 4, 3)

    def test_it_gives_the_last_page_for_a_page_beyond_it(self, mixed_fleet):
        assert [r.node_id for r in fleet_page(page="99", per_page=3).rows] == [4000]

    def test_it_writes_the_stale_reason_of_a_paged_row(self, mixed_fleet):
        row = fleet_page(page=1, per_page=1, filters=FleetFilters(search="3000")).rows[0]
        assert row.stale_reason == "1 free slice(s) where the policy carves 2"

    def test_it_splits_deployable_into_now_after_wake_and_blocked(self, mixed_fleet):
        Node.objects.filter(grid_id=2000).update(status="standby")
        totals = fleet_overview().totals
        deployable = {row.node_id: row.deployable for row in fleet_overview().rows}
        assert (totals.deployable_now, totals.deployable_after_wake, totals.deployable_blocked) == (
            deployable[1774] + deployable[3000],
            deployable[2000],
            deployable[4000],
        )
        assert totals.deployable_now + totals.deployable_after_wake + totals.deployable_blocked == totals.deployable

    @pytest.mark.parametrize("tier, node_ids", [("now", [1774, 3000]), ("after-wake", [2000]), ("blocked", [4000])])
    def test_it_filters_by_tier(self, mixed_fleet, tier, node_ids):
        Node.objects.filter(grid_id=2000).update(status="standby")
        assert [row.node_id for row in fleet_overview(filters=FleetFilters(tier=tier)).rows] == node_ids
        assert {row.tier for row in fleet_overview(filters=FleetFilters(tier=tier)).rows} == {tier}


@pytest.mark.parametrize("sort", ["price", "--gap", "", "node"])
def test_it_refuses_an_unknown_sort_naming_the_choices(sort):
    with pytest.raises(ValueError, match="sort by one of node_id, farm, status, gap, phantom"):
        fleet_overview(sort=sort)


def test_it_refuses_an_unknown_status():
    with pytest.raises(ValueError, match="status must be one of up, down, standby, unknown"):
        fleet_overview(filters=FleetFilters(status="sideways"))


def test_it_shows_an_empty_fleet():
    overview = fleet_overview()
    assert (overview.rows, overview.totals.nodes, overview.totals.nominal) == ([], 0, 0)


# --- a constant number of queries, whatever the fleet size -------------------------------


def fleet_of(count: int) -> None:
    """`count` nodes of a few sizes with zos catalogs, some slices deployed, some overrides."""
    sizes = [NODE_1774, SMALL, Resources(cru=32, mru=256 * GiB, sru=4000 * GiB)]
    zos = capacity.PROFILES["zos"]
    nodes = Node.objects.bulk_create(
        Node(
            grid_id=10_000 + i,
            farm_id=i % 5,
            status="up",
            total_cru=sizes[i % 3].cru,
            total_mru=sizes[i % 3].mru,
            total_sru=sizes[i % 3].sru,
            pools_sru=[sizes[i % 3].sru // 2, sizes[i % 3].sru - sizes[i % 3].sru // 2] if i % 7 == 0 else None,
            carved_policy_name="zos",
            placeable_now=i % 4 or None,
            phantom_slices=i % 2,
        )
        for i in range(count)
    )
    slices = []
    for i, node in enumerate(nodes):
        # Remembered (the carve is pure): a few sizes over and over, and a carve with pools tries every
        # device order of them.
        carve = capacity.carve_memoised(node.total, zos, pools=node.pools_sru)
        made = registration.catalog_slices(node=node, carve=carve, start_index=0, generation=1)
        for s in made[: i % 3]:
            s.state = Slice.State.DEPLOYED
        slices.extend(made)
    Slice.objects.bulk_create(slices)
    Policy.objects.create(name="farm-3", scope=Policy.Scope.FARM, farm_id=3, slice_mru=8 * GiB)
    Policy.objects.create(name="node-10001", scope=Policy.Scope.NODE, node=nodes[1])
    figures_refresh_all()


@pytest.fixture(scope="class", params=[10, 250, pytest.param(1000, marks=pytest.mark.slow)])
def fleet_built_once(request, django_db_setup, django_db_blocker):
    """fleet_of(count) for a class of tests that only read it, built once per size (a query a row
    shows at 250 as well as at 1000; the 1000 run in -m slow)."""
    with rolled_back_after(django_db_blocker):
        fleet_of(request.param)
        yield request.param


@pytest.fixture
def count(fleet_built_once, db):
    """The size of the fleet this test reads (built by fleet_built_once)."""
    return fleet_built_once


class TestAFleetOfAnySize:
    def test_it_reads_the_whole_fleet_in_four_queries_whatever_its_size(self, count, django_assert_num_queries):
        farm_totals_refresh()  # as the services do on commit (figures.services.farm_totals)
        # The farms marked changed (none), the kept farm totals, the live holds (none: no query for the
        # rows' holds), the rows.
        with django_assert_num_queries(4):
            overview = fleet_overview(sort="-gap")
        assert overview.totals.nodes == count

    def test_it_reads_a_filtered_fleet_in_three_queries(self, count, django_assert_num_queries):
        with django_assert_num_queries(3):  # the totals, their live holds, the rows
            overview = fleet_overview(filters=FleetFilters(farm_id=3, search="1", stale=True))
        assert all(r.farm_id == 3 and r.stale for r in overview.rows)

    def test_it_searches_ids_and_farm_names_in_three_queries(self, count, django_assert_num_queries):
        with django_assert_num_queries(3):
            page = fleet_page(page=1, per_page=5, filters=FleetFilters(search="1"))  # every node id here starts with 1
        assert page.count == count

    def test_it_reads_a_page_in_three_queries_whatever_the_fleet_size(self, count, django_assert_num_queries):
        with django_assert_num_queries(3):
            page = fleet_page(page=1, per_page=5, sort="-gap", filters=FleetFilters(stale=False))
        assert len(page.rows) == 5 and not any(r.stale for r in page.rows)


def test_it_carves_each_distinct_node_only_once():
    fleet_of(120)  # each kind of node several times over: a carve per node would miss 120 times
    capacity._carve_memo.cache_clear()
    figures_compute(Node.objects.all())
    # 3 sizes x (with or without pools) x 3 deployed counts x 3 policies, at most.
    assert capacity._carve_memo.cache_info().misses <= 54


def test_it_carves_a_node_within_its_ssd_pools():
    pools = [199 * GiB, 199 * GiB]
    total = Resources(cru=32, mru=256 * GiB, sru=500 * GiB)
    node_register(node_id=5000, total=total, farm_id=1, pools=pools)
    carved = capacity.carve(total, capacity.PROFILES["zos"], pools=pools)
    assert carved.slices != capacity.carve(total, capacity.PROFILES["zos"]).slices
    assert (by_node(fleet_overview())[5000].deployable, by_node(fleet_overview())[5000].stale) == (carved.slices, False)


def test_it_refuses_an_unknown_tier():
    with pytest.raises(ValueError, match="tier must be one of now, after-wake, blocked"):
        fleet_overview(filters=FleetFilters(tier="later"))
