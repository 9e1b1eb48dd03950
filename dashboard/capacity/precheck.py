"""The precheck: which free slices can really be placed on a live node now, and why not.

`used` is the Grid Proxy's accounted use (the node's reserve inside); hidden memory use is not
in it and comes from what refusals taught (`lessons`); a slice's disks must place in every
device order (`placement`) of the reported pools, or, when none were reported, of every
plausible layout of the SSD total (`layouts`), as the carve counts them. Slices are placed one after another, each
counted before the next is tried, so the verdicts say what would happen if every free slice
were rented now; the ones that do not fit are phantom. The sum of vCPUs is not checked (ZOS
over-provisions cores), but one VM may not have more vCPUs than the node's threads (`vcpus`). A closed node (`closures`: down, on standby, ...) places nothing.
What a verdict says in words comes from `words`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from dashboard.capacity.carve import SliceSize, pool_layouts
from dashboard.capacity.closures import CLOSURE_REASONS, Closure, status_closure
from dashboard.capacity.lessons import NOTHING_OBSERVED, Observed
from dashboard.capacity.placement import PoolState, distinct_outcomes, largest_room, pools_after, vm_outcomes
from dashboard.capacity.policy import (
    CACHE_STEP,
    MIN_VM_MRU,
    PROXY_CACHE_SRU,
    Policy,
    cache_keep,
    cache_pool_of,
    cache_room,
    vm_disks,
)
from dashboard.capacity.sizes import Resources
from dashboard.capacity.vcpus import vcpus_refused, zos_vcpu_limit
from dashboard.capacity.words import fits_words, misfit_words, shortfall_words

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
        return shortfall_words(self.resource, self.needed, self.available)

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
            return fits_words(self.needed, self.available)
        return misfit_words(s.words for s in self.shortfalls)

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
    # What each pool holds, as ZOS reported it with the pools (same order): taken as it is
    # instead of replaying the occupied disks, whose placement depends on a history no reading tells.
    pools_used: tuple[int, ...] | None = None
    # The zos-cache's quota now, when a pool report tells it (`cache_reported`): the node then keeps
    # room for its next step on its pool (`cache_keep`), as the carve does.
    cache: int | None = None
    # A ZOS-light node: unreported, its pools may be partitions (capacity.layouts' light set).
    light: bool = False

    def pool_states(self, total_sru: int, cache: int) -> list[list[PoolState]]:
        """The pools' every outcome over device orders, of every layout the verdicts must hold in."""
        if self.pools and self.pools_used and len(self.pools_used) == len(self.pools):
            # A pool ZOS reports anything in is mounted; which ones hold vdisks it does not say, nor
            # the device order (placement forks on what an order decides).
            state = [
                PoolState(size, used, mounted=used > 0) for size, used in zip(self.pools, self.pools_used, strict=True)
            ]
            if self.cache is not None:
                # The report holds the cache's quota now; its next step is kept on its pool, the
                # one it was created in at boot (the most space, the first of equals). A verdict holds
                # beside both: where storaged puts a disk depends on each pool's room.
                grown = [replace(pool) for pool in state]
                grown[cache_pool_of([pool.size for pool in state])].used += CACHE_STEP
                return [grown, state]
            return [state]
        layouts = pool_layouts(
            total_sru, self.pools, cache=cache, occupied=self.occupied_disks, observed=self.observed, light=self.light
        )
        return [state for layout in layouts for state in pools_after(layout, cache, self.occupied_disks)]


NOTHING_KNOWN = LiveNode()


def live_node(
    *,
    policy: Policy,
    pools: Sequence[int] | None,
    occupied: Sequence[Resources],
    observed: Observed = NOTHING_OBSERVED,
    pools_used: Sequence[int] | None = None,
    cache: int | None = None,
    light: bool = False,
) -> LiveNode:
    """The LiveNode of a node holding `occupied` VMs (in the order they were deployed); `cache`, the
    zos-cache's quota a pool report told, counts only with the pools known; `light`, a ZOS-light node,
    only without them."""
    return LiveNode(
        pools=tuple(pools) if pools else None,
        occupied_disks=tuple(vm_disks(policy, o.cru, o.mru, o.sru) for o in occupied),
        running=len(occupied),
        observed=observed,
        pools_used=tuple(pools_used) if pools and pools_used else None,
        cache=cache if pools and policy.reserve_sru else None,
        light=bool(light) and not pools,
    )


