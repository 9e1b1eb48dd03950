"""The capacity model: how many fixed-size VM slices a ZOS node can really host.

Pure arithmetic with no Django import; integer bytes throughout (1024-based GiB, as
ZOS and the Grid Proxy count). Everything else in the product asks this module.
The rules and their sources are in docs/domain.md (ZOS accounting).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from itertools import permutations

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

# ZOS zmachine rules (pkg/gridtypes/zos/zmachine.go).
ROOTFS_SMALL = 500 * MiB
ROOTFS_LARGE = 2 * GiB
MIN_VM_MRU = 250 * MiB

RESOURCE_WORDS = {"cru": "CPU", "mru": "memory", "sru": "SSD disk", "hru": "HDD disk", "pool": "room in one SSD pool"}


class CapacityError(ValueError):
    """A value the capacity model cannot work with; the message says which and why."""


class SizeError(CapacityError):
    pass


class PolicyError(CapacityError):
    pass


# --- sizes ----------------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB}
_DECIMAL_UNITS = {"kb", "mb", "gb", "tb", "k", "m", "g", "t"}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int, *, what: str = "size", allow_zero: bool = True) -> int:
    """Bytes from '4GiB', '931.5GiB', '512MiB', '1TiB' or a plain byte count.

    Decimal units (GB, MB) are refused: ZOS counts in 1024-based units and '31 GB' on a
    node's page already means GiB, so guessing would silently be off by 7%.
    """
    if isinstance(text, bool):
        raise SizeError(f"{what}: {text!r} is not a size")
    if isinstance(text, int):
        value = text
    else:
        raw = str(text)
        match = _SIZE_RE.match(raw)
        if not match:
            if raw.strip().startswith("-"):
                raise SizeError(f"{what}: {raw!r} is negative; sizes are zero or more")
            raise SizeError(f"{what}: {raw!r} is not a size; write e.g. 4GiB, 931.5GiB, 512MiB or a byte count")
        number, unit = match.group(1), match.group(2).lower()
        if unit in _DECIMAL_UNITS:
            raise SizeError(
                f"{what}: {raw!r} uses a decimal unit; ZOS counts 1024-based units, write {number}GiB or {number}MiB"
            )
        if unit not in _UNITS:
            raise SizeError(f"{what}: unknown unit {match.group(2)!r} in {raw!r}; use B, KiB, MiB, GiB or TiB")
        try:
            exact = Decimal(number) * _UNITS[unit]
        except InvalidOperation:
            raise SizeError(f"{what}: {raw!r} is not a number") from None
        value = int(exact)  # whole bytes, rounded down
    if value < 0:
        raise SizeError(f"{what}: {value} is negative; sizes are zero or more")
    if value == 0 and not allow_zero:
        raise SizeError(f"{what}: must be more than zero")
    if value > 1024 * TiB:
        raise SizeError(f"{what}: {format_size(value)} is absurd for one node (over 1 PiB)")
    return value


def format_size(n: int) -> str:
    """'931.5 GiB', '500 MiB', '7 B': the largest unit that keeps the number >= 1."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            text = f"{n / size:.2f}".rstrip("0").rstrip(".")
            return f"{sign}{text} {unit}"
    return f"{sign}{n} B"


def gib(n: int) -> float:
    return n / GiB


# --- resources ------------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    """Capacity in ZOS's own terms: cru in cores, mru/sru/hru in bytes."""

    cru: int = 0
    mru: int = 0
    sru: int = 0
    hru: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cru + other.cru, self.mru + other.mru, self.sru + other.sru, self.hru + other.hru)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cru - other.cru, self.mru - other.mru, self.sru - other.sru, self.hru - other.hru)

    def times(self, k: int) -> Resources:
        return Resources(self.cru * k, self.mru * k, self.sru * k, self.hru * k)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def total_of(cls, items: Iterable[Resources]) -> Resources:
        result = cls()
        for item in items:
            result = result + item
        return result


# --- policy ---------------------------------------------------------------------------

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
        problems = []
        if self.slice_mru < MIN_VM_MRU:
            problems.append(f"slice memory {format_size(self.slice_mru)} is below ZOS's minimum of 250 MiB")
        if self.slice_cru < 1:
            problems.append("vCPUs per slice must be at least 1")
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


