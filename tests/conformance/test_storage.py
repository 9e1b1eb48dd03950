"""zosbase 063d895 pkg/storage: where storaged puts a disk, from its own Go tests and code.

storage.go:756 checkForCandidates: mounted pools first (an unmounted one is tried only while no candidate
is found: `if !isMounted && len(candidates) > 0 { break }`); a pool is a candidate when
`usage.Used+uint64(size) <= usage.Size*SSDOverProvisionFactor` (SSDOverProvisionFactor = 1, storage.go:29);
candidates sorted by `Available` (room left after the disk), most first. storage.go:750 findCandidates:
none -> pkg.ErrNotEnoughSpace{DeviceType: zos.SSDDevice}, whose words are pkg/storage.go:24
`not enough space left in pools of this type %s` (%s: "ssd"). disk.go:49 diskFindCandidate: the first
candidate that already holds a `vdisks` volume, else the first candidate.

Each case is one of storage_test.go's (units as the test has them: bytes), run against the product's
prediction (capacity.placement.place_disk) and the simulated node (sim/grid/storaged.py), each written
on its own.
"""

from __future__ import annotations

import pytest

from dashboard.capacity.placement import PoolState, place_disk
from dashboard.grid.classify import classify
from sim.grid.machine import NO_SPACE
from sim.grid.storaged import Storaged


def product(pools, *, vdisks=()) -> list[PoolState]:
    """The pools as the product's placement sees them; every pool of the Go tests is mounted (testPool.Mounted)."""
    return [PoolState(size, used, mounted=True, vdisks=i in vdisks) for i, (size, used) in enumerate(pools)]


def simulated(pools, *, vdisks=(), mounted=None) -> Storaged:
    """The simulated node's storaged on these pools (no zos-cache: the Go tests have none)."""
    storaged = Storaged.__new__(Storaged)
    storaged.sizes = [size for size, _ in pools]
    storaged.allocated = [used for _, used in pools]
    storaged.cache_pool, storaged.cache = 0, 0
    storaged.mounted = set(range(len(pools))) if mounted is None else set(mounted)
    storaged.vdisk_pools = set(vdisks)
    return storaged


def test_create_subvol_takes_the_pool_with_most_room_left():
    # storage_test.go:125 TestCreateSubvol: pool-1 {10000, used 300}, pool-2 {10000, used 100}, 500 -> pool-2.
    pools = [(10000, 300), (10000, 100)]
    assert place_disk(product(pools), 500, vdisk=False) == 1
    assert simulated(pools).allocate(500, vdisk=False) == 1


def test_create_subvol_with_no_space_left_is_refused_in_zos_words():
    # storage_test.go:222 TestCreateSubvolNoSpaceLeft: 20000 in two {10000, used 100} pools.
    pools = [(10000, 100), (10000, 100)]
    assert place_disk(product(pools), 20000, vdisk=False) is None
    assert simulated(pools).allocate(20000, vdisk=False) is None
    assert NO_SPACE == "not enough space left in pools of this type ssd"  # require.EqualError's text
    assert classify(NO_SPACE).cause == "disk"


def test_a_vdisk_goes_where_vdisks_are_already():
    # storage_test.go:269: pool-1 holds the vdisks volume; pool-3 {100000} has the most room, pool-1 is taken.
    pools = [(10000, 100), (10000, 100), (100000, 0)]
    assert place_disk(product(pools, vdisks={0}), 500, vdisk=True) == 0
    assert simulated(pools, vdisks={0}).allocate(500, vdisk=True) == 0


def test_a_vdisk_no_vdisks_pool_can_hold_gets_a_new_vdisks_volume():
    # storage_test.go:321: 10000 fits only pool-3, which gets a vdisks volume (AddVolume on pool3).
    pools = [(5000, 100), (5000, 100), (100000, 0)]
    state = product(pools, vdisks={0})
    assert place_disk(state, 10000, vdisk=True) == 2 and state[2].vdisks
    sim = simulated(pools, vdisks={0})
    assert sim.allocate(10000, vdisk=True) == 2 and 2 in sim.vdisk_pools


def test_no_over_provisioning_a_disk_must_fit_what_is_left():
    # storage_test.go:375: {5000, used 100}: 4000 fits, 5000 does not (SSDOverProvisionFactor = 1).
    pools = [(5000, 100)]
    assert place_disk(product(pools, vdisks={0}), 4000, vdisk=True) == 0
    assert place_disk(product(pools, vdisks={0}), 5000, vdisk=True) is None
    assert simulated(pools, vdisks={0}).allocate(5000, vdisk=True) is None
    # exactly full is allowed: used + size <= size
    assert place_disk(product(pools), 4900, vdisk=False) == 0


@pytest.mark.parametrize(
    ("size", "chosen"),
    [
        (300, 1),  # fits both unmounted pools: the first in device order (the loop breaks after it)
        (700, 2),  # fits only the larger: the first unmounted that holds it
        (2000, None),
    ],
)
def test_unmounted_pools_only_when_no_mounted_one_holds_it_first_in_device_order(size, chosen):
    # storage.go:761-790: pool 0 mounted and full, pools 1 and 2 unmounted.
    pools = [(1000, 1000), (500, 0), (1000, 0)]
    state = [PoolState(1000, 1000, mounted=True), PoolState(500), PoolState(1000)]
    assert place_disk(state, size, vdisk=False) == chosen
    assert simulated(pools, mounted={0}).allocate(size, vdisk=False) == chosen
    if chosen is not None:
        assert state[chosen].mounted  # mounted for the purpose, and it stays so


def test_the_vdisk_words_carry_the_size_with_d():
    # disk.go:165 errors.Wrapf(err, "failed to find a candidate to host vdisk of size '%d'", size)
    diagnosis = classify(f"failed to find a candidate to host vdisk of size '{200 * 1024**3}': {NO_SPACE}")
    assert (diagnosis.cause, diagnosis.needed_bytes) == ("disk", 200 * 1024**3)
