"""The capacity model: how many fixed-size VM slices a ZOS node can really host.

Pure arithmetic with no Django import; integer bytes throughout (1024-based GiB, as
ZOS and the Grid Proxy count). Everything else in the product asks this module.
The rules and their sources are in docs/domain.md (ZOS accounting).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Iterable, Sequence

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

# ZOS zmachine rules (pkg/gridtypes/zos/zmachine.go).
ROOTFS_SMALL = 500 * MiB
ROOTFS_LARGE = 2 * GiB
MIN_VM_MRU = 250 * MiB

RESOURCE_WORDS = {"cru": "CPU", "mru": "memory", "sru": "SSD disk", "hru": "HDD disk"}


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


def carve(
    total: Resources,
    policy: Policy,
    *,
    occupied: Sequence[Resources] = (),
    pools: Sequence[int] | None = None,
) -> Carve:
    """Carve a node into slices of `policy.slice_mru`, counting occupied slices first.

    `occupied` holds the sizes (cru, mru, data sru) of slices that are rented or deployed;
    they stay as they are and their real charge comes off the node before new slices
    are counted. `pools` are the node's SSD pool sizes when known: ZOS places each disk
    in one pool, so two 465 GiB SSDs cannot hold one 500 GiB disk.
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
    per_vm_min_sru = policy.min_slice_sru + rootfs + policy.overhead_sru_per_vm

    by_mru = max(budget.mru, 0) // per_vm_mru
    by_sru = max(budget.sru, 0) // per_vm_min_sru if per_vm_min_sru else by_mru
    pool_free = _pool_free(pools, reserve.sru, occupied, policy) if pools else None
    if pool_free is not None and per_vm_min_sru:
        # Count the way ZOS places disks (each one first fit, data disk then rootfs), not
        # whole VMs per pool: a rootfs can land in another pool's leftover.
        per_vm_extra = rootfs + policy.overhead_sru_per_vm
        by_sru = min(by_sru, _first_fit_count(pool_free, policy.min_slice_sru, per_vm_extra, limit=min(by_mru, by_sru)))
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
        per_vm_extra = rootfs + policy.overhead_sru_per_vm
        data_sru = _round_down(budget.sru // count - per_vm_extra, policy.sru_step)
        if pool_free is not None:
            data_sru = _largest_packable(pool_free, count, per_vm_extra, data_sru, policy)
    elif not overcommitted and not occupied:
        notes.append(f"the node cannot hold even one slice: short of {RESOURCE_WORDS[limited_by]}")

    slice_size = SliceSize(cru=policy.slice_cru, mru=policy.slice_mru, sru=data_sru, rootfs=rootfs)
    used_by_new = policy.vm_charge(slice_size.cru, slice_size.mru, slice_size.sru).times(count)
    unallocated = total - reserve - occupied_charge - used_by_new
    unallocated = Resources(cru=max(unallocated.cru, 0), mru=max(unallocated.mru, 0), sru=max(unallocated.sru, 0), hru=total.hru)
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
        unallocated=Resources(cru=max(unallocated.cru, 0), mru=max(unallocated.mru, 0), sru=max(unallocated.sru, 0), hru=total.hru),
        notes=("legacy carve: ignores the ZOS reserve and the rootfs; not every slice can be deployed",),
    )


def _round_down(value: int, step: int) -> int:
    return max(value, 0) // step * step


def _pool_free(pools: Sequence[int], reserve_sru: int, occupied: Sequence[Resources], policy: Policy) -> list[int]:
    """Free bytes per pool after zos-cache (on the first pool) and the occupied disks (first fit)."""
    free = list(pools)
    if free:
        free[0] -= reserve_sru
    for o in occupied:
        for size in (o.sru + policy.overhead_sru_per_vm, policy.rootfs_size(o.cru, o.mru)):
            _place_first_fit(free, size)
    return free


def _place_first_fit(free: list[int], size: int) -> bool:
    if size <= 0:
        return True
    for i, room in enumerate(free):
        if room >= size:
            free[i] = room - size
            return True
    return False


def _first_fit_count(pool_free: Sequence[int], data_sru: int, rootfs: int, *, limit: int) -> int:
    """How many VMs of this data disk ZOS would place one after another, up to `limit`."""
    free = list(pool_free)
    placed = 0
    while placed < limit:
        if not _place_first_fit(free, data_sru) or not _place_first_fit(free, rootfs):
            break
        placed += 1
    return placed