# --- where ZOS puts each disk (storaged) ---------------------------------------------------
#
# ZOS does not place disks first fit in pool order (zos pkg/storage/storage.go findCandidates,
# vdisk.go vDiskFindCandidate; docs/domain.md "Where ZOS puts each disk"):
# - at boot zos-cache goes to the SSD pool with the most space; pools holding nothing stay unmounted;
# - a disk goes to the mounted pool with the most space left after it (`used + size <= size`);
#   only when no mounted pool can hold it, to the first unmounted pool in device order that can;
# - a VM's data disk (a vdisk file) prefers, among those candidates, a pool already holding vdisks;
#   its rootfs is a volume and takes the first candidate.
# The device order is reported nowhere, so a verdict that must hold on the real node holds
# under every order of its pools.


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


def _copy_pools(state: Sequence[PoolState]) -> list[PoolState]:
    return [PoolState(p.size, p.used, p.mounted, p.vdisks) for p in state]


def pools_after(order: Sequence[int], cache: int, vms: Sequence[tuple[int, int]]) -> list[PoolState]:
    """The pools of one device order after boot and these VMs' (data, rootfs) disks, placed in turn.

    A VM that would not place is skipped (ZOS refused it, it holds nothing).
    """
    state = pools_at_boot(order, cache)
    for data, rootfs in vms:
        trial = _copy_pools(state)
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


# --- carving --------------------------------------------------------------------------


@dataclass(frozen=True)
class SliceSize:
    cru: int
    mru: int
    sru: int  # the data disk; the rootfs comes on top
    rootfs: int = 0

    @property
    def resources(self) -> Resources:
        return Resources(cru=self.cru, mru=self.mru, sru=self.sru)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class Carve:
    policy: str
    slices: int  # total slices the node holds: occupied plus new
    new_slices: int  # free slices to create
    occupied: int
    slice: SliceSize
    limited_by: str  # "mru", "sru", or "none" (nothing to carve into at all)
    reserve: Resources
    unallocated: Resources
    # Occupied slices alone need more than the node has: keep them, add nothing.
    overcommitted: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        data = asdict(self)
        data["notes"] = list(self.notes)
        return data


@dataclass(frozen=True)
class Observed:
    """What ZOS's own refusals taught about one node (the evidence is kept beside the node).

    `hidden_mru_per_vm`: memory each running VM really uses beyond its size, seen only in a
    memory refusal's `usable` figure. `pool_room_below`: a disk of this size was refused where
    the accounting had room, so no pool had that much room then (valid until something is freed).
    """

    hidden_mru_per_vm: int = 0
    pool_room_below: int | None = None

    def __post_init__(self) -> None:
        if self.hidden_mru_per_vm < 0:
            raise CapacityError("hidden memory per VM must not be negative")
        if self.pool_room_below is not None and self.pool_room_below < 1:
            raise CapacityError("a refused disk size must be above zero")

    @property
    def anything(self) -> bool:
        return bool(self.hidden_mru_per_vm) or self.pool_room_below is not None


NOTHING_OBSERVED = Observed()


