"""The carve: how many slices of a policy's size a node can host at once, and their disk.

The node's reserve and the occupied slices' real charge come off first; the new slices are
then counted by memory (ZOS's memory check, with what refusals taught: `lessons`) and by disk,
and must deploy in full under storaged's placement in every device order of the node's SSD
pools (`placement`): the reported pools, or when nobody reported them every plausible layout of
the SSD total (`layouts`), so a catalog never offers what ZOS will not take. The legacy bootstrap_nodes carve is kept
exactly, for comparison (`Policy.arithmetic == "whole-gib"`). The rules and their sources are
in docs/domain.md (ZOS accounting); what a carve says in words comes from `words`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import NamedTuple

from dashboard.capacity.layouts import narrowed, plausible_layouts
from dashboard.capacity.lessons import NOTHING_OBSERVED, Observed, vms_by_memory
from dashboard.capacity.placement import vms_placed_in_every_order
from dashboard.capacity.policy import Policy, cache_keep, cache_now, vm_disks
from dashboard.capacity.sizes import CapacityError, GiB, Resources
from dashboard.capacity.vcpus import vcpus_refused, zos_cpu_refusal, zos_vcpu_limit
from dashboard.capacity.words import (
    LEGACY_CARVE_NOTE,
    OVERCOMMITTED_NOTE,
    below_reserve_note,
    hidden_memory_note,
    not_one_slice_note,
    refused_disk_note,
    unknown_pools_note,
    vcpu_note,
)


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
    limited_by: str  # "mru", "sru", "cru" (each slice has more vCPUs than ZOS lets one VM have), or "none"
    reserve: Resources
    unallocated: Resources
    # Occupied slices alone need more than the node has: keep them, add nothing.
    overcommitted: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Carved without a pool report: sized for every plausible layout (capacity.layouts), giving up
    # `disk_given_up` bytes of data disk (over the new slices) against a carve on the total alone.
    pools_known: bool = True
    disk_given_up: int = 0

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
    observed: Observed = NOTHING_OBSERVED,
    cache: int | None = None,
    light: bool = False,
) -> Carve:
    """Carve a node into slices of `policy.slice_mru`, counting occupied slices first.

    `occupied`: the sizes (cru, mru, data sru) of rented or deployed slices, kept, their real charge off
    the node first. `pools`: the SSD pool sizes when known (the new slices deploy in full in every device
    order of them), else None: every plausible layout of the SSD total (`pool_layouts`; with a ZOS-light
    node's partitions when `light`). `observed`: what the node's refusals taught. `cache`: the zos-cache's
    quota a pool report told (`cache_reported`): with the pools known, its pool keeps it and its next
    step (`cache_keep`) instead of the proxy's fixed `reserve_sru`.
    """
    if total.mru < 0 or total.sru < 0 or total.cru < 0:
        raise CapacityError("node capacity must not be negative")
    if policy.arithmetic == "whole-gib":
        return _carve_whole_gib(total, policy, occupied)

    budget = _budget(total, policy, occupied, pools=pools, cache=cache, observed=observed)
    occupied_disks = [vm_disks(policy, o.cru, o.mru, o.sru) for o in occupied]
    layouts = pool_layouts(
        total.sru, pools, cache=budget.reserve.sru, occupied=occupied_disks, observed=observed, light=light
    )
    by_mru, by_sru = _new_slices_room(
        total, policy, budget, occupied, occupied_disks, layouts, observed=observed, pools=pools, light=light
    )
    overcommitted = budget.left.mru < 0 or budget.left.sru < 0
    # ZOS's vmd refuses every VM of more vCPUs than the node's threads (capacity.vcpus): none is new.
    cpu_refused = vcpus_refused(policy.slice_cru, total.cru)
    count = 0 if overcommitted or cpu_refused else min(by_mru, by_sru)
    disk = _NewDisk(data_sru=0, given_up=0)
    if count > 0:
        disk = _new_slice_disk(policy, budget, count, layouts, occupied, occupied_disks, pools_known=bool(pools))
    limited_by = _limited_by(by_mru, by_sru, budget, occupied=bool(occupied), count=count, cpu_refused=cpu_refused)
    return _carved(
        total,
        policy,
        budget,
        occupied,
        observed,
        count=count,
        disk=disk,
        limited_by=limited_by,
        layouts=layouts,
        pools=pools,
        overcommitted=overcommitted,
        cpu_refused=cpu_refused,
    )


def _carved(
    total: Resources,
    policy: Policy,
    budget: _Budget,
    occupied: Sequence[Resources],
    observed: Observed,
    *,
    count: int,
    disk: _NewDisk,
    limited_by: str,
    layouts: tuple[tuple[int, ...], ...],
    pools: Sequence[int] | None,
    overcommitted: bool,
    cpu_refused: bool,
) -> Carve:
    """The carve, once the number of new slices and their disk are settled: their size, what is left, the notes."""
    notes = _carve_notes(
        budget,
        occupied,
        observed,
        count=count,
        limited_by=limited_by,
        layouts=layouts,
        pools=pools,
        disk=disk,
        cpu=(policy.slice_cru, total.cru) if cpu_refused else None,
    )
    slice_size = SliceSize(cru=policy.slice_cru, mru=policy.slice_mru, sru=disk.data_sru, rootfs=budget.rootfs)
    return Carve(
        policy=policy.name,
        slices=len(occupied) + count,
        new_slices=count,
        occupied=len(occupied),
        slice=slice_size,
        limited_by=limited_by,
        reserve=budget.reserve,
        unallocated=_unallocated(total, policy, budget, slice_size, count),
        overcommitted=overcommitted,
        notes=notes,
        pools_known=bool(pools),
        disk_given_up=disk.given_up,
    )


def _unallocated(total: Resources, policy: Policy, budget: _Budget, slice_size: SliceSize, count: int) -> Resources:
    """What the new slices leave of the budget (never below zero), the HDD as the node has it."""
    unallocated = budget.left - policy.vm_charge(slice_size.cru, slice_size.mru, slice_size.sru).times(count)
    return Resources(
        cru=max(unallocated.cru, 0), mru=max(unallocated.mru, 0), sru=max(unallocated.sru, 0), hru=total.hru
    )


def _new_slices_room(
    total: Resources,
    policy: Policy,
    budget: _Budget,
    occupied: Sequence[Resources],
    occupied_disks: list[tuple[int, int]],
    layouts: tuple[tuple[int, ...], ...],
    *,
    observed: Observed,
    pools: Sequence[int] | None,
    light: bool,
) -> tuple[int, int]:
    """How many new slices the memory left holds, and how many the disks left hold."""
    by_mru = vms_by_memory(
        budget.left.mru,
        budget.per_vm_mru,
        hidden_per_vm=observed.hidden_mru_per_vm,
        running=len(occupied),
        own_beyond_reserve=observed.own_beyond_reserve(total.mru),
    )
    by_sru = _slices_by_disk(policy, budget, by_mru, occupied_disks, layouts)
    if not pools and not _refusal_explained(total.sru, budget, occupied_disks, observed, light=light):
        # A disk refusal no plausible layout explains: the drives are outside the set, and where the
        # room left lies is unknown; no new disk is offered until something is freed (a smaller one
        # could be refused again, and every refusal after the first is one too many).
        by_sru = 0
    return by_mru, by_sru


def _limited_by(by_mru: int, by_sru: int, budget: _Budget, *, occupied: bool, count: int, cpu_refused: bool) -> str:
    """Which resource the new slices ran out of ("cru": each asks more vCPUs than one VM may have there)."""
    if cpu_refused:
        return "cru"
    if occupied and not count:
        # Nothing new beside the occupied slices: say which resource they left short of one more.
        return "mru" if budget.left.mru < budget.per_vm_mru else "sru"
    return "mru" if by_mru <= by_sru else "sru"


@dataclass(frozen=True)
class _Budget:
    """What the new slices share once the reserve and the occupied slices' real charge are off."""

    reserve: Resources
    caches: tuple[int, ...]  # the zos-cache sizes every new disk must place beside
    left: Resources  # total - reserve - occupied charge; negative when overcommitted
    sru: int  # `left.sru`, bounded by a refused disk
    rootfs: int
    per_vm_mru: int
    per_vm_extra: int  # what each VM takes of the pools beyond its data disk
    per_vm_min_sru: int


def _budget(
    total: Resources,
    policy: Policy,
    occupied: Sequence[Resources],
    *,
    pools: Sequence[int] | None,
    cache: int | None,
    observed: Observed,
) -> _Budget:
    reserve = policy.reserve(total)
    caches = (reserve.sru,)
    if pools and cache is not None and policy.reserve_sru:
        reserve = Resources(cru=reserve.cru, mru=reserve.mru, sru=cache_keep(cache), hru=reserve.hru)
        # The disks must place beside the quota now and once grown a step: where storaged puts a disk
        # depends on each pool's room, so a cache smaller than the room kept moves the placement.
        caches = (reserve.sru, cache_now(cache))
    occupied_charge = Resources.total_of(policy.vm_charge(o.cru, o.mru, o.sru) for o in occupied)
    left = total - reserve - occupied_charge
    sru = left.sru
    if observed.pool_room_below is not None:
        # A disk this size was refused with the accounting's room: assume what is left lies in
        # one pool smaller than it, so every new disk must fit there.
        sru = min(sru, observed.pool_room_below - 1)
    rootfs = policy.rootfs_size(policy.slice_cru, policy.slice_mru)
    per_vm_extra = rootfs + policy.overhead_sru_per_vm
    return _Budget(
        reserve=reserve,
        caches=caches,
        left=left,
        sru=sru,
        rootfs=rootfs,
        per_vm_mru=policy.slice_mru + policy.overhead_mru_per_vm,
        per_vm_extra=per_vm_extra,
        per_vm_min_sru=policy.min_slice_sru + per_vm_extra,
    )


def _slices_by_disk(
    policy: Policy,
    budget: _Budget,
    by_mru: int,
    occupied_disks: Sequence[tuple[int, int]],
    layouts: Sequence[tuple[int, ...]],
) -> int:
    """How many new slices of the smallest disk fit the disk budget and place in every device order."""
    if not budget.per_vm_min_sru:
        return by_mru
    by_sru = max(budget.sru, 0) // budget.per_vm_min_sru
    smallest = (policy.min_slice_sru + policy.overhead_sru_per_vm, budget.rootfs)
    for layout in layouts:
        for held in budget.caches:
            placed = vms_placed_in_every_order(layout, held, occupied_disks, smallest, limit=min(by_mru, by_sru))
            by_sru = min(by_sru, placed)
    return by_sru


def _refusal_explained(
    total_sru: int, budget: _Budget, occupied_disks: Sequence[tuple[int, int]], observed: Observed, *, light: bool
) -> bool:
    return observed.pool_room_below is None or layouts_agree(
        total_sru, budget.reserve.sru, occupied_disks, observed, light=light
    )


class _NewDisk(NamedTuple):
    data_sru: int  # each new slice's data disk
    given_up: int  # over all new slices, against a carve on the SSD total alone (pools unknown)


def _new_slice_disk(
    policy: Policy,
    budget: _Budget,
    count: int,
    layouts: Sequence[tuple[int, ...]],
    occupied: Sequence[Resources],
    occupied_disks: Sequence[tuple[int, int]],
    *,
    pools_known: bool,
) -> _NewDisk:
    """The data disk of `count` new slices: an even share of the budget, then what deploys."""
    on_total = data_sru = _round_down(max(budget.sru, 0) // count - budget.per_vm_extra, policy.sru_step)
    if layouts:
        data_sru = _largest_deployable_disk(
            layouts, budget.caches, occupied_disks, count, data_sru, budget.rootfs, policy
        )
        if max(len(layout) for layout in layouts) > 1 and occupied:
            # On a busy node with several pools, where ZOS put each disk depends on the order of
            # past deploys and releases, which no reading tells. A disk no larger than the ones
            # already there fits the hole any release leaves, so new ones are not made larger.
            data_sru = max(min(data_sru, _round_down(min(o.sru for o in occupied), policy.sru_step)), 0)
    return _NewDisk(data_sru=data_sru, given_up=0 if pools_known else max(on_total - data_sru, 0) * count)


def _carve_notes(
    budget: _Budget,
    occupied: Sequence[Resources],
    observed: Observed,
    *,
    count: int,
    limited_by: str,
    layouts: Sequence[tuple[int, ...]],
    pools: Sequence[int] | None,
    disk: _NewDisk,
    cpu: tuple[int, int] | None = None,
) -> tuple[str, ...]:
    """What the carve says in words, in the order a reader needs it: why nothing, then what was learnt.
    `cpu`: (vCPUs per slice, the node's threads) when ZOS's vCPU bound leaves nothing new."""
    notes = []
    if cpu is not None:
        vcpus, threads = cpu
        notes.append(vcpu_note(vcpus, threads, zos_vcpu_limit(threads), zos_cpu_refusal(threads)))
    if budget.left.mru < 0 or budget.left.sru < 0:
        # With nothing rented or deployed, a negative budget means the node is below ZOS's reserve.
        kept = {what: getattr(budget.reserve, what) for what in ("mru", "sru") if getattr(budget.left, what) < 0}
        notes.append(OVERCOMMITTED_NOTE if occupied else below_reserve_note(kept))
    elif count <= 0 and not occupied and cpu is None:
        notes.append(not_one_slice_note(limited_by))
    if observed.hidden_mru_per_vm:
        notes.append(hidden_memory_note(observed.hidden_mru_per_vm))
    if observed.pool_room_below is not None:
        notes.append(refused_disk_note(observed.pool_room_below))
    if not pools and layouts:
        notes.append(unknown_pools_note(len(layouts), disk.given_up))
    return tuple(notes)


def pool_layouts(
    total_sru: int,
    pools: Sequence[int] | None,
    *,
    cache: int,
    occupied: Sequence[tuple[int, int]] = (),
    observed: Observed = NOTHING_OBSERVED,
    light: bool = False,
) -> tuple[tuple[int, ...], ...]:
    """The pool layouts a verdict must hold in: the reported pools, or every plausible layout of
    the SSD total (with a ZOS-light node's partitions when `light`) that the node's last disk refusal
    leaves possible (all of them when it leaves none: the node is outside the plausible set, and the
    refused size itself bounds the disks)."""
    if pools:
        return (tuple(pools),)
    layouts = plausible_layouts(total_sru, light=light)
    if observed.pool_room_below is not None:
        layouts = narrowed(layouts, cache=cache, occupied=occupied, refused=observed.pool_room_below) or layouts
    return layouts


def layouts_agree(
    total_sru: int, cache: int, occupied: Sequence[tuple[int, int]], observed: Observed, *, light: bool = False
) -> bool:
    """Some plausible layout explains the node's last disk refusal (or there was none)."""
    if observed.pool_room_below is None:
        return True
    layouts = plausible_layouts(total_sru, light=light)
    return bool(narrowed(layouts, cache=cache, occupied=occupied, refused=observed.pool_room_below))


@lru_cache(maxsize=8192)
def _carve_memo(
    total: Resources,
    policy: Policy,
    occupied: tuple[Resources, ...],
    pools: tuple[int, ...] | None,
    observed: Observed,
    cache: int | None = None,
    light: bool = False,
) -> Carve:
    return carve(total, policy, occupied=occupied, pools=pools, observed=observed, cache=cache, light=light)


def carve_memoised(
    total: Resources,
    policy: Policy,
    *,
    occupied: Sequence[Resources] = (),
    pools: Sequence[int] | None = None,
    observed: Observed = NOTHING_OBSERVED,
    cache: int | None = None,
    light: bool = False,
) -> Carve:
    """carve, remembered: a fleet has many nodes of the same size and the carve is pure.

    Policies and resources are frozen values, so a changed policy is a different key. A carve
    with pools tries every device order, so this is what re-register plans and the stored
    figures use: the plan's carve is the one the figures find again.
    """
    # Known pools are the pools, whatever the node runs: light matters only without them (one memo entry).
    light = bool(light) and not pools
    return _carve_memo(total, policy, tuple(occupied), tuple(pools) if pools else None, observed, cache, light)


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
        notes=(LEGACY_CARVE_NOTE,),
    )


def _round_down(value: int, step: int) -> int:
    return max(value, 0) // step * step


def _largest_deployable_disk(
    layouts: Sequence[Sequence[int]],
    caches: Sequence[int],
    occupied: Sequence[tuple[int, int]],
    count: int,
    start: int,
    rootfs: int,
    policy: Policy,
) -> int:
    """The largest data disk (a multiple of sru_step, at least min_slice_sru) such that `count`
    VMs deploy one after another in every device order of every layout's pools, beside each cache size."""

    def deploys(data: int) -> bool:
        disks = (data + policy.overhead_sru_per_vm, rootfs)
        return all(
            vms_placed_in_every_order(pools, cache, occupied, disks, limit=count) >= count
            for pools in by_pools
            for cache in caches
        )

    # The layouts of most pools refuse first: a failing size is found after one trial, not eight.
    by_pools = sorted(layouts, key=len, reverse=True)

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
