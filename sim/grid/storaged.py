"""Where the simulated node puts each disk: storaged's placement in the node's SSD pools.

Disk placement as storaged does it (zos pkg/storage findCandidates, vDiskFindCandidate):
a disk goes to the mounted pool with the most room left after it; if no mounted pool
holds it, to the first unmounted pool in device order that does (which is mounted from
then on); a data disk (vdisk) prefers a pool that already has a vdisks volume, the rootfs
volume takes the best candidate.

Written here on its own, on purpose: dashboard.capacity.placement predicts the same rules,
and the suite holds that prediction against this, as against a real node.
"""

from __future__ import annotations

from collections.abc import Sequence

from dashboard.capacity import GiB
from sim.grid.records import SimNode, SimVm

# zosbase pkg/storage/storage.go: the zos-cache subvolume is created with a 5 GiB quota at first
# boot (in the most free SSD pool), and every 5 minutes `checkAndResizeCache` grows the quota by
# 5 GiB when the cache is 60% full or more, or, below 20% full, sets it to twice what is in use
# rounded down to 5 GiB, plus 5 GiB (never under 5 GiB).
CACHE_STEP = 5 * GiB
CACHE_GROW_PERCENT = 60
CACHE_SHRINK_PERCENT = 20


def resized_cache(size: int, in_use: int) -> int:
    """The zos-cache quota after one `checkAndResizeCache` with `in_use` bytes in it (its Excl); a cache
    with no quota yet (`size` 0) gets max(5 GiB, twice its use) first, then is judged as any."""
    if size == 0:
        size = max(CACHE_STEP, in_use * 2)
    percent = in_use * 100 // size
    if percent >= CACHE_GROW_PERCENT:
        size += CACHE_STEP
    elif percent < CACHE_SHRINK_PERCENT and size > CACHE_STEP:
        size = (in_use * 2 // CACHE_STEP) * CACHE_STEP + CACHE_STEP
    return max(size, CACHE_STEP)


class Storaged:
    """storaged's view of one node's SSD pools while it places a VM's disks.

    Allocation is counted in full for every disk (`used + size <= size`), the zos-cache's
    quota included (`node.cache_sru`, what it has grown to). Mounted pools and pools holding a vdisks volume persist in the node's row.
    """

    def __init__(self, node: SimNode, vms: Sequence[SimVm]) -> None:
        self.sizes = list(node.pools)
        self.allocated = [0] * len(self.sizes)
        self.cache_pool, self.cache = node.cache_pool, node.cache_sru
        self.allocated[node.cache_pool] += node.cache_sru
        for vm in vms:
            if vm.data_pool is not None:
                self.allocated[vm.data_pool] += vm.sru
            self.allocated[vm.rootfs_pool] += vm.rootfs
        self.mounted = set(node.mounted) | {node.cache_pool}
        self.mounted |= {vm.rootfs_pool for vm in vms} | {vm.data_pool for vm in vms if vm.data_pool is not None}
        self.vdisk_pools = set(node.vdisk_pools) | {vm.data_pool for vm in vms if vm.data_pool is not None}

    def _holds(self, pool: int, size: int) -> bool:
        return self.allocated[pool] + size <= self.sizes[pool]

    def _candidates(self, size: int) -> list[int]:
        # findCandidates: mounted pools that hold it, most room left first; else the first
        # unmounted pool in device order that holds it (mounted for the purpose).
        mounted = [p for p in range(len(self.sizes)) if p in self.mounted and self._holds(p, size)]
        if mounted:
            return sorted(mounted, key=lambda p: self.sizes[p] - self.allocated[p] - size, reverse=True)
        for pool in range(len(self.sizes)):
            if pool not in self.mounted and self._holds(pool, size):
                return [pool]
        return []

    def allocate(self, size: int, *, vdisk: bool) -> int | None:
        candidates = self._candidates(size)
        if not candidates:
            return None
        pool = candidates[0]
        if vdisk:
            # vDiskFindCandidate: the first candidate that already has a vdisks volume.
            pool = next((p for p in candidates if p in self.vdisk_pools), pool)
            self.vdisk_pools.add(pool)
        self.mounted.add(pool)
        self.allocated[pool] += size
        return pool

    def resize_cache(self, in_use: int) -> int:
        """One `checkAndResizeCache`: the quota is set whatever room the pool has left (a quota is
        not an allocation btrfs checks; `used` counts it all the same, so new disks see less room)."""
        size = resized_cache(self.cache, in_use)
        self.allocated[self.cache_pool] += size - self.cache
        self.cache = size
        return size

    def copy(self) -> Storaged:
        twin = Storaged.__new__(Storaged)
        twin.sizes, twin.allocated = self.sizes, list(self.allocated)
        twin.cache_pool, twin.cache = self.cache_pool, self.cache
        twin.mounted, twin.vdisk_pools = set(self.mounted), set(self.vdisk_pools)
        return twin

    def free(self) -> list[int]:
        return [size - used for size, used in zip(self.sizes, self.allocated, strict=True)]
