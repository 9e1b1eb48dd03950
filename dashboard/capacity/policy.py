"""The capacity model's parameters: `Policy`, the named profiles, and ZOS's rootfs rule.

A policy makes every part of a VM's charge explicit, so it can be calibrated against what
nodes report: the node's memory reserve, max(10% of total, 2 GiB) (zos
cmds/modules/provisiond/main.go, getNodeReserved); the SSD kept for zos-cache (the Grid
Proxy counts a fixed 20 GiB); per-VM overheads (none in current ZOS: zos ADR 0002); the
minimum root filesystem (zos pkg/gridtypes/zos/zmachine.go). The profiles are the carves the
product compares: ZOS's accounting, the legacy bootstrap_nodes formula, the first flat guess.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from dashboard.capacity.sizes import CapacityError, GiB, MiB, Resources, format_size
from dashboard.capacity.vcpus import MAX_VM_CRU

# ZOS zmachine rules (pkg/gridtypes/zos/zmachine.go).
ROOTFS_SMALL = 500 * MiB
ROOTFS_LARGE = 2 * GiB
MIN_VM_MRU = 250 * MiB


# zosbase pkg/storage/storage.go: the zos-cache quota starts at 5 GiB (cacheSize) and
# checkAndResizeCache grows it by 5 GiB whenever it is 60% full (and shrinks it below 20%).
CACHE_STEP = 5 * GiB


def cache_keep(cache: int) -> int:
    """The SSD to keep on the zos-cache's pool when its quota now is known: the quota and its next
    step, no more (the cache grows by one step at a time, checked every 5 minutes)."""
    return max(cache, CACHE_STEP) + CACHE_STEP


def cache_room(policy: Policy, cache: int | None) -> int:
    """SSD room the proxy's `used` hides or lacks: it counts the policy's fixed reserve_sru, while the node
    keeps the cache's quota now and its next step (negative when that is more)."""
    return policy.reserve_sru - cache_keep(cache) if cache is not None and policy.reserve_sru else 0


def cache_now(cache: int) -> int:
    """The zos-cache's quota as it is (never under ZOS's first 5 GiB), beside `cache_keep`'s."""
    return max(cache, CACHE_STEP)


def cache_reported(pools_used, occupied_disks) -> int | None:
    """The zos-cache quota a pool report tells: what ZOS says the pools hold (the cache's quota
    included) beyond the disks of the VMs there. None when the report says nothing usable."""
    if not pools_used:
        return None
    return max(sum(pools_used) - sum(data + rootfs for data, rootfs in occupied_disks), CACHE_STEP)


# The Grid Proxy's `used_resources.sru` counts a fixed 20 GiB for the zos-cache, whatever its quota.
PROXY_CACHE_SRU = 20 * GiB


def cache_pool_of(pools) -> int:
    """The pool ZOS created the zos-cache in at first boot: the most free SSD pool, all empty then,
    so the largest (the first of equals in device order)."""
    return max(range(len(pools)), key=lambda i: (pools[i], -i))


def cache_bound(pools, pools_used, *, disks_sru: int | None) -> tuple[int, int] | None:
    """(a bound on the zos-cache's quota, the pool holding it) from one `zos.storage.pools` report.

    ZOS does not report the cache on its own: a pool's `used` is the quota limits of every subvolume
    in it (zosbase btrfsVolume.Usage, MaxRfer), the cache's included. So the quota is what the pools
    hold beyond the VMs' disks (`disks_sru`, the proxy's used SSD less its fixed 20 GiB, read beside
    the report), never more than its own pool holds, rounded up to whole 5 GiB steps (checkAndResizeCache
    sets multiples of them). None when the report cannot tell: no reading, or the cache's pool holding
    less than the first 5 GiB (a report typed without `used`)."""
    if not pools or not pools_used or len(pools) != len(pools_used) or disks_sru is None:
        return None
    pool = cache_pool_of(pools)
    held = pools_used[pool]
    if held < CACHE_STEP:
        return None
    beyond = max(sum(pools_used) - disks_sru, CACHE_STEP)
    return min(_steps_up(beyond), _steps_up(held)), pool


