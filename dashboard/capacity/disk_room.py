"""The largest disk a node takes now, and each SSD pool's size, use and free room: what operators ask
(zos#1830, #2351, #1819: "how big a disk can I get on this node?").

ZOS checks a disk against one pool, never the node's SSD total (zosbase pkg/storage/storage.go), and the
Grid Proxy reports only the total, so the answer comes from the pools where the node reported them, and
otherwise from every plausible layout of the total (capacity.layouts), as the carve and the precheck
judge. The largest disk is found with the precheck's own `fits` (every device order, every layout, the
memory and the zos-cache rules), so the number said here is one the precheck would accept: the largest
data disk a VM of the policy's slice memory and vCPUs could get on the last reading, to the policy's
disk step.

Pure: plain integers and capacity types in, a `DiskRoom` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dashboard.capacity.carve import SliceSize
from dashboard.capacity.closures import Closure
from dashboard.capacity.layouts import plausible_layouts
from dashboard.capacity.placement import Blurred, pools_after
from dashboard.capacity.policy import Policy, cache_keep, cache_pool_of
from dashboard.capacity.precheck import LiveNode, fits
from dashboard.capacity.sizes import Resources

# A node's disk is found to the policy's step in at most this many trials (2**40 steps of 1 GiB: 1 EiB).
SEARCH_TRIALS = 40


@dataclass(frozen=True)
class PoolNow:
    """One SSD pool: its size, what it holds (as ZOS reported it, or the worst device order of the VMs
    replayed), and its room."""

    index: int  # in the order the pools were reported
    size: int
    used: int
    holds_cache: bool  # the zos-cache's pool: the largest, made at first boot
    reported: bool  # `used` is ZOS's own report; False: modelled from the VMs it holds (worst order)

    @property
    def free(self) -> int:
        return max(self.size - self.used, 0)


@dataclass(frozen=True)
class DiskRoom:
    """The node's pools now and the largest data disk a VM could get there now."""

    pools_known: bool
    pools: tuple[PoolNow, ...]  # the reported pools; () when unknown
    layouts: tuple[tuple[int, ...], ...]  # the layouts assumed when the pools are unknown (each of equal pools)
    vm: SliceSize  # the VM asked about: the policy's slice memory and vCPUs
    largest_disk: int | None  # bytes; None: no VM of that size fits now (`why`)
    why: str  # "" when a disk fits; else what stops every VM: the closure, memory, the reading
    limited_by: str  # what bounds the largest disk: "pool" (one pool), "total" (the SSD total), "cache", ""

    @property
    def free_total(self) -> int | None:
        return sum(p.free for p in self.pools) if self.pools else None


def pools_now(
    pools: Sequence[int], *, used_reported: Sequence[int] | None, cache_kept: int, occupied_disks
) -> tuple[PoolNow, ...]:
    """Each reported pool with what it holds: ZOS's own figures when they agree with the reading
    (`used_reported`), else the VMs' disks replayed after boot, each pool at its fullest over the device
    orders (a Blurred outcome, many pools of many sizes, says nothing per pool: then the replay is skipped)."""
    cache_pool = cache_pool_of(list(pools)) if pools else -1
    if used_reported is not None and len(used_reported) == len(pools):
        return tuple(
            PoolNow(i, size, used, holds_cache=i == cache_pool, reported=True)
            for i, (size, used) in enumerate(zip(pools, used_reported, strict=True))
        )
    states = [s for s in pools_after(pools, cache_kept, occupied_disks) if not isinstance(s, Blurred)]
    fullest = [max((state[i].used for state in states), default=0) for i in range(len(pools))]
    if not states:
        fullest = [cache_kept if i == cache_pool else 0 for i in range(len(pools))]
    return tuple(
        PoolNow(i, size, used, holds_cache=i == cache_pool, reported=False)
        for i, (size, used) in enumerate(zip(pools, fullest, strict=True))
    )


def largest_disk_now(
    total: Resources,
    used: Resources,
    policy: Policy,
    *,
    live: LiveNode,
    closure: Closure | None = None,
    vm: SliceSize | None = None,
) -> tuple[int | None, str, str]:
    """(the largest data disk a VM of `vm`'s cru and mru (the policy's slice by default) fits with now, why
    none does, what bounds it), by the precheck's `fits`: a bisection on the disk's size in the policy's steps."""
    step = max(policy.sru_step, 1)
    vm = (
        SliceSize(cru=vm.cru, mru=vm.mru, sru=0) if vm else SliceSize(cru=policy.slice_cru, mru=policy.slice_mru, sru=0)
    )
    first = fits(vm, total, used, policy, live=live, closure=closure)
    if not first.fits:
        if closure is not None:
            return None, f"the node {closure.what}", "closed"
        return (
            None,
            first.words.removeprefix("does not fit: "),
            first.shortfalls[0].resource if first.shortfalls else "",
        )
    low, high = 0, max(total.sru // step, 0)  # low fits; find the largest that does
    for _ in range(SEARCH_TRIALS):
        if low >= high:
            break
        middle = (low + high + 1) // 2
        trial = SliceSize(cru=vm.cru, mru=vm.mru, sru=middle * step)
        if fits(trial, total, used, policy, live=live, closure=closure).fits:
            low = middle
        else:
            high = middle - 1
    largest = low * step
    beyond = fits(SliceSize(cru=vm.cru, mru=vm.mru, sru=largest + step), total, used, policy, live=live)
    limited_by = beyond.shortfalls[0].resource if beyond.shortfalls else ""
    return largest, "", {"sru": "total", "mru": "memory"}.get(limited_by, limited_by)


def disk_room(
    total: Resources,
    used: Resources | None,
    policy: Policy,
    *,
    live: LiveNode,
    closure: Closure | None = None,
    cache: int | None = None,
) -> DiskRoom:
    """The node's pools now (reported, or the layouts assumed) and the largest disk it takes now; `used`
    None: never read (no disk is said). `cache`: the zos-cache's quota a pool report told."""
    cache_kept = cache_keep(cache) if cache is not None else policy.reserve_sru
    pools = (
        pools_now(live.pools, used_reported=live.pools_used, cache_kept=cache_kept, occupied_disks=live.occupied_disks)
        if live.pools
        else ()
    )
    layouts = () if live.pools else plausible_layouts(total.sru)
    vm = SliceSize(cru=policy.slice_cru, mru=policy.slice_mru, sru=0)
    if used is None:
        return DiskRoom(bool(live.pools), pools, layouts, vm, None, "the node's capacity was never read", "")
    largest, why, limited_by = largest_disk_now(total, used, policy, live=live, closure=closure)
    return DiskRoom(bool(live.pools), pools, layouts, vm, largest, why, limited_by)
