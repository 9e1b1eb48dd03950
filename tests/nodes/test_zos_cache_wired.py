"""Issue 33, item 5, wired: the zos-cache's figure comes with every pool report (`Node.zos_cache_sru`)
and every path that carves or prechecks keeps its next 5 GiB step on the pool that holds it.

The expected sizes are worked out here by hand from ZOS's rules (docs/domain.md), not by the carve:
node 1774 has 31 GiB of memory (a 3.1 GiB reserve: six 4 GiB slices) and one 931.5 GiB SSD; a 1 vCPU,
4 GiB slice has a 500 MiB root filesystem (cu = 1 * 4 // 8 = 0).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard import capacity
from dashboard.capacity import GiB, MiB
from dashboard.catalogs.services.precheck import node_live_facts, precheck_run
from dashboard.deployments.selectors.placement import placement_for
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.grid.types import DeploymentFailed
from dashboard.models import Node
from dashboard.nodes.selectors.node import node_detail
from dashboard.nodes.services.registration import node_register_from_grid
from sim.grid import SimulatedGrid
from tests.conftest import stand_in_peer_serving
from tests.factories import TOTAL_1774

pytestmark = pytest.mark.django_db

POOL = TOTAL_1774.sru  # 931.5 GiB, one SSD
ROOTFS = 500 * MiB
SLICES = (TOTAL_1774.mru - TOTAL_1774.mru * 10 // 100) // (4 * GiB)  # 6: memory decides


def disk_by_hand(kept: int) -> int:
    """The data disk of each of the six slices when the pool keeps `kept` for the zos-cache."""
    return ((POOL - kept) // SLICES - ROOTFS) // GiB * GiB


def first_boot(grid: SimulatedGrid, node_id: int = 1774) -> None:
    """A node with ZOS's first 5 GiB: a stored node's 20 GiB, shrunk by a check with nothing in it."""
    grid.add_node(node_id, cru=8, mru=TOTAL_1774.mru, sru=POOL)
    assert grid.cache_check(node_id, 0) == 5 * GiB


def grown_to_15_gib(grid: SimulatedGrid, node_id: int = 1774) -> None:
    """Its cache grown twice from 5 GiB; 9 GiB in it now is 60% of 15 GiB."""
    first_boot(grid, node_id)
    assert grid.cache_check(node_id, 3 * GiB) == 10 * GiB
    assert grid.cache_check(node_id, 6 * GiB) == 15 * GiB


def registered(grid: SimulatedGrid, node_id: int = 1774) -> Node:
    """Registered from the grid's reading, the node's own pools answer asked over the simulated grid's RMB."""
    return node_register_from_grid(live=grid.node(node_id), policy_name="zos")


@pytest.fixture
def grid(simgrid_path):
    return SimulatedGrid(simgrid_path)


def test_a_pool_report_bounds_the_cache_and_names_its_pool(grid):
    grown_to_15_gib(grid)
    node = registered(grid)
    assert (node.pools_source, node.zos_cache_sru, node.zos_cache_pool) == ("zos", 15 * GiB, 0)


def test_a_cache_of_15_gib_60_percent_full_is_carved_with_its_next_step_kept(grid):
    grown_to_15_gib(grid)
    node = registered(grid)
    sizes = set(node.slices.values_list("sru", flat=True))
    assert (node.slices.count(), sizes) == (SLICES, {disk_by_hand(15 * GiB + 5 * GiB)})
    assert node_detail(node_id=1774).carve.reserve.sru == 20 * GiB


def test_the_catalog_deploys_in_full_once_zos_grows_the_cache_its_next_step(grid):
    grown_to_15_gib(grid)
    node = registered(grid)
    assert grid.cache_check(1774, 9 * GiB) == 20 * GiB  # 60% full: ZOS takes its next step
    for index in range(SLICES):
        deployment = slice_deploy(node=node, slice_index=index, grid=grid, source="command")
        assert deployment.state == "deployed", deployment.raw_error


# The largest disk that leaves the step's room: the pool less the 15 GiB quota, the step and the rootfs.
ROOM_DISK = (POOL - 15 * GiB - 5 * GiB - ROOTFS) // GiB * GiB
STEP_DISK = ROOM_DISK + GiB  # fits the pool only in the room kept for the step


