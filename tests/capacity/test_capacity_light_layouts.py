"""Issue 43: a ZOS-light node's pools are partitions (zosbase 063d895 pkg/storage_light), unequal and
several to a disk; a carve without a pool report must deploy in full on such a node too.

Judged by the simulated ZOS machine (sim/grid: storaged's placement written on its own), booted with
the partitions ZOS-light would make: each free region of a partitioned disk of at least 5 GiB becomes a
pool (storage.go initialize, filesystem/device.go GetUnallocatedSpaces, isValidAsDevice).
"""

from __future__ import annotations

import pytest

from dashboard import capacity
from dashboard.capacity.layouts import LIGHT_CUTS, LIGHT_MIN_PARTITION, light_cut, plausible_layouts
from sim.grid.machine import ZosMachine

GiB = capacity.GiB
ZOS = capacity.profile("zos")


def deployed_in_full(total: capacity.Resources, pools: list[int], carve: capacity.Carve) -> int:
    """How many of the carve's new slices the simulated node (booted on these pools) takes, in turn."""
    machine = ZosMachine.boot(1, cru=total.cru, mru=total.mru, sru=total.sru, pools=pools)
    size = carve.slice
    for i in range(carve.new_slices):
        vm, _refusal = machine.place(size, name=f"vm{i}", deployment_id=i + 1)
        if vm is None:
            return i
    return carve.new_slices


@pytest.mark.parametrize("total_gb", [120, 480, 960, 1000, 1920, 3840, 7680])
def test_the_light_set_holds_the_full_set_and_partitions_zos_light_would_make(total_gb):
    total = total_gb * 10**9
    full, light = plausible_layouts(total), plausible_layouts(total, light=True)
    assert light[: len(full)] == full
    for layout in light[len(full) :]:
        assert min(layout) >= LIGHT_MIN_PARTITION  # isValidAsDevice: a free region under 5 GiB is left
        assert sum(layout) <= total


def test_a_cut_under_five_gib_is_not_a_partition_zos_light_makes():
    assert light_cut(12 * GiB, drives=1, parts=(1, 3)) == ()
    assert light_cut(40 * GiB, drives=1, parts=(1, 3)) != ()


@pytest.mark.parametrize(
    ("total_gb", "mem_gib", "drives", "parts"),
    [
        (960, 64, 2, (1, 1, 1)),  # two 480 GB SSDs, the boot one partitioned in three
        (1920, 64, 2, (1, 1, 1)),
        (960, 128, 1, (1, 3)),  # one disk: a quarter and the rest (another system's region freed)
        (480, 64, 1, (1, 2)),
        (1000, 256, 2, (1, 1)),
    ],
)
def test_a_carve_without_pools_deploys_in_full_on_a_light_nodes_partitions(total_gb, mem_gib, drives, parts):
    total = capacity.Resources(cru=32, mru=mem_gib * GiB, sru=total_gb * 10**9)
    share = total.sru // drives
    partitions = [share] * (drives - 1) + [share * p // sum(parts) for p in parts]
    carve = capacity.carve(total, ZOS, light=True)
    assert carve.new_slices > 0
    assert deployed_in_full(total, partitions, carve) == carve.new_slices


def test_without_the_light_set_the_same_node_refuses_the_last_slice():
    # Two 480 GB SSDs, one cut in three by ZOS-light: the full set's carve (14 x 54 GiB) loses one slice.
    total = capacity.Resources(cru=32, mru=64 * GiB, sru=960 * 10**9)
    partitions = [480 * 10**9] + [160 * 10**9] * 3
    full, light = capacity.carve(total, ZOS), capacity.carve(total, ZOS, light=True)
    assert deployed_in_full(total, partitions, full) < full.new_slices
    assert deployed_in_full(total, partitions, light) == light.new_slices == full.new_slices


def test_known_pools_are_the_pools_whatever_the_node_runs():
    total = capacity.Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    pools = [int(931.5 * GiB)]
    assert capacity.carve(total, ZOS, pools=pools, light=True) == capacity.carve(total, ZOS, pools=pools)


def test_the_precheck_of_a_light_node_holds_in_the_light_set():
    total = capacity.Resources(cru=32, mru=64 * GiB, sru=960 * 10**9)
    carve = capacity.carve(total, ZOS, light=True)
    free = [(i, carve.slice) for i in range(carve.new_slices)]
    used = capacity.Resources(mru=capacity.zos_reserve_mru(total.mru), sru=20 * GiB)
    light = capacity.live_node(policy=ZOS, pools=None, occupied=(), light=True)
    assert capacity.precheck(free, total, used, ZOS, live=light).placeable_now == carve.new_slices
    bigger = [(i, capacity.SliceSize(cru=1, mru=4 * GiB, sru=54 * GiB)) for i in range(14)]
    # The full set's disks do not all place in the light set: the precheck says so on a light node.
    assert capacity.precheck(bigger, total, used, ZOS, live=light).placeable_now < 14
    assert capacity.precheck(bigger, total, used, ZOS).placeable_now == 14


def test_every_cut_is_tried_for_every_drive_count():
    total = 1920 * 10**9
    light = plausible_layouts(total, light=True)
    for layout in plausible_layouts(total):
        for parts in LIGHT_CUTS:
            cut = light_cut(total, drives=len(layout), parts=parts)
            assert not cut or tuple(sorted(cut)) in {tuple(sorted(x)) for x in light}


@pytest.mark.django_db
def test_a_light_node_registered_without_pools_is_carved_and_figured_for_partitions(sim_node):
    from dashboard.models import Node

    total = capacity.Resources(cru=32, mru=64 * GiB, sru=960 * 10**9)
    node = sim_node(5, cru=32, mru=64 * GiB, sru=960 * 10**9, light=True, hide_pools=True, policy_name="zos")
    node = Node.objects.get(pk=node.pk)
    expected = capacity.carve(total, ZOS, light=True)
    assert node.light and node.pools is None
    assert (node.carved_slice_sru, node.deployable, node.stale) == (expected.slice.sru, expected.slices, False)
    assert node.carved_slice_sru < capacity.carve(total, ZOS).slice.sru