def pools_used_agreeing(pools_used, used_sru: int | None, *, cache: int | None = None) -> tuple[int, ...] | None:
    """What ZOS said each pool holds, when it adds up to the SSD use of the node's reading: then it is
    taken as it is; otherwise (something was deployed or freed since) the occupied disks are replayed.
    The reading counts the proxy's fixed 20 GiB for the zos-cache, the pools its quota: with the quota
    known (`cache`, Node.zos_cache) the two agree when the pools hold the reading's disks and that quota."""
    if not pools_used or used_sru is None:
        return None
    expected = used_sru if cache is None else used_sru - PROXY_CACHE_SRU + cache
    if sum(pools_used) != expected:
        return None
    return tuple(pools_used)


def room_now(total: Resources, used: Resources, *, running: int, observed: Observed = NOTHING_OBSERVED) -> Resources:
    """What one more VM can be charged on this reading: the cores and SSD not accounted, and the memory
    not accounted less the hidden use of each VM running (ZOS counts what is really used)."""
    return Resources(
        cru=total.cru - used.cru,
        mru=total.mru - used.mru - observed.hidden_mru(running, total.mru),
        sru=total.sru - used.sru,
    )


def pools_decide(live: LiveNode) -> bool:
    """Whether the SSD pools can refuse a VM that memory and the SSD total allow: then only the pool
    model can say. Known pools can; so can a refused disk's bound; and so can unknown pools, since the
    VM must then place under every plausible layout of the total (`layouts`), which the total alone
    does not tell. So every node's disks are judged by the pool model (placement groups the nodes whose
    pools judge alike, so this costs one judgement a group, not one a node)."""
    del live  # every node: its reported pools, or the plausible layouts of its total, place the disks
    return True


class _Placement:
    """The live node as slices are placed on it one after another: accounting, hidden memory,
    the refused-disk bound and every device order's pools (reported, or of each plausible layout)."""

    def __init__(self, total: Resources, used: Resources, policy: Policy, live: LiveNode):
        self.total, self.used, self.policy, self.live = total, used, policy, live
        self.running = live.running
        self.new_disks = 0
        # With the cache's quota known, the node keeps it and its next step, not the proxy's fixed
        # reserve_sru (which the proxy's `used` still counts: the difference is room on the total).
        self.cache_kept = policy.reserve_sru if live.cache is None else cache_keep(live.cache)
        self.orders: list[list[PoolState]] | None = live.pool_states(total.sru, self.cache_kept) or None

    def verdict(self, size: SliceSize | Resources) -> Verdict:
        policy = self.policy
        need = policy.vm_charge(size.cru, size.mru, size.sru)
        available = room_now(self.total, self.used, running=self.running, observed=self.live.observed)
        available = available + Resources(sru=cache_room(policy, self.live.cache))
        shortfalls = []
        if vcpus_refused(size.cru, self.total.cru):
            # ZOS's vmd refuses a VM of more vCPUs than the node's threads, whatever its room (capacity.vcpus).
            shortfalls.append(Shortfall("cru", size.cru, zos_vcpu_limit(self.total.cru)))
        if size.mru < MIN_VM_MRU:
            shortfalls.append(Shortfall("mru", MIN_VM_MRU, size.mru))
        for resource in ("mru", "sru"):
            needed, there = getattr(need, resource), getattr(available, resource)
            if needed > there:
                # Short of the total only by the step kept for the zos-cache: said in those words.
                cache_step = resource == "sru" and self.live.cache is not None and needed <= there + CACHE_STEP
                shortfalls.append(Shortfall("cache" if cache_step else resource, needed, there))
        data, rootfs = vm_disks(policy, size.cru, size.mru, size.sru)
        if not shortfalls:
            bound = self.live.observed.pool_room_below
            if bound is not None and self.new_disks + data + rootfs >= bound:
                shortfalls.append(Shortfall("pool", self.new_disks + data + rootfs, bound - 1))
            elif self.orders is not None:
                trials, failed = [], False
                for state in self.orders:
                    outcomes, failure = vm_outcomes(state, data, rootfs)
                    trials.extend(outcomes)
                    failed = failed or bool(failure)
                if failed:
                    room = min(largest_room(state) for state in self.orders)
                    # A disk that the step kept for the zos-cache alone keeps out: refused in those words.
                    cache_step = self.live.cache is not None and data <= room + CACHE_STEP
                    shortfalls.append(Shortfall("cache" if cache_step else "pool", data, room))
                else:
                    self._trials = distinct_outcomes(trials)
        return Verdict(fits=not shortfalls, needed=need, available=available, shortfalls=tuple(shortfalls))

    def take(self, verdict: Verdict, size: SliceSize | Resources) -> None:
        """Count a slice that fits as placed, so the next one sees it."""
        self.used = self.used + verdict.needed
        self.running += 1
        self.new_disks += sum(vm_disks(self.policy, size.cru, size.mru, size.sru))
        if self.orders is not None:
            self.orders = self._trials