def test_the_precheck_and_placement_refuse_a_disk_that_would_take_the_cache_step(grid):
    grown_to_15_gib(grid)
    node = registered(grid)
    precheck_run(node=node, grid=grid)
    node = Node.objects.get(pk=node.pk)
    policy, used = capacity.PROFILES["zos"], node.used
    live = node_live_facts(node, policy, used_sru=used.sru)  # what the precheck service builds
    assert (live.cache, live.pools_used) == (15 * GiB, (15 * GiB,))
    fits = capacity.fits(capacity.SliceSize(cru=1, mru=4 * GiB, sru=ROOM_DISK), TOTAL_1774, used, policy, live=live)
    step = capacity.fits(capacity.SliceSize(cru=1, mru=4 * GiB, sru=STEP_DISK), TOTAL_1774, used, policy, live=live)
    assert fits.fits and not step.fits
    assert step.shortfalls[0].resource == "cache"
    assert placement_for(cru=1, mru=4 * GiB, sru=ROOM_DISK).can_host == 1
    refused = placement_for(cru=1, mru=4 * GiB, sru=STEP_DISK)
    assert (refused.can_host, refused.blocked["pool"] + refused.blocked["disk"]) == (0, 1)
    judged = placement_for(cru=1, mru=4 * GiB, sru=STEP_DISK, every_node=True)
    assert "zos-cache's next 5 GiB step" in judged.verdicts[0].verdict.words


def test_a_stored_cache_of_20_gib_keeps_25_where_the_proxy_figure_would_be_refused(grid):
    grid.add_node(1774, cru=8, mru=TOTAL_1774.mru, sru=POOL)  # a stored node: grown to 20 GiB
    grid.add_node(1775, cru=8, mru=TOTAL_1774.mru, sru=POOL)
    node = registered(grid)
    assert node.zos_cache_sru == 20 * GiB
    assert set(node.slices.values_list("sru", flat=True)) == {disk_by_hand(25 * GiB)}
    for node_id in (1774, 1775):
        assert grid.cache_check(node_id, 12 * GiB) == 25 * GiB  # 60% of 20 GiB
    for index in range(SLICES):
        assert slice_deploy(node=node, slice_index=index, grid=grid, source="command").state == "deployed"
    # The proxy's fixed 20 GiB carve gives one GiB more a slice: the sixth no longer fits the pool.
    blind = capacity.SliceSize(cru=1, mru=4 * GiB, sru=disk_by_hand(20 * GiB))
    for index in range(SLICES - 1):
        grid.deploy_vm(1775, blind, name=f"blind{index}")
    with pytest.raises(DeploymentFailed, match="not enough space left in pools"):
        grid.deploy_vm(1775, blind, name="blind5")


def test_a_node_whose_pools_come_without_a_report_is_carved_as_before(sim_node):
    node = sim_node(1774, cru=8, mru=TOTAL_1774.mru, sru=POOL, policy_name="zos")
    assert node.zos_cache is None
    expected = capacity.carve(TOTAL_1774, capacity.PROFILES["zos"], pools=[POOL])
    assert set(node.slices.values_list("sru", flat=True)) == {expected.slice.sru} == {disk_by_hand(20 * GiB)}


def test_a_node_from_the_proxy_alone_is_carved_prudent_as_before(sim_node):
    node = sim_node(1774, cru=8, mru=TOTAL_1774.mru, sru=POOL, policy_name="zos", hide_pools=True)
    expected = capacity.carve(TOTAL_1774, capacity.PROFILES["zos"])
    assert (node.zos_cache, node.carved_pools_known) == (None, False)
    assert set(node.slices.values_list("sru", flat=True)) == {expected.slice.sru}


def test_the_simulated_grids_resize_reaches_the_catalog_after_a_pools_refresh(grid, simgrid_path):
    first_boot(grid)
    node = registered(grid)
    assert set(node.slices.values_list("sru", flat=True)) == {disk_by_hand(10 * GiB)}  # 153 GiB
    # Another process grows it: the row keeps the quota, the node's answer says it.
    assert SimulatedGrid(simgrid_path).cache_check(1774, 3 * GiB) == 10 * GiB
    assert SimulatedGrid(simgrid_path).zos_cache(1774) == (10 * GiB, 0)
    # Pools older than POOLS_MAX_AGE are asked again, over the simulated grid's RMB as over rmb-peer.
    Node.objects.filter(pk=node.pk).update(pools_reported_at=timezone.now() - timedelta(hours=25))
    node.refresh_from_db()
    precheck_run(node=node, grid=SimulatedGrid(simgrid_path))  # reads the pools again
    node.refresh_from_db()
    assert node.zos_cache_sru == 10 * GiB
    # 15 GiB kept now: the six 153 GiB slices (and their rootfs) no longer all fit the pool.
    assert node.placeable_now == (POOL - 15 * GiB) // (disk_by_hand(10 * GiB) + ROOTFS)
    assert node.stale


def test_pools_used_agree_with_the_reading_through_the_known_cache():
    disks = 300 * GiB
    assert capacity.pools_used_agreeing([disks + 15 * GiB], disks + 20 * GiB, cache=15 * GiB) == (disks + 15 * GiB,)
    assert capacity.pools_used_agreeing([disks + 15 * GiB], disks + 20 * GiB) is None  # the proxy's 20 GiB: replayed
    assert capacity.pools_used_agreeing([disks + 20 * GiB], disks + 20 * GiB) == (disks + 20 * GiB,)