def hidden_use_per_vm(*, total_mru: int, usable_mru: int, accounted_mru: int, running: int) -> int:
    """The hidden memory per running VM that a memory refusal reveals (0 when it reveals none).

    ZOS refuses with "... out of usable Y bytes", Y = total - max(accounted, really used); so
    total - Y above the accounted use (workloads + reserve) is memory the host really used,
    spread over the VMs running then. Rounded up: the precheck must never say yes wrongly.
    """
    hidden = (total_mru - usable_mru) - accounted_mru
    if hidden <= 0 or running <= 0:
        return 0
    return -(-hidden // running)


@dataclass(frozen=True)
class Lesson:
    """What one ZOS refusal teaches: hidden memory per running VM, or a disk no pool could hold."""

    kind: str  # "memory" or "disk"
    hidden_mru_per_vm: int = 0
    disk_size: int | None = None
    used_sru: int | None = None  # SSD in use when the disk was refused: the bound holds while no less is used


def refusal_lesson(
    *,
    cause: str,
    needed: int | None,
    usable: int | None,
    total: Resources,
    used: Resources,
    vm_count: int,
    data_disk: int,
    rootfs: int,
) -> Lesson | None:
    """What a refusal teaches, from its cause ("memory" or "disk"), ZOS's figures and the accounted
    reading taken just before; None when the accounting alone explains it."""
    if cause == "memory" and usable is not None:
        hidden = hidden_use_per_vm(
            total_mru=total.mru, usable_mru=usable, accounted_mru=used.mru, running=max(vm_count, 1)
        )
        return Lesson("memory", hidden_mru_per_vm=hidden) if hidden > 0 else None
    if cause == "disk":
        if data_disk + rootfs > total.sru - used.sru:
            return None  # the accounting had no room either: nothing about the pools
        # "failed to find a candidate to host vdisk of size N" names the disk; a rootfs refusal does not.
        return Lesson("disk", disk_size=max(needed or rootfs, 1), used_sru=used.sru)
    return None


def observed_after(observed: Observed, lesson: Lesson) -> Observed:
    """The node's lessons with one more: the largest hidden use seen, the latest disk bound."""
    if lesson.kind == "memory":
        return replace(observed, hidden_mru_per_vm=max(observed.hidden_mru_per_vm, lesson.hidden_mru_per_vm))
    return replace(observed, pool_room_below=lesson.disk_size)


def vms_by_memory(free_mru: int, per_vm_mru: int, *, hidden_per_vm: int = 0, running: int = 0) -> int:
    """How many more VMs of `per_vm_mru` ZOS accepts one after another with `free_mru` unaccounted.

    ZOS refuses a VM when its memory exceeds total - max(accounted, really used); really used
    includes `hidden_per_vm` for each VM already running, but not for the VM being checked.
    So VM k (0-based) needs per_vm + (running + k) * hidden + k * per_vm <= free.
    """
    if per_vm_mru <= 0:
        return 0
    room = free_mru - running * hidden_per_vm
    if room < per_vm_mru:
        return 0
    return (room + hidden_per_vm) // (per_vm_mru + hidden_per_vm)


def vm_disks(policy: Policy, cru: int, mru: int, sru: int) -> tuple[int, int]:
    """The (data disk, rootfs) a VM of this size allocates in the pools, by this policy's reckoning."""
    return sru + policy.overhead_sru_per_vm, policy.rootfs_size(cru, mru)


def carve(
    total: Resources,
    policy: Policy,
    *,
    occupied: Sequence[Resources] = (),
    pools: Sequence[int] | None = None,
    observed: Observed = NOTHING_OBSERVED,
) -> Carve:
    """Carve a node into slices of `policy.slice_mru`, counting occupied slices first.

    `occupied` holds the sizes (cru, mru, data sru) of slices that are rented or deployed;
    they stay as they are and their real charge comes off the node before new slices
    are counted. `pools` are the node's SSD pool sizes when known: the new slices must then
    deploy in full under ZOS's placement in every device order of the pools. `observed` is
    what the node's refusals taught: hidden memory per VM, a bound on its largest free pool.
    """
    if total.mru < 0 or total.sru < 0 or total.cru < 0:
        raise CapacityError("node capacity must not be negative")
    if policy.arithmetic == "whole-gib":
        return _carve_whole_gib(total, policy, occupied)

    reserve = policy.reserve(total)
    occupied_charge = Resources.total_of(policy.vm_charge(o.cru, o.mru, o.sru) for o in occupied)
    budget = total - reserve - occupied_charge
    rootfs = policy.rootfs_size(policy.slice_cru, policy.slice_mru)
    per_vm_mru = policy.slice_mru + policy.overhead_mru_per_vm
    per_vm_extra = rootfs + policy.overhead_sru_per_vm
    per_vm_min_sru = policy.min_slice_sru + per_vm_extra
    hidden = observed.hidden_mru_per_vm
    sru_budget = budget.sru
    if observed.pool_room_below is not None:
        # A disk this size was refused with the accounting's room: assume what is left lies in
        # one pool smaller than it, so every new disk must fit there.
        sru_budget = min(sru_budget, observed.pool_room_below - 1)

    by_mru = vms_by_memory(budget.mru, per_vm_mru, hidden_per_vm=hidden, running=len(occupied))
    by_sru = max(sru_budget, 0) // per_vm_min_sru if per_vm_min_sru else by_mru
    occupied_disks = [vm_disks(policy, o.cru, o.mru, o.sru) for o in occupied]
    if pools and per_vm_min_sru:
        by_sru = min(
            by_sru,
            vms_placed_in_every_order(
                pools,
                reserve.sru,
                occupied_disks,
                (policy.min_slice_sru + policy.overhead_sru_per_vm, rootfs),
                limit=min(by_mru, by_sru),
            ),
        )
    count = min(by_mru, by_sru)
    limited_by = "mru" if by_mru <= by_sru else "sru"

    notes = []
    overcommitted = budget.mru < 0 or budget.sru < 0
    if overcommitted:
        notes.append(
            "the rented and deployed slices already need more than the node can host; "
            "they are kept and no free slice is added"
        )
        count = 0
    data_sru = 0
    if count > 0:
        data_sru = _round_down(max(sru_budget, 0) // count - per_vm_extra, policy.sru_step)
        if pools:
            data_sru = _largest_deployable_disk(pools, reserve.sru, occupied_disks, count, data_sru, rootfs, policy)
            if len(pools) > 1 and occupied:
                # On a busy node with several pools, where ZOS put each disk depends on the order of
                # past deploys and releases, which no reading tells. A disk no larger than the ones
                # already there fits the hole any release leaves, so new ones are not made larger.
                data_sru = max(min(data_sru, _round_down(min(o.sru for o in occupied), policy.sru_step)), 0)
    elif not overcommitted and not occupied:
        notes.append(f"the node cannot hold even one slice: short of {RESOURCE_WORDS[limited_by]}")
    if hidden:
        notes.append(f"counts {format_size(hidden)} of hidden memory per running VM, learnt from ZOS's refusals")
    if observed.pool_room_below is not None:
        notes.append(f"no pool had room for a {format_size(observed.pool_room_below)} disk when ZOS last refused one")

    slice_size = SliceSize(cru=policy.slice_cru, mru=policy.slice_mru, sru=data_sru, rootfs=rootfs)
    used_by_new = policy.vm_charge(slice_size.cru, slice_size.mru, slice_size.sru).times(count)
    unallocated = total - reserve - occupied_charge - used_by_new
    unallocated = Resources(
        cru=max(unallocated.cru, 0), mru=max(unallocated.mru, 0), sru=max(unallocated.sru, 0), hru=total.hru
    )
    return Carve(
        policy=policy.name,
        slices=len(occupied) + count,
        new_slices=count,
        occupied=len(occupied),
        slice=slice_size,
        limited_by=limited_by if (count or not occupied) else "mru" if budget.mru < per_vm_mru else "sru",
        reserve=reserve,
        unallocated=unallocated,
        overcommitted=overcommitted,
        notes=tuple(notes),
    )


@lru_cache(maxsize=8192)
def _carve_memo(
    total: Resources, policy: Policy, occupied: tuple[Resources, ...], pools: tuple[int, ...] | None, observed: Observed
) -> Carve:
    return carve(total, policy, occupied=occupied, pools=pools, observed=observed)


def carve_memoised(
    total: Resources,
    policy: Policy,
    *,
    occupied: Sequence[Resources] = (),
    pools: Sequence[int] | None = None,
    observed: Observed = NOTHING_OBSERVED,
) -> Carve:
    """carve, remembered: a fleet has many nodes of the same size and the carve is pure.

    Policies and resources are frozen values, so a changed policy is a different key. A carve
    with pools tries every device order, so this is what re-register plans and the stored
    figures use: the plan's carve is the one the figures find again.
    """
    return _carve_memo(total, policy, tuple(occupied), tuple(pools) if pools else None, observed)


def _carve_whole_gib(total: Resources, policy: Policy, occupied: Sequence[Resources]) -> Carve:
    """The legacy bootstrap_nodes carve: usable = total_GiB - 1; count = usable // 4; disk = total_GiB // count."""
    total_mru_gib = total.mru // GiB
    total_sru_gib = total.sru // GiB
    reserve_gib = policy.reserve_mru_floor // GiB
    slice_gib = policy.slice_mru // GiB
    count_all = max(total_mru_gib - reserve_gib, 0) // slice_gib if slice_gib else 0
    count = max(count_all - len(occupied), 0)
    disk_gib = total_sru_gib // count_all if count_all else 0
    slice_size = SliceSize(cru=policy.slice_cru, mru=slice_gib * GiB, sru=disk_gib * GiB, rootfs=0)
    reserve = Resources(mru=reserve_gib * GiB)
    allocated = slice_size.resources.times(count_all)
    unallocated = total - reserve - allocated
    return Carve(
        policy=policy.name,
        slices=len(occupied) + count,
        new_slices=count,
        occupied=len(occupied),
        slice=slice_size,
        limited_by="mru",
        reserve=reserve,
        unallocated=Resources(
            cru=max(unallocated.cru, 0), mru=max(unallocated.mru, 0), sru=max(unallocated.sru, 0), hru=total.hru
        ),
        notes=("legacy carve: ignores the ZOS reserve and the rootfs; not every slice can be deployed",),
    )


def _round_down(value: int, step: int) -> int:
    return max(value, 0) // step * step


def _largest_deployable_disk(
    pools: Sequence[int],
    cache: int,
    occupied: Sequence[tuple[int, int]],
    count: int,
    start: int,
    rootfs: int,
    policy: Policy,
) -> int:
    """The largest data disk (a multiple of sru_step, at least min_slice_sru) such that `count`
    VMs deploy one after another in every device order of the pools."""

    def deploys(data: int) -> bool:
        disks = (data + policy.overhead_sru_per_vm, rootfs)
        return vms_placed_in_every_order(pools, cache, occupied, disks, limit=count) >= count

    hi = max(start, policy.min_slice_sru)
    if deploys(hi):
        return hi
    lo = policy.min_slice_sru  # deploys: the count was taken at this size
    while hi - lo > policy.sru_step:
        mid = _round_down((lo + hi) // 2, policy.sru_step)
        if mid <= lo:
            break
        if deploys(mid):
            lo = mid
        else:
            hi = mid
    return lo


def deployable_slices(
    total: Resources, policy: Policy, *, pools: Sequence[int] | None = None, observed: Observed = NOTHING_OBSERVED
) -> int:
    return carve(total, policy, pools=pools, observed=observed).slices


# --- fitting one slice onto a live node -------------------------------------------------


@dataclass(frozen=True)
class Shortfall:
    resource: str
    needed: int
    available: int

    @property
    def shortfall(self) -> int:
        return self.needed - self.available

    @property
    def words(self) -> str:
        return (
            f"{RESOURCE_WORDS[self.resource]}: needs {format_size(self.needed)}, "
            f"{format_size(max(self.available, 0))} available, short by {format_size(self.shortfall)}"
        )

    def as_dict(self) -> dict:
        return {
            "resource": self.resource,
            "needed": self.needed,
            "available": self.available,
            "shortfall": self.shortfall,
            "words": self.words,
        }


@dataclass(frozen=True)
class Verdict:
    fits: bool
    needed: Resources
    available: Resources
    shortfalls: tuple[Shortfall, ...] = ()

    @property
    def words(self) -> str:
        if self.fits:
            return (
                f"fits: needs {format_size(self.needed.mru)} memory and {format_size(self.needed.sru)} disk; "
                f"{format_size(self.available.mru)} and {format_size(self.available.sru)} available"
            )
        return "does not fit: " + "; ".join(s.words for s in self.shortfalls)

    def as_dict(self) -> dict:
        return {
            "fits": self.fits,
            "needed": self.needed.as_dict(),
            "available": self.available.as_dict(),
            "shortfalls": [s.as_dict() for s in self.shortfalls],
            "words": self.words,
        }


@dataclass(frozen=True)
class LiveNode:
    """What the precheck knows of a node beyond the proxy's totals: its pools, the VMs it holds
    (their (data, rootfs) disks, in the order they were deployed) and what refusals taught."""

    pools: tuple[int, ...] | None = None
    occupied_disks: tuple[tuple[int, int], ...] = ()
    running: int = 0  # VMs running now: each may use hidden memory
    observed: Observed = NOTHING_OBSERVED


NOTHING_KNOWN = LiveNode()


def live_node(
    *, policy: Policy, pools: Sequence[int] | None, occupied: Sequence[Resources], observed: Observed = NOTHING_OBSERVED
) -> LiveNode:
    """The LiveNode of a node holding `occupied` VMs (in the order they were deployed)."""
    return LiveNode(
        pools=tuple(pools) if pools else None,
        occupied_disks=tuple(vm_disks(policy, o.cru, o.mru, o.sru) for o in occupied),
        running=len(occupied),
        observed=observed,
    )


def observed_now(
    *, hidden_mru_per_vm: int, pool_room_below: int | None, bound_used_sru: int | None, used_sru: int | None
) -> Observed:
    """What still holds of a node's lessons: a refused disk size bounds the pools only while
    nothing has been freed since (the used SSD is at least what it was at the refusal)."""
    if pool_room_below is not None and None not in (bound_used_sru, used_sru) and used_sru < bound_used_sru:
        pool_room_below = None
    return Observed(hidden_mru_per_vm=hidden_mru_per_vm, pool_room_below=pool_room_below)


class _Placement:
    """The live node as slices are placed on it one after another: accounting, hidden memory,
    the refused-disk bound and, when the pools are known, every device order's pools."""

    def __init__(self, total: Resources, used: Resources, policy: Policy, live: LiveNode):
        self.total, self.used, self.policy, self.live = total, used, policy, live
        self.running = live.running
        self.new_disks = 0
        self.orders = (
            [pools_after(order, policy.reserve_sru, live.occupied_disks) for order in device_orders(live.pools)]
            if live.pools
            else None
        )

    def verdict(self, size: SliceSize | Resources) -> Verdict:
        policy, hidden = self.policy, self.live.observed.hidden_mru_per_vm
        need = policy.vm_charge(size.cru, size.mru, size.sru)
        available = Resources(
            cru=self.total.cru - self.used.cru,
            mru=self.total.mru - self.used.mru - self.running * hidden,
            sru=self.total.sru - self.used.sru,
        )
        shortfalls = []
        if size.mru < MIN_VM_MRU:
            shortfalls.append(Shortfall("mru", MIN_VM_MRU, size.mru))
        for resource in ("mru", "sru"):
            if getattr(need, resource) > getattr(available, resource):
                shortfalls.append(Shortfall(resource, getattr(need, resource), getattr(available, resource)))
        data, rootfs = vm_disks(policy, size.cru, size.mru, size.sru)
        if not shortfalls:
            bound = self.live.observed.pool_room_below
            if bound is not None and self.new_disks + data + rootfs >= bound:
                shortfalls.append(Shortfall("pool", self.new_disks + data + rootfs, bound - 1))
            elif self.orders is not None:
                trials = [_copy_pools(state) for state in self.orders]
                if any(place_vm_disks(trial, data, rootfs) for trial in trials):
                    room = min(max((p.room for p in state), default=0) for state in self.orders)
                    shortfalls.append(Shortfall("pool", data, room))
                else:
                    self._trials = trials
        return Verdict(fits=not shortfalls, needed=need, available=available, shortfalls=tuple(shortfalls))

    def take(self, verdict: Verdict, size: SliceSize | Resources) -> None:
        """Count a slice that fits as placed, so the next one sees it."""
        self.used = self.used + verdict.needed
        self.running += 1
        self.new_disks += sum(vm_disks(self.policy, size.cru, size.mru, size.sru))
        if self.orders is not None:
            self.orders = self._trials


# The grid reports a node down (gone) or standby (switched off by its farm's power manager, woken
# when needed): either way it places nothing until it is up. The one place this rule lives.
AWAY_STATUSES = ("down", "standby")


def node_is_away(status: str) -> bool:
    """The node places nothing now, whatever its numbers: it is down or on standby."""
    return status in AWAY_STATUSES


def away_sentence(status: str, *, free_slices: int, node_id: int | None = None) -> str:
    """What a precheck says of a node that is away, in ONE line (not one verdict per slice)."""
    node = f"node {node_id}" if node_id is not None else "the node"
    if free_slices == 1:
        slices = "its one free slice cannot"
    else:
        slices = f"none of its {free_slices} free slices can"
    if status == "standby":
        return f"{node} is on standby (switched off by its farm's power manager): {slices} be placed until it is woken"
    return f"{node} is {status}: {slices} be placed until it is up again"


def away_badge(status: str) -> str:
    """The short form for a job's state badge: the precheck ran, but the node is not fine."""
    if status == "standby":
        return "node on standby: nothing placeable until woken"
    return f"node {status}: nothing placeable until it is up"


@dataclass(frozen=True)
class AwayVerdict(Verdict):
    """A slice cannot be placed on a node that is down or on standby; the numbers are what it would need."""

    status: str = "down"

    @property
    def words(self) -> str:
        return f"does not fit: the node is {self.status}; nothing can be placed until it is up again"


def fits(
    slice_size: SliceSize | Resources,
    total: Resources,
    used: Resources,
    policy: Policy,
    *,
    live: LiveNode = NOTHING_KNOWN,
    status: str = "up",
) -> Verdict:
    """Can one more slice be placed on a node with this live total and used capacity?

    `used` is as the Grid Proxy reports it: the node's own reserve is already inside, hidden
    memory use is not (ZOS tells it only in refusals; `live.observed` has what was learnt).
    With the pools known, the slice's disks must place in every device order.
    CPU is not checked: ZOS over-provisions cores. A node that is away (`status`) fits nothing.
    """
    verdict = _Placement(total, used, policy, live).verdict(slice_size)
    if node_is_away(status):
        return AwayVerdict(fits=False, needed=verdict.needed, available=verdict.available, status=status)
    return verdict


def placeable_count(
    slice_size: SliceSize | Resources,
    total: Resources,
    used: Resources,
    policy: Policy,
    *,
    live: LiveNode = NOTHING_KNOWN,
    limit: int = 10_000,
) -> int:
    """How many more slices of this size fit on the live node, one after another."""
    placement = _Placement(total, used, policy, live)
    count = 0
    while count < limit:
        verdict = placement.verdict(slice_size)
        if not verdict.fits:
            break
        placement.take(verdict, slice_size)
        count += 1
    return count


def with_overrides(policy: Policy, **changes) -> Policy:
    """A copy of `policy` with some parameters changed (validated like any policy)."""
    return replace(policy, **changes)


# --- precheck: which free slices can really be placed now --------------------------------

PHANTOM_REASONS = {
    "down": "node down",
    "standby": "node on standby (can be woken)",
    "memory": "memory",
    "disk": "disk (total)",
    "pool": "disk (no pool holds it)",
}


@dataclass(frozen=True)
class SliceVerdict:
    index: int
    verdict: Verdict

    @property
    def phantom(self) -> bool:
        return not self.verdict.fits

    @property
    def reason(self) -> str:
        """Why it is phantom, one of PHANTOM_REASONS ("" when it fits)."""
        if self.verdict.fits:
            return ""
        if isinstance(self.verdict, AwayVerdict):
            return self.verdict.status
        resource = self.verdict.shortfalls[0].resource if self.verdict.shortfalls else "mru"
        return {"mru": "memory", "sru": "disk", "pool": "pool"}.get(resource, "memory")


@dataclass(frozen=True)
class Precheck:
    free_slices: int
    placeable_now: int
    phantom_slices: tuple[int, ...]  # slice indices
    verdicts: tuple[SliceVerdict, ...]

    @property
    def phantom_by_reason(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for v in self.verdicts:
            if v.phantom:
                counts[v.reason] = counts.get(v.reason, 0) + 1
        return counts

    def as_dict(self) -> dict:
        return {
            "free_slices": self.free_slices,
            "placeable_now": self.placeable_now,
            "phantom_slices": list(self.phantom_slices),
            "phantom_by_reason": self.phantom_by_reason,
            "verdicts": [{"slice": v.index, "reason": v.reason, **v.verdict.as_dict()} for v in self.verdicts],
        }


def precheck(
    free: Sequence[tuple[int, SliceSize | Resources]],
    total: Resources,
    used: Resources,
    policy: Policy,
    *,
    live: LiveNode = NOTHING_KNOWN,
    status: str = "up",
) -> Precheck:
    """Place the free slices one after another (by index) on the live node.

    Each slice that fits is counted against the node before the next is tried, so the
    verdicts say what would happen if every free slice were rented now. The ones that do
    not fit are phantom: the catalog offers them, ZOS would refuse them. On a node that is
    away (`status` down or standby) every free slice is phantom, for that reason.
    """
    verdicts = []
    placement = _Placement(total, used, policy, live)
    away = node_is_away(status)
    for index, size in sorted(free, key=lambda item: item[0]):
        verdict = placement.verdict(size)
        if away:
            verdict = AwayVerdict(fits=False, needed=verdict.needed, available=verdict.available, status=status)
        elif verdict.fits:
            placement.take(verdict, size)
        verdicts.append(SliceVerdict(index=index, verdict=verdict))
    phantom = tuple(v.index for v in verdicts if v.phantom)
    return Precheck(
        free_slices=len(verdicts),
        placeable_now=len(verdicts) - len(phantom),
        phantom_slices=phantom,
        verdicts=tuple(verdicts),
    )
