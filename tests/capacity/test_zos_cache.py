"""Issue 33, item 5: the zos-cache grows (zosbase pkg/storage/storage.go, checkAndResizeCache).

The cache's quota starts at 5 GiB in the most free SSD pool, grows by 5 GiB when it is 60% full
and shrinks below 20%; a pool report's `used` holds it. With the pools and the quota known, the
carve and the precheck keep room for its next step on its pool, and no more.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboard import capacity
from dashboard.capacity import GiB, MiB, Resources, SliceSize
from sim.grid.machine import ZosMachine
from sim.grid.storaged import resized_cache
from tests.factories import TOTAL_1774
from tests.zos_model import SETTINGS, deploy_all, every_order, sane_nodes

ZOS = capacity.PROFILES["zos"]
TWO_SSDS = (500107862016, 500107862016)  # two 500 GB drives: 465.75 GiB each


@pytest.mark.parametrize(
    ("size", "in_use", "after"),
    [
        (5 * GiB, 3 * GiB, 10 * GiB),  # 60% full: one step more
        (5 * GiB, 3 * GiB - 1, 5 * GiB),  # just under 60%: as it is
        (10 * GiB, 6 * GiB, 15 * GiB),
        (20 * GiB, 3 * GiB, 10 * GiB),  # 15%: twice the use, rounded down to 5 GiB, plus 5 GiB
        (20 * GiB, 4 * GiB, 20 * GiB),  # exactly 20%: not below it, kept
        (5 * GiB, 0, 5 * GiB),  # never under the first 5 GiB
        (10 * GiB, 512 * MiB, 5 * GiB),
    ],
)
def test_finding_5_the_simulated_cache_grows_at_60_percent_and_shrinks_below_20(size, in_use, after):
    assert resized_cache(size, in_use) == after


def test_finding_5_the_simulated_node_reports_its_grown_cache_in_the_pool_that_holds_it():
    machine = ZosMachine.boot(1, cru=8, mru=TOTAL_1774.mru, sru=sum(TWO_SSDS), pools=TWO_SSDS, cache_sru=5 * GiB)
    assert [p.used for p in machine.storage_pools()] == [5 * GiB, 0]
    assert machine.cache_check(3 * GiB) == 10 * GiB
    assert [p.used for p in machine.storage_pools()] == [10 * GiB, 0]
    assert machine.cache_check(GiB) == 5 * GiB  # 10% of 10 GiB: shrunk back
    assert [p.used for p in machine.storage_pools()] == [5 * GiB, 0]


def _carved_from_report(machine: ZosMachine) -> capacity.Carve:
    total, _ = machine.reading()
    pools = machine.storage_pools()
    cache = capacity.cache_reported([p.used for p in pools], ())
    return capacity.carve(total, ZOS, pools=[p.size for p in pools], cache=cache)


@pytest.mark.parametrize("pools", [(TOTAL_1774.sru,), TWO_SSDS], ids=["one-ssd", "two-ssds"])
def test_finding_5_a_catalog_carved_with_pools_known_deploys_in_full_after_the_cache_grew_one_step(pools):
    machine = ZosMachine.boot(1, cru=8, mru=TOTAL_1774.mru, sru=sum(pools), pools=pools, cache_sru=5 * GiB)
    result = _carved_from_report(machine)
    assert result.reserve.sru == 10 * GiB  # the 5 GiB quota and its next step, not the proxy's 20 GiB
    machine.cache_check(3 * GiB)  # 60% full: ZOS grows it to 10 GiB
    for i in range(result.new_slices):
        vm, refusal = machine.place(result.slice, name=f"vm{i}", deployment_id=i + 1)
        assert refusal is None, refusal
    # Disk given up: what neither the slices nor the grown cache hold. Less than with the proxy's
    # 20 GiB; under 1% of the SSD on one pool (on two, slices of one size leave the other pool the
    # room the cache holds in its own: the price of one disk size, not of the cache).
    blind = capacity.carve(machine.reading()[0], ZOS, pools=pools)
    given_up = sum(pools) - 10 * GiB - result.new_slices * (result.slice.sru + result.slice.rootfs)
    assert given_up < sum(pools) - 10 * GiB - blind.new_slices * (blind.slice.sru + blind.slice.rootfs)
    if len(pools) == 1:
        assert given_up < sum(pools) // 100


def test_finding_5_with_pools_known_node_1774_gives_back_the_disk_the_proxy_assumed():
    before = capacity.carve(TOTAL_1774, ZOS, pools=(TOTAL_1774.sru,))
    after = capacity.carve(TOTAL_1774, ZOS, pools=(TOTAL_1774.sru,), cache=5 * GiB)
    assert after.new_slices == before.new_slices == 6
    assert after.slice.sru > before.slice.sru
    assert TOTAL_1774.sru - 10 * GiB - 6 * (after.slice.sru + after.slice.rootfs) < TOTAL_1774.sru // 100


def _report_live(pools, used, cache):
    return capacity.live_node(policy=ZOS, pools=pools, occupied=(), pools_used=used, cache=cache)


def test_finding_5_the_precheck_refuses_a_vm_that_leaves_no_room_for_the_cache_next_step():
    pool = TOTAL_1774.sru
    proxy_used = Resources(mru=max(TOTAL_1774.mru // 10, 2 * GiB), sru=20 * GiB)
    live = _report_live((pool,), (5 * GiB,), 5 * GiB)
    rootfs = capacity.zos_rootfs(1, 4 * GiB)
    fits_with_step = SliceSize(cru=1, mru=4 * GiB, sru=pool - 10 * GiB - rootfs)
    assert capacity.fits(fits_with_step, TOTAL_1774, proxy_used, ZOS, live=live).fits
    too_big = SliceSize(cru=1, mru=4 * GiB, sru=pool - 10 * GiB - rootfs + GiB)  # fits only in the step's room
    verdict = capacity.fits(too_big, TOTAL_1774, proxy_used, ZOS, live=live)
    assert not verdict.fits
    assert verdict.shortfalls[0].resource == "cache"
    assert "zos-cache's next 5 GiB step" in verdict.words


def test_finding_5_on_two_pools_the_precheck_keeps_the_step_on_the_cache_pool_only():
    total = Resources(cru=8, mru=TOTAL_1774.mru, sru=sum(TWO_SSDS))
    reserve_mru = max(TOTAL_1774.mru // 10, 2 * GiB)
    rootfs = capacity.zos_rootfs(1, 4 * GiB)
    # A disk larger than the cache's pool keeps beside the step goes to the empty pool.
    live = _report_live(TWO_SSDS, (5 * GiB, 0), 5 * GiB)
    used = Resources(mru=reserve_mru, sru=20 * GiB)
    beyond_step = SliceSize(cru=1, mru=4 * GiB, sru=TWO_SSDS[0] - 10 * GiB - rootfs + GiB)
    assert capacity.fits(beyond_step, total, used, ZOS, live=live).fits
    # With 100 GiB left in the other pool, the total has room but only the cache's pool could
    # hold the disk, and the step's room is not given.
    other = TWO_SSDS[1] - 100 * GiB
    live = _report_live(TWO_SSDS, (5 * GiB, other), 5 * GiB)
    used = Resources(mru=reserve_mru, sru=20 * GiB + other)
    verdict = capacity.fits(beyond_step, total, used, ZOS, live=live)
    assert not verdict.fits and verdict.shortfalls[0].resource == "cache", verdict.words
    assert "zos-cache's next 5 GiB step" in verdict.words


def test_finding_5_without_the_cache_known_the_carve_keeps_the_proxy_20_gib():
    assert capacity.carve(TOTAL_1774, ZOS, pools=(TOTAL_1774.sru,)).reserve.sru == 20 * GiB
    # Without the pools, the quota alone is not enough to say where the cache is: 20 GiB too.
    assert capacity.carve(TOTAL_1774, ZOS, cache=5 * GiB).reserve.sru == 20 * GiB


@SETTINGS
@given(sane_nodes(), st.sampled_from([5 * GiB, 10 * GiB, 20 * GiB, 35 * GiB]))
def test_finding_5_a_carve_with_the_cache_known_deploys_in_every_order_after_one_step(node, cache):
    total, pools = node
    pools = pools or [total.sru]
    result = capacity.carve(total, ZOS, pools=pools, cache=cache)
    for zos in every_order(total.mru, pools, total.sru, cache=cache):
        zos.grow_cache()
        assert deploy_all(zos, result.slice, result.new_slices) == [None] * result.new_slices, zos.size


@SETTINGS
@given(sane_nodes(), st.sampled_from([5 * GiB, 20 * GiB]), st.data())
def test_finding_5_with_the_cache_known_placeable_now_is_what_deploys_after_one_step(node, cache, data):
    # The pools report: the cache's quota in its pool, the deployed VMs' disks; the proxy: its 20 GiB.
    total, pools = node
    pools = pools or [total.sru]
    result = capacity.carve(total, ZOS, pools=pools, cache=cache)
    deployed = data.draw(st.integers(0, result.new_slices), label="deployed")
    disks = (result.slice.sru, result.slice.rootfs)
    live = capacity.live_node(policy=ZOS, pools=pools, occupied=[result.slice.resources] * deployed, cache=cache)
    used = Resources(
        mru=max(total.mru // 10, 2 * GiB) + deployed * result.slice.mru,
        sru=20 * GiB + deployed * sum(disks),
    )
    free = [(i, result.slice) for i in range(deployed, result.new_slices)]
    placeable = capacity.precheck(free, total, used, ZOS, live=live).placeable_now
    assert placeable == len(free)  # a fresh catalog carved with the cache known has no phantom
    for zos in every_order(total.mru, pools, total.sru, cache=cache):
        deploy_all(zos, result.slice, deployed)
        zos.grow_cache()
        assert deploy_all(zos, result.slice, len(free)).count(None) == placeable
