"""Where ZOS puts each disk: storaged's placement, played out on the pools' sizes alone.

ZOS does not place disks first fit in pool order (zos pkg/storage/storage.go findCandidates,
vdisk.go vDiskFindCandidate; docs/domain.md "Where ZOS puts each disk"):
- at boot zos-cache goes to the SSD pool with the most space; pools holding nothing stay unmounted;
- a disk goes to the mounted pool with the most space left after it (`used + size <= size`);
  only when no mounted pool can hold it, to the first unmounted pool in device order that can;
- a VM's data disk (a vdisk file) prefers, among those candidates, a pool already holding vdisks;
  its rootfs is a volume and takes the first candidate.
The device order is reported nowhere, so a verdict that must hold on the real node holds
under every order of its pools.

Plain integers in, plain integers out: this module knows nothing of policies or slices, so the
carve (what to offer) and the precheck (what fits now) both ask it the same questions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import permutations


@dataclass
class PoolState:
    """One SSD pool as storaged sees it: its size, what is allocated in it, mounted, holds vdisks."""

    size: int
    used: int = 0
    mounted: bool = False
    vdisks: bool = False

    @property
    def room(self) -> int:
        return self.size - self.used


def pools_at_boot(pools: Sequence[int], cache: int) -> list[PoolState]:
    """The pools in this device order after boot: zos-cache in the one with the most space."""
    state = [PoolState(size=size) for size in pools]
    if state:
        largest = max(range(len(state)), key=lambda i: (state[i].size, -i))  # the first of equals
        state[largest].used = cache
        state[largest].mounted = True
    return state


def place_disk(state: list[PoolState], size: int, *, vdisk: bool) -> int | None:
    """Allocate one disk the way storaged does; the pool's index, or None ("not enough space")."""
    if size <= 0:
        return -1  # nothing to allocate (a VM without a data disk)
    candidates = [i for i, pool in enumerate(state) if pool.mounted and pool.used + size <= pool.size]
    if candidates:
        # sort.Slice by space left after the disk, most first; equals keep device order here,
        # and every device order is tried by the callers, so ties are covered both ways.
        candidates.sort(key=lambda i: -(state[i].room - size))
        chosen = candidates[0]
        if vdisk:
            chosen = next((i for i in candidates if state[i].vdisks), chosen)
    else:
        chosen = next((i for i, pool in enumerate(state) if not pool.mounted and pool.used + size <= pool.size), None)
        if chosen is None:
            return None
        state[chosen].mounted = True
    state[chosen].used += size
    if vdisk:
        state[chosen].vdisks = True
    return chosen


def place_vm_disks(state: list[PoolState], data: int, rootfs: int) -> str:
    """Place one VM's data disk then its rootfs (ZOS installs zmounts first); "" or what failed.

    On failure the state is left as ZOS leaves it: a data disk that was placed stays allocated
    until its deployment is cleaned up, so callers that go on must work on a copy.
    """
    if place_disk(state, data, vdisk=True) is None:
        return "data"
    if place_disk(state, rootfs, vdisk=False) is None:
        return "rootfs"
    return ""


def device_orders(pools: Sequence[int]) -> list[tuple[int, ...]]:
    """Every distinct order of the pools (equal sizes are interchangeable): at most 24 for 4 pools."""
    return list(_device_orders(tuple(pools)))


@lru_cache(maxsize=1024)
def _device_orders(pools: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    # A fleet has few pool layouts and the precheck asks for them on every slice.
    return tuple(sorted(set(permutations(pools))))


def copy_pools(state: Sequence[PoolState]) -> list[PoolState]:
    """A copy to try a placement on: place_disk changes the pools it is given."""
    return [PoolState(p.size, p.used, p.mounted, p.vdisks) for p in state]


def pools_after(order: Sequence[int], cache: int, vms: Sequence[tuple[int, int]]) -> list[PoolState]:
    """The pools of one device order after boot and these VMs' (data, rootfs) disks, placed in turn.

    A VM that would not place is skipped (ZOS refused it, it holds nothing).
    """
    state = pools_at_boot(order, cache)
    for data, rootfs in vms:
        trial = copy_pools(state)
        if not place_vm_disks(trial, data, rootfs):
            state = trial
    return state


def vms_placed_in_every_order(
    pools: Sequence[int], cache: int, occupied: Sequence[tuple[int, int]], new: tuple[int, int], *, limit: int
) -> int:
    """How many VMs of disks `new` (data, rootfs) place one after another after `occupied`,
    in the worst device order; at most `limit`."""
    worst = limit
    for order in device_orders(pools):
        state = pools_after(order, cache, occupied)
        placed = 0
        while placed < worst and not place_vm_disks(state, *new):
            placed += 1
        worst = min(worst, placed)
        if worst == 0:
            break
    return worst


def largest_pool_room(pools: Sequence[int], cache: int, occupied: Sequence[tuple[int, int]]) -> int:
    """The room of the largest pool after the occupied disks, in the worst device order."""
    return min(max((p.room for p in pools_after(order, cache, occupied)), default=0) for order in device_orders(pools))