def _steps_up(size: int) -> int:
    return -(-size // CACHE_STEP) * CACHE_STEP


class PolicyError(CapacityError):
    pass


ROOTFS_RULES = ("zos", "none")
ARITHMETICS = ("bytes", "whole-gib")


@dataclass(frozen=True)
class Policy:
    """The capacity model's parameters. Every part is explicit so it can be calibrated."""

    name: str = "zos"
    slice_mru: int = 4 * GiB
    slice_cru: int = 1
    # Node memory reserve: max(percent of total memory, floor) (zos provisiond getNodeReserved).
    reserve_mru_percent: int = 10
    reserve_mru_floor: int = 2 * GiB
    # SSD the node keeps for zos-cache; the Grid Proxy counts a fixed 20 GiB.
    reserve_sru: int = 20 * GiB
    overhead_mru_per_vm: int = 0
    overhead_sru_per_vm: int = 0
    rootfs: str = "zos"
    min_slice_sru: int = 10 * GiB
    # Data disks are rounded down to this, so catalogs read as whole GiB.
    sru_step: int = GiB
    # "whole-gib" reproduces the legacy carve, which truncated sizes to whole GiB first.
    arithmetic: str = "bytes"
    version: int = 1

    def __post_init__(self) -> None:
        problems = self._slice_problems()
        if not 0 <= self.reserve_mru_percent <= 90:
            problems.append("memory reserve percent must be between 0 and 90")
        for name in ("reserve_mru_floor", "reserve_sru", "overhead_mru_per_vm", "overhead_sru_per_vm", "min_slice_sru"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must not be negative")
        if self.sru_step < 1:
            problems.append("sru_step must be at least 1 byte")
        if self.rootfs not in ROOTFS_RULES:
            problems.append(f"rootfs rule must be one of {', '.join(ROOTFS_RULES)}")
        if self.arithmetic not in ARITHMETICS:
            problems.append(f"arithmetic must be one of {', '.join(ARITHMETICS)}")
        if problems:
            raise PolicyError(f"policy {self.name!r}: " + "; ".join(problems))

    def _slice_problems(self) -> list[str]:
        """What ZOS would refuse in the slice's own size: too little memory, or no vCPU or too many."""
        problems = []
        if self.slice_mru < MIN_VM_MRU:
            problems.append(f"slice memory {format_size(self.slice_mru)} is below ZOS's minimum of 250 MiB")
        if self.slice_cru < 1:
            problems.append("vCPUs per slice must be at least 1")
        elif self.slice_cru > MAX_VM_CRU:
            # zos.MachineCapacity.CPU is a uint8: a VM cannot even ask for more (capacity.vcpus).
            problems.append(f"vCPUs per slice must be at most {MAX_VM_CRU} (ZOS counts a VM's vCPUs in one byte)")
        return problems

    def reserve(self, total: Resources) -> Resources:
        """What the node keeps for itself, by this policy's reckoning."""
        mru = max(total.mru * self.reserve_mru_percent // 100, self.reserve_mru_floor)
        return Resources(mru=mru, sru=self.reserve_sru)

    def rootfs_size(self, cru: int, mru: int) -> int:
        if self.rootfs == "none":
            return 0
        return zos_rootfs(cru, mru)

    def vm_charge(self, cru: int, mru: int, sru: int) -> Resources:
        """What one VM with this data disk costs the node under this policy."""
        return Resources(
            cru=cru,
            mru=mru + self.overhead_mru_per_vm,
            sru=sru + self.rootfs_size(cru, mru) + self.overhead_sru_per_vm,
        )

    def as_dict(self) -> dict:
        return asdict(self)


def zos_rootfs(cru: int, mru: int) -> int:
    """ZOS's minimum root filesystem: 500 MiB when cu = cpu * mem_GiB // 8 is 0, else 2 GiB."""
    cu = cru * mru // (8 * GiB)
    return ROOTFS_SMALL if cu == 0 else ROOTFS_LARGE


def vm_disks(policy: Policy, cru: int, mru: int, sru: int) -> tuple[int, int]:
    """The (data disk, rootfs) a VM of this size allocates in the pools, by this policy's reckoning."""
    return sru + policy.overhead_sru_per_vm, policy.rootfs_size(cru, mru)


PROFILES: dict[str, Policy] = {
    "zos": Policy(name="zos"),
    # The original bootstrap_nodes formula, exactly: 1 GiB reserved, 100% of the disk,
    # whole-GiB integer arithmetic.
    "legacy": Policy(
        name="legacy",
        reserve_mru_percent=0,
        reserve_mru_floor=GiB,
        reserve_sru=0,
        rootfs="none",
        min_slice_sru=0,
        arithmetic="whole-gib",
    ),
    # The first guess: legacy reserve plus a flat +3 GiB / +20 GiB per VM.
    "flat-overhead": Policy(
        name="flat-overhead",
        reserve_mru_percent=0,
        reserve_mru_floor=GiB,
        reserve_sru=0,
        overhead_mru_per_vm=3 * GiB,
        overhead_sru_per_vm=20 * GiB,
        rootfs="none",
    ),
}
DEFAULT_PROFILE = "zos"


def profile(name: str) -> Policy:
    try:
        return PROFILES[name]
    except KeyError:
        raise PolicyError(f"unknown policy {name!r}; choose one of: {', '.join(PROFILES)}") from None


def with_overrides(policy: Policy, **changes) -> Policy:
    """A copy of `policy` with some parameters changed (validated like any policy)."""
    return replace(policy, **changes)