@pytest.mark.parametrize(
    ("used", "disks", "expected"),
    [
        ([15 * GiB], 0, (15 * GiB, 0)),
        ([5 * GiB + 300 * GiB], 300 * GiB, (5 * GiB, 0)),
        ([5 * GiB + 300 * GiB - GiB], 300 * GiB, (5 * GiB, 0)),  # never under the first 5 GiB
        ([12 * GiB], 0, (15 * GiB, 0)),  # rounded up to whole steps
        ([0], 0, None),  # the report says nothing of the cache (typed without used)
    ],
)
def test_the_bound_from_one_pool(used, disks, expected):
    assert capacity.cache_bound([POOL], used, disks_sru=disks) == expected


def test_the_bound_on_two_pools_sits_in_the_largest_and_never_beyond_what_it_holds():
    big, small = 500 * GiB, 400 * GiB
    # A VM's disk in the small pool that the reading does not show yet: the bound stays what the big one holds.
    assert capacity.cache_bound([small, big], [100 * GiB, 10 * GiB], disks_sru=0) == (10 * GiB, 1)
    assert capacity.cache_bound([big, big], [10 * GiB, 0], disks_sru=0) == (10 * GiB, 0)
    assert capacity.cache_bound([big], [10 * GiB], disks_sru=None) is None


def test_over_rmb_the_stand_in_peer_answers_the_grown_cache_and_the_carve_keeps_its_step(grid, rmb_redis_url, settings):
    grown_to_15_gib(grid)
    settings.RMB_REDIS_URL, settings.RMB_DEADLINE = rmb_redis_url, 2.0
    with stand_in_peer_serving(grid, rmb_redis_url):
        node = node_register_from_grid(live=grid.node(1774), policy_name="zos")
    assert (node.pools_source, node.zos_cache_sru) == ("rmb", 15 * GiB)
    assert set(node.slices.values_list("sru", flat=True)) == {disk_by_hand(20 * GiB)}
    assert not node.stale


def test_in_traffic_the_step_kept_holds_the_grown_cache_before_the_dashboard_hears_it():
    from sim.month import Event, NodeSpec, Run, contender
    from sim.month.fleet import allowed_mru, image_of

    # 14 slices (64 GiB less its 6.4 GiB reserve, in 4 GiB); the SSD chosen so that keeping the quota
    # and its step gives 32 GiB disks ((477.43 - 10) / 14 - 0.49 = 32.9) where the quota alone would
    # give 33 GiB, and 14 of those (and their rootfs) would not fit beside a cache grown to 10 GiB.
    sru = int(477.43 * GiB)
    spec = NodeSpec(
        node_id=1, cru=32, mru=64 * GiB, sru=sru, pools=(sru,), hidden_mru=0, pools_reported=True, cache_grows=True
    )
    run = Run(contender("zos-learning"), [spec], {1: allowed_mru(spec)})
    node = run.nodes[0]
    assert (node.known_cache, {s.size.sru for s in node.slots}, len(node.slots)) == (5 * GiB, {32 * GiB}, 14)
    assert 14 * (33 * GiB + 500 * MiB) + 10 * GiB > sru  # what the quota alone would have offered
    lifetimes = {}  # a request of each image
    for n in range(10_000):
        lifetime = 1000.0 + n * 0.37
        lifetimes.setdefault(image_of(Event(at=0, kind="deploy", pick=0.0, lifetime=lifetime)), lifetime)
    requests = sorted(lifetimes.values())[:6] + [1000.0] * 10  # six images (3 GiB in the cache), then one
    for hour, lifetime in enumerate(requests):
        run.deploy(Event(at=hour, kind="deploy", pick=0.0, lifetime=lifetime))
    assert node.machine.node.cache_sru == 10 * GiB  # 60% of 5 GiB in it: grown a step, not heard yet
    assert (len(node.machine.vms), run.refused_by_cause) == (14, {})
    run.reregister_stale(24.0)  # the day's pools report
    assert node.known_cache == 10 * GiB


def test_a_catalog_carved_before_the_cache_was_heard_counts_the_slice_its_step_would_take(sim_node):
    # Pools given without a report: carved with the proxy's 20 GiB, six slices of 151 GiB.
    node = sim_node(1774, policy_name="zos", cru=8, mru=TOTAL_1774.mru, sru=POOL)
    assert set(node.slices.values_list("sru", flat=True)) == {disk_by_hand(20 * GiB)}
    precheck_run(node=node, grid=sim_node.grid)  # the node's own answer: a 20 GiB cache, so 25 GiB kept
    node.refresh_from_db()
    assert node.zos_cache_sru == 20 * GiB
    fit = (POOL - 25 * GiB) // (disk_by_hand(20 * GiB) + ROOTFS)  # 5 of the six
    assert (node.placeable_now, node.phantom_slices, node.phantom_reasons) == (fit, SLICES - fit, {"pool": 1})
    assert node.stale
