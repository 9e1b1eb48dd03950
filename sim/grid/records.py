"""What the simulated grid keeps of a node and its VMs, and the reserves ZOS keeps for itself.

- Node memory reserve: max(total // 10, 2 GiB) (zos provisiond getNodeReserved,
  `available.MRU*10/100`, integer division).
- zos-cache: in the pool with the most space, the first of equals in device order; the other
  pools start unmounted. Its quota starts at 5 GiB on a real node and grows in 5 GiB steps
  (storaged.resized_cache); a stored node's cache starts as grown to 20 GiB, the figure the
  Grid Proxy assumes, its row keeps what `cache_check` (cache.py) resizes it to,
  and a ZosMachine can boot with any size and grow it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass

# Sizes only: every rule of the simulated grid is ZOS's, written here on its own.
from dashboard.capacity import GiB, MiB, format_size

ZOS_CACHE_SRU = 20 * GiB
RESERVE_MRU_FLOOR = 2 * GiB


@dataclass(frozen=True)
class ZosBuild:
    """What one ZOS build really uses on a host: its own daemons, and each VM beyond the guest's
    memory (cloud-hypervisor, virtiofsd, the console). The same build uses about the same on every
    node; a node's own spread comes on top (`build_spread`)."""

    own_mru: int
    per_vm_mru: int


# Most of a simulated fleet runs the first, a few the second. "" is a node whose build nobody
# set: its hidden use is only what `per_vm_overhead_mru` gives (ZOS's own use inside the reserve),
# as the simulated grid always did.
ZOS_BUILDS = {
    "v3.14.0-sim": ZosBuild(own_mru=1536 * MiB, per_vm_mru=GiB),
    "v3.13.2-sim": ZosBuild(own_mru=2560 * MiB, per_vm_mru=768 * MiB),
}
BUILD_SPREAD_OWN_MRU = 32 * MiB  # a node's own use differs from its build's by at most this
BUILD_SPREAD_PER_VM_MRU = 4 * MiB  # and each of its VMs' by at most this


def build_spread(node_id: int) -> tuple[int, int]:
    """A node's own deviation from its build (own use, per VM), the same on every run for a node id."""
    mixed = (node_id * 2654435761) % 2**32  # Knuth's multiplicative hash: spread, yet reproducible
    own = (mixed % (2 * BUILD_SPREAD_OWN_MRU // MiB + 1)) * MiB - BUILD_SPREAD_OWN_MRU
    per_vm = ((mixed >> 16) % (2 * BUILD_SPREAD_PER_VM_MRU // MiB + 1)) * MiB - BUILD_SPREAD_PER_VM_MRU
    return own, per_vm


def zos_reserve_mru(total_mru: int) -> int:
    """Memory ZOS keeps for itself: max(10% of total, 2 GiB), integer arithmetic as in ZOS."""
    return max(total_mru * 10 // 100, RESERVE_MRU_FLOOR)


@dataclass(frozen=True)
class SimVm:
    workload_id: str
    name: str
    cru: int
    mru: int
    sru: int  # the data disk
    rootfs: int
    deployment_id: int = 0
    data_pool: int | None = None  # index into the node's pools; None when there is no data disk
    rootfs_pool: int = 0
    created_at: int = 0

    @property
    def disk(self) -> int:
        return self.sru + self.rootfs


@dataclass(frozen=True)
class SimNode:
    """A node as the simulated grid keeps it: one row of sim_node."""

    node_id: int
    farm_id: int
    farm_name: str
    twin_id: int
    status: str
    dedicated: bool
    cru: int
    mru: int
    sru: int
    pools: tuple[int, ...]
    per_vm_overhead_mru: int
    country: str
    city: str
    status_changed_at: int
    # storaged's state: which pools are mounted and which hold a vdisks volume (both stay
    # so until a reboot, which the simulator does not model), and where zos-cache went.
    cache_pool: int = 0
    mounted: frozenset[int] = frozenset()
    vdisk_pools: frozenset[int] = frozenset()
    # The ZOS version the node runs (what `zos.system.version` answers); its use from ZOS_BUILDS.
    zos_build: str = ""
    # The zos-cache's quota now (storaged.resized_cache grows it on a ZosMachine).
    cache_sru: int = ZOS_CACHE_SRU
    # The zos-cache subvolume is gone (zos#2043): ZOS refuses every workload and its statistics (cache.py).
    cache_missing: bool = False

    @property
    def reserve_mru(self) -> int:
        return zos_reserve_mru(self.mru)

    def hidden_use(self) -> tuple[int, int]:
        """(ZOS's own use, each VM's use beyond its memory) on this host. A node with no build uses
        its reserve for ZOS itself and `per_vm_overhead_mru` per VM."""
        build = ZOS_BUILDS.get(self.zos_build)
        if build is None:
            return self.reserve_mru, self.per_vm_overhead_mru
        own, per_vm = build_spread(self.node_id)
        # `per_vm_overhead_mru` is this node's own deviation from its build (--per-vm-overhead-mru).
        return build.own_mru + own, build.per_vm_mru + per_vm + self.per_vm_overhead_mru


def checked_build(zos_build: str) -> str:
    if zos_build not in ("", *ZOS_BUILDS):
        raise ValueError(f"unknown ZOS build {zos_build!r}; the simulated builds are {', '.join(ZOS_BUILDS)}")
    return zos_build


def checked_pools(pools: Sequence[int] | None, sru: int) -> list[int]:
    """The SSD pool sizes of a node being added or booted (one pool of its whole SSD by default)."""
    if pools is None:
        return [sru]
    sizes = list(pools)
    if not sizes:
        raise ValueError("pools must list at least one SSD pool size")
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"every pool size must be a whole number of bytes above zero (got {size!r})")
    if sum(sizes) > sru:
        raise ValueError(
            f"the pools add up to {format_size(sum(sizes))}, more than the node's SSD total of {format_size(sru)}"
        )
    if max(sizes) < ZOS_CACHE_SRU:
        raise ValueError(f"the largest pool is {format_size(max(sizes))}; it must hold the 20 GiB zos-cache")
    return sizes


def now() -> int:
    """The simulated grid's clock: unix time in whole seconds."""
    return int(time.time())


def node_from_row(row: sqlite3.Row) -> SimNode:
    return SimNode(
        node_id=row["node_id"],
        farm_id=row["farm_id"],
        farm_name=row["farm_name"],
        twin_id=row["twin_id"],
        status=row["status"],
        dedicated=bool(row["dedicated"]),
        cru=row["cru"],
        mru=row["mru"],
        sru=row["sru"],
        pools=tuple(json.loads(row["pools"])),
        per_vm_overhead_mru=row["per_vm_overhead_mru"],
        country=row["country"],
        city=row["city"],
        status_changed_at=row["status_changed_at"],
        cache_pool=row["cache_pool"],
        mounted=frozenset(json.loads(row["mounted"])),
        vdisk_pools=frozenset(json.loads(row["vdisk_pools"])),
        zos_build=row["zos_build"],
        cache_sru=row["cache_sru"],
        cache_missing=bool(row["cache_missing"]),
    )