def _largest_packable(pool_free: Sequence[int], count: int, per_vm_extra: int, start: int, policy: Policy) -> int:
    """The largest data disk (a multiple of sru_step) such that `count` VMs pack into the pools."""
    lo, hi = policy.min_slice_sru, start
    if _packs(pool_free, count, hi, per_vm_extra):
        return hi
    lo = _round_down(lo, policy.sru_step)
    while hi - lo > policy.sru_step:
        mid = _round_down((lo + hi) // 2, policy.sru_step)
        if mid <= lo:
            break
        if _packs(pool_free, count, mid, per_vm_extra):
            lo = mid
        else:
            hi = mid
    return lo


def _packs(pool_free: Sequence[int], count: int, data_sru: int, rootfs: int) -> bool:
    # The simulator and ZOS place each disk separately; data disk first, then the rootfs.
    free = list(pool_free)
    for _ in range(count):
        if not _place_first_fit(free, data_sru) or not _place_first_fit(free, rootfs):
            return False
    return True


def deployable_slices(total: Resources, policy: Policy, *, pools: Sequence[int] | None = None) -> int:
    return carve(total, policy, pools=pools).slices


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


def fits(slice_size: SliceSize | Resources, total: Resources, used: Resources, policy: Policy) -> Verdict:
    """Can one more slice be placed on a node with this live total and used capacity?

    `used` is as the Grid Proxy reports it: the node's own reserve is already inside.
    CPU is not checked: ZOS over-provisions cores.
    """
    need = policy.vm_charge(slice_size.cru, slice_size.mru, slice_size.sru)
    available = Resources(cru=total.cru - used.cru, mru=total.mru - used.mru, sru=total.sru - used.sru)
    shortfalls = []
    if slice_size.mru < MIN_VM_MRU:
        shortfalls.append(Shortfall("mru", MIN_VM_MRU, slice_size.mru))
    for resource in ("mru", "sru"):
        if getattr(need, resource) > getattr(available, resource):
            shortfalls.append(Shortfall(resource, getattr(need, resource), getattr(available, resource)))
    return Verdict(fits=not shortfalls, needed=need, available=available, shortfalls=tuple(shortfalls))


def placeable_count(slice_size: SliceSize | Resources, total: Resources, used: Resources, policy: Policy) -> int:
    """How many more slices of this size fit on the live node, counting memory and disk."""
    need = policy.vm_charge(slice_size.cru, slice_size.mru, slice_size.sru)
    counts = []
    for resource in ("mru", "sru"):
        needed = getattr(need, resource)
        room = getattr(total, resource) - getattr(used, resource)
        counts.append(max(room, 0) // needed if needed else math.inf)
    best = min(counts)
    return 0 if best == math.inf else int(best)


def with_overrides(policy: Policy, **changes) -> Policy:
    """A copy of `policy` with some parameters changed (validated like any policy)."""
    return replace(policy, **changes)


# --- precheck: which free slices can really be placed now --------------------------------


@dataclass(frozen=True)
class SliceVerdict:
    index: int
    verdict: Verdict

    @property
    def phantom(self) -> bool:
        return not self.verdict.fits


@dataclass(frozen=True)
class Precheck:
    free_slices: int
    placeable_now: int
    phantom_slices: tuple[int, ...]  # slice indices
    verdicts: tuple[SliceVerdict, ...]

    def as_dict(self) -> dict:
        return {
            "free_slices": self.free_slices,
            "placeable_now": self.placeable_now,
            "phantom_slices": list(self.phantom_slices),
            "verdicts": [{"slice": v.index, **v.verdict.as_dict()} for v in self.verdicts],
        }


def precheck(
    free: Sequence[tuple[int, SliceSize | Resources]], total: Resources, used: Resources, policy: Policy
) -> Precheck:
    """Place the free slices one after another (by index) on the live node.

    Each slice that fits is counted against the node before the next is tried, so the
    verdicts say what would happen if every free slice were rented now. The ones that do
    not fit are phantom: the catalog offers them, ZOS would refuse them.
    """
    verdicts = []
    placed = Resources()
    for index, size in sorted(free, key=lambda item: item[0]):
        verdict = fits(size, total, used + placed, policy)
        if verdict.fits:
            placed = placed + verdict.needed
        verdicts.append(SliceVerdict(index=index, verdict=verdict))
    phantom = tuple(v.index for v in verdicts if v.phantom)
    return Precheck(
        free_slices=len(verdicts),
        placeable_now=len(verdicts) - len(phantom),
        phantom_slices=phantom,
        verdicts=tuple(verdicts),
    )
