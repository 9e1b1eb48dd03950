"""Property tests: a zos carve is exactly what ZOS will accept, on any sane node.

The node is tests/zos_model.py's `ZosNode`, an independent reading of ZOS's rules (see there).
Each check runs twice: with the pools given to the carve (reported), and with them hidden (as the
Grid Proxy hides them: the carve sees the SSD total alone), still checked on the real pools.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard import capacity
from tests.zos_model import (
    GIB,
    MIB,
    SETTINGS,
    TIB,
    ZOS,
    ZosNode,
    deploy_all,
    every_order,
    most_slices_by_memory,
    sane_nodes,
)


@SETTINGS
@given(sane_nodes())
def test_it_carves_only_slices_that_zos_deploys_all_together_in_every_device_order(node):
    total, pools = node
    result = capacity.carve(total, ZOS, pools=pools)
    for zos in every_order(total.mru, pools, total.sru):
        assert deploy_all(zos, result.slice, result.new_slices) == [None] * result.new_slices, zos.size


@SETTINGS
@given(sane_nodes(), st.sampled_from([0, 256 * MIB, GIB, 3 * GIB]))
def test_it_offers_what_memory_zos_allows_on_memory_limited_nodes(node, hidden):
    total, pools = node
    result = capacity.carve(total, ZOS, pools=pools, observed=capacity.Observed(hidden_mru_per_vm=hidden))
    for zos in every_order(total.mru, pools, total.sru, hidden_per_vm=hidden):
        assert deploy_all(zos, result.slice, result.new_slices) == [None] * result.new_slices
    if result.limited_by == "mru":
        assert result.slices >= 0.97 * most_slices_by_memory(total.mru, hidden)


@SETTINGS
@given(sane_nodes())
def test_it_leaves_no_room_for_one_more_slice_on_a_single_pool(node):
    total, pools = node
    if pools and len(pools) > 1:
        return  # with several pools the carve must hold in every order, so one order may have room
    result = capacity.carve(total, ZOS, pools=pools)
    zos = ZosNode(total.mru, pools or [total.sru])
    deploy_all(zos, result.slice, result.new_slices)
    size = result.slice if result.new_slices else capacity.SliceSize(ZOS.slice_cru, ZOS.slice_mru, ZOS.min_slice_sru)
    refused_on = zos.deploy(size.cru, size.mru, size.sru)
    assert refused_on in ("memory", "disk")
    assert {"memory": "mru", "disk": "sru"}[refused_on] == result.limited_by


@pytest.mark.slow  # a second even at the quick profile's examples
@SETTINGS
@given(sane_nodes(), st.data())
def test_it_re_carves_around_deployed_slices_so_that_all_still_deploy(node, data):
    total, pools = node
    first = capacity.carve(total, ZOS, pools=pools)
    deployed = data.draw(st.integers(0, first.new_slices), label="deployed")
    for zos in every_order(total.mru, pools, total.sru):
        assert deploy_all(zos, first.slice, deployed) == [None] * deployed
        again = capacity.carve(total, ZOS, occupied=[first.slice.resources] * deployed, pools=pools)
        assert not again.overcommitted
        assert again.slices >= first.slices
        assert deploy_all(zos, again.slice, again.new_slices) == [None] * again.new_slices


def _placeable_is_what_deploys_in_every_order(total, pools, result, deployed: int, live) -> None:
    """With `deployed` of the carve's slices running (ZOS's reserve and theirs used), every free one is
    placeable now, and ZOS takes as many of them in every order of its devices."""
    used = capacity.Resources(
        mru=max(total.mru // 10, 2 * GIB) + deployed * result.slice.mru,
        sru=20 * GIB + deployed * (result.slice.sru + result.slice.rootfs),
    )
    free = [(i, result.slice) for i in range(deployed, result.new_slices)]
    placeable = capacity.precheck(free, total, used, ZOS, live=live).placeable_now
    assert placeable == len(free)
    for zos in every_order(total.mru, pools, total.sru):
        deploy_all(zos, result.slice, deployed)
        assert deploy_all(zos, result.slice, len(free)).count(None) == placeable


@SETTINGS
@given(sane_nodes(), st.data())
def test_it_says_placeable_now_is_what_really_deploys_on_a_busy_node(node, data):
    total, pools = node
    result = capacity.carve(total, ZOS, pools=pools)
    deployed = data.draw(st.integers(0, result.new_slices), label="deployed")
    disks = (result.slice.sru, result.slice.rootfs)
    live = capacity.LiveNode(
        pools=tuple(sorted(pools, reverse=True)) if pools else None,
        occupied_disks=(disks,) * deployed,
        running=deployed,
    )
    _placeable_is_what_deploys_in_every_order(total, pools, result, deployed, live)


@SETTINGS
@given(sane_nodes(), st.integers(1, 12), st.integers(10 * GIB, 2 * TIB))
def test_it_says_placeable_now_for_an_over_sized_catalog_is_what_deploys_in_the_worst_order(node, count, disk):
    # A legacy catalog: slices whose disks the pools may not hold. The precheck's count is
    # what deploys whatever the device order, so it equals the worst order's.
    total, pools = node
    size = capacity.SliceSize(cru=1, mru=ZOS.slice_mru, sru=disk)
    used = capacity.Resources(mru=max(total.mru // 10, 2 * GIB), sru=20 * GIB)
    live = capacity.LiveNode(pools=tuple(pools) if pools else None)
    placeable = capacity.precheck([(i, size) for i in range(count)], total, used, ZOS, live=live).placeable_now
    worst = min(deploy_all(zos, size, count).count(None) for zos in every_order(total.mru, pools, total.sru))
    assert placeable == worst


@SETTINGS
@given(sane_nodes())
def test_it_finds_no_phantom_in_a_fresh_zos_catalog(node):
    total, pools = node
    result = capacity.carve(total, ZOS, pools=pools)
    # The Grid Proxy's view of an empty node: only the reserve is used.
    used = capacity.Resources(mru=max(total.mru // 10, 2 * GIB), sru=20 * GIB)
    free = [(i, result.slice) for i in range(result.new_slices)]
    live = capacity.LiveNode(pools=tuple(pools) if pools else None)
    assert capacity.precheck(free, total, used, ZOS, live=live).phantom_slices == ()


@SETTINGS
@given(st.integers(8 * GIB, 512 * GIB), st.integers(1, 40), st.integers(1, 3 * GIB))
def test_it_learns_the_hidden_use_per_vm_from_one_memory_refusal(total_mru, running, hidden):
    zos = ZosNode(total_mru, [64 * TIB], hidden_per_vm=hidden)
    zos.vms = [ZOS.slice_mru] * running
    usable = zos.usable_mru()
    accounted = running * ZOS.slice_mru + zos.reserve_mru
    learnt = capacity.hidden_use_per_vm(
        total_mru=total_mru, usable_mru=max(usable, 0), accounted_mru=accounted, running=running
    )
    if usable > 0:  # at 0 ZOS has capped what it reports at the node's memory
        assert learnt == hidden


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 1024 * TIB))
def test_it_parses_any_plain_byte_count(n):
    assert capacity.parse_size(str(n)) == n


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 1024 * TIB))
def test_it_formats_sizes_within_half_a_percent(n):
    # Two decimals of the largest unit: what an operator reads is close to the truth. Rounding
    # to 0.01 of a unit that n holds at least once is at most 0.5%, and parsing back rounds down
    # to a whole byte (1111 B reads "1.08 KiB", which parses to 1105 B).
    assert abs(capacity.parse_size(capacity.format_size(n).replace(" ", "")) - n) <= n * 0.005 + 1


# --- the same checks with the pools hidden from the carve (as the Grid Proxy hides them) ---------

# Drive sizes as sold, in decimal GB: the tests' own list (the carve's is dashboard.capacity.layouts').
DRIVES_GB = (120, 240, 256, 480, 500, 512, 960, 1000, 1024, 1920, 2000, 3840, 4000, 7680)


@st.composite
def hidden_nodes(draw):
    """1 to 8 identical SSDs of a size as sold, each up to 1% under it (models differ); the carve is
    told only their total."""
    cru = draw(st.integers(1, 128))
    mru = draw(st.integers(4 * GIB, 512 * GIB))
    drives = draw(st.integers(1, 8))
    nominal = draw(st.sampled_from(DRIVES_GB)) * 1000**3
    size = nominal - nominal * draw(st.integers(0, 9)) // 1000
    pools = [size] * drives
    return capacity.Resources(cru=cru, mru=mru, sru=sum(pools)), pools


@SETTINGS
@given(hidden_nodes())
def test_a_carve_without_pools_deploys_in_full_on_the_real_pools_in_every_device_order(node):
    total, pools = node
    result = capacity.carve(total, ZOS)
    assert not result.pools_known
    for zos in every_order(total.mru, pools, total.sru):
        assert deploy_all(zos, result.slice, result.new_slices) == [None] * result.new_slices, zos.size


@SETTINGS
@given(hidden_nodes(), st.sampled_from([0, 256 * MIB, GIB]))
def test_a_carve_without_pools_offers_what_memory_zos_allows(node, hidden):
    total, pools = node
    result = capacity.carve(total, ZOS, observed=capacity.Observed(hidden_mru_per_vm=hidden))
    for zos in every_order(total.mru, pools, total.sru, hidden_per_vm=hidden):
        assert deploy_all(zos, result.slice, result.new_slices) == [None] * result.new_slices
    if result.limited_by == "mru":
        assert result.slices >= 0.97 * most_slices_by_memory(total.mru, hidden)


@SETTINGS
@given(hidden_nodes(), st.data())
def test_without_pools_placeable_now_is_what_really_deploys_on_a_busy_node(node, data):
    total, pools = node
    result = capacity.carve(total, ZOS)
    deployed = data.draw(st.integers(0, result.new_slices), label="deployed")
    live = capacity.LiveNode(occupied_disks=((result.slice.sru, result.slice.rootfs),) * deployed, running=deployed)
    _placeable_is_what_deploys_in_every_order(total, pools, result, deployed, live)


@SETTINGS
@given(hidden_nodes(), st.integers(1, 12), st.integers(10 * GIB, 2 * TIB))
def test_without_pools_placeable_now_never_says_more_than_zos_takes_of_an_over_sized_catalog(node, count, disk):
    total, pools = node
    size = capacity.SliceSize(cru=1, mru=ZOS.slice_mru, sru=disk)
    used = capacity.Resources(mru=max(total.mru // 10, 2 * GIB), sru=20 * GIB)
    placeable = capacity.precheck([(i, size) for i in range(count)], total, used, ZOS).placeable_now
    worst = min(deploy_all(zos, size, count).count(None) for zos in every_order(total.mru, pools, total.sru))
    assert placeable <= worst


@SETTINGS
@given(hidden_nodes(), st.data())
def test_without_pools_a_re_carve_around_deployed_slices_still_deploys(node, data):
    total, pools = node
    first = capacity.carve(total, ZOS)
    deployed = data.draw(st.integers(0, first.new_slices), label="deployed")
    for zos in every_order(total.mru, pools, total.sru):
        assert deploy_all(zos, first.slice, deployed) == [None] * deployed
        again = capacity.carve(total, ZOS, occupied=[first.slice.resources] * deployed)
        assert not again.overcommitted and again.slices >= first.slices
        assert deploy_all(zos, again.slice, again.new_slices) == [None] * again.new_slices
