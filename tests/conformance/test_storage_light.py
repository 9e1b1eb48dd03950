"""zosbase 063d895 pkg/storage_light: a ZOS-light node's pools are partitions.

    storage.go:277    if !dev.IsPartitioned() { candidateDevices = append(candidateDevices, dev) }   // a whole disk
    storage.go:282    spaces, err := dev.GetUnallocatedSpaces(ctx)       // parted print free
    storage.go:289    dev.AllocateEmptySpace(ctx, space)                  // parted mkpart primary btrfs start end
    storage.go:301    candidateDevices = append(candidateDevices, newDevice.Children...)   // every partition
    storage.go:198    if device.IsPXEPartition() { ... skip }             // label "ZOSPXE"
    device.go:156     const minDeviceSizeBytes = 5 * 1024 * 1024 * 1024 // 5 GiB
    device.go:164     space.Type == "free" && spaceSize >= minDeviceSizeBytes

So a partitioned disk gives one pool per free region of at least 5 GiB (and per partition already holding
btrfs; another system's partition fails to mount as btrfs and is left out), and the SSD total the node
reports is its pools' alone. The product's light set (capacity.layouts) is judged here by the simulated
node booted on such partitions.
"""

from __future__ import annotations

import pytest

from dashboard import capacity
from dashboard.capacity.layouts import LIGHT_MIN_PARTITION, in_plausible_set
from sim.grid.machine import ZosMachine

GiB = capacity.GiB
GB = 10**9
ZOS = capacity.profile("zos")


def test_a_region_under_5_gib_is_not_a_pool():
    assert LIGHT_MIN_PARTITION == 5 * 1024 * 1024 * 1024  # device.go:156


@pytest.mark.parametrize("disk_gb", [240, 480, 960, 1920])
def test_a_boot_disk_with_its_zospxe_partition_is_one_pool_inside_the_set(disk_gb):
    # The ZOSPXE partition (a few hundred MiB) is skipped; the rest of the disk is one free region.
    pool = disk_gb * GB - 512 * 1024**2
    assert in_plausible_set([pool], pool) and in_plausible_set([pool], pool, light=True)


@pytest.mark.parametrize(
    ("regions_gb", "in_full_set"),
    [
        ([320, 640], False),  # a disk shared with another system: the free regions before and after it
        ([240, 720], False),
        ([480, 160, 160, 160], False),  # two disks, the boot one partitioned in three
        ([480, 480], True),  # two equal partitions are two equal drives to storaged
    ],
)
def test_light_partitions_are_in_the_light_set(regions_gb, in_full_set):
    pools = [r * GB for r in regions_gb]
    total = sum(pools)
    assert in_plausible_set(pools, total, light=True)
    assert in_plausible_set(pools, total) == in_full_set


@pytest.mark.parametrize("regions_gb", [[320, 640], [240, 720], [480, 160, 160, 160], [160, 160, 160]])
def test_a_light_nodes_carve_without_its_pools_deploys_in_full_on_its_partitions(regions_gb):
    pools = [r * GB for r in regions_gb]
    total = capacity.Resources(cru=32, mru=64 * GiB, sru=sum(pools))
    carve = capacity.carve(total, ZOS, light=True)
    machine = ZosMachine.boot(1, cru=total.cru, mru=total.mru, sru=total.sru, pools=pools)
    for i in range(carve.new_slices):
        vm, refusal = machine.place(carve.slice, name=f"vm{i}", deployment_id=i + 1)
        assert vm is not None, (i, carve.new_slices, refusal)