@dataclass(frozen=True)
class ClosedVerdict(Verdict):
    """A slice cannot be placed on a closed node (`closures`: down, on standby, ...); the numbers are
    what it would need."""

    closure: Closure = Closure("down")

    @property
    def status(self) -> str:
        """The closure's key (for a node that is away, its status)."""
        return self.closure.key

    @property
    def words(self) -> str:
        return self.closure.verdict_words


AwayVerdict = ClosedVerdict  # its name when only down and standby closed a node


def _closure_of(status: str, closure: Closure | None) -> Closure | None:
    """The closure the caller decided (`closure_facts`), or, without one, the one its status alone decides."""
    return closure if closure is not None else status_closure(status)


def fits(
    slice_size: SliceSize | Resources,
    total: Resources,
    used: Resources,
    policy: Policy,
    *,
    live: LiveNode = NOTHING_KNOWN,
    status: str = "up",
    closure: Closure | None = None,
) -> Verdict:
    """Can one more slice be placed on a node with this live total and used capacity?

    `used` is as the Grid Proxy reports it: the node's own reserve is already inside, hidden
    memory use is not (ZOS tells it only in refusals; `live.observed` has what was learnt).
    With the pools known, the slice's disks must place in every device order.
    The sum of vCPUs is not checked (ZOS over-provisions cores); one VM's against the node's threads is
    (capacity.vcpus). A closed node (`closure`, or without one a
    `status` that is away) fits nothing.
    """
    verdict = _Placement(total, used, policy, live).verdict(slice_size)
    closed = _closure_of(status, closure)
    if closed is not None:
        return ClosedVerdict(fits=False, needed=verdict.needed, available=verdict.available, closure=closed)
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


# --- precheck: which free slices can really be placed now --------------------------------

# Why one slice does not fit an open node (its first shortfall).
SHORTFALL_REASONS = {
    # ZOS refuses one VM of more vCPUs than the node's threads (capacity.vcpus); judged first, as no room helps.
    "cpu": "CPU (more vCPUs than the node's threads)",
    "memory": "memory",
    "disk": "disk (total)",
    "pool": "disk (no pool holds it)",
}
# Every phantom reason, key -> words: a node's closures first (closures.CLOSURE_REASONS), then the
# shortfalls. Pages, totals, CSV, API, metrics and alerts read this, so a new closure shows everywhere.
PHANTOM_REASONS = {**{key: r.label for key, r in CLOSURE_REASONS.items()}, **SHORTFALL_REASONS}


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
        if isinstance(self.verdict, ClosedVerdict):
            return self.verdict.closure.key
        resource = self.verdict.shortfalls[0].resource if self.verdict.shortfalls else "mru"
        return {"cru": "cpu", "mru": "memory", "sru": "disk", "pool": "pool", "cache": "pool"}.get(resource, "memory")


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
    closure: Closure | None = None,
) -> Precheck:
    """Place the free slices one after another (by index) on the live node.

    Each slice that fits is counted against the node before the next is tried, so the
    verdicts say what would happen if every free slice were rented now. The ones that do
    not fit are phantom: the catalog offers them, ZOS would refuse them. On a closed node
    (`closure`, decided by dashboard.figures.closure; without one, a `status` down or standby)
    every free slice is phantom, for that reason.
    """
    verdicts = []
    placement = _Placement(total, used, policy, live)
    closed = _closure_of(status, closure)
    for index, size in sorted(free, key=lambda item: item[0]):
        verdict = placement.verdict(size)
        if closed is not None:
            verdict = ClosedVerdict(fits=False, needed=verdict.needed, available=verdict.available, closure=closed)
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
