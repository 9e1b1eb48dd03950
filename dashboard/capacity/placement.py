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


@dataclass
class PoolState:
    """One SSD pool as storaged sees it: its size, what is allocated in it, mounted, holds vdisks."""

    size: int
    used: int = 0
    mounted: bool = False
    vdisks: bool = False
    first: bool = False  # the boot pool: first in device order of the pools of its size

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
        state[largest].first = True
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


def copy_pools(state: Sequence[PoolState]) -> list[PoolState]:
    """A copy to try a placement on: place_disk changes the pools it is given."""
    return [PoolState(p.size, p.used, p.mounted, p.vdisks, p.first) for p in state]


# What one device order decides is only ever a tie: the first unmounted pool that can hold a disk,
# and, among mounted pools left with the same room after it, which one a rootfs takes. So instead of
# playing every order of the pools (n! of them, 9 pools were minutes), the pools are played as a set
# and each tie forks into the outcomes that differ: one per distinct unmounted size that could take
# the disk, one per kind (holding vdisks or not) of the mounted pools tied. Outcomes that leave the
# same pools are one (`_shape`), so the work follows the distinct shapes, not the orders.
# Forking every tie on its own reads an order's choices as free, which can only add outcomes: a
# verdict that holds over them holds in every real order (checked against every permutation in
# tests/capacity/test_capacity_placement_bounded.py). The one fact every order shares is kept: the boot pool
# is the first of the largest pools in device order (pools_at_boot).
# Pools of many distinct sizes (64 pools, 9 sizes a byte apart) still fork into very many shapes;
# past MAX_SHAPES pools' worth of outcomes the outcomes are blurred into what all of them certainly
# have (`Blurred`), so a step costs at most that much, whatever the pools (4 pools keep 256
# outcomes a step, more than ordinary nodes ever fork into; 64 pools keep 16).
MAX_SHAPES = 1024
# What the doors take (nodes/services/pools.py, the carve command): equal drives are one shape, and no
# real node mixes more than a few drive models, so more distinct sizes is a 400 naming this cap.
MAX_POOL_SIZES = 8
MAX_POOLS = 64
# 0.5%: what rounding between ZOS's own totals and the proxy's copy of them can explain. ZOS's SSD
# total (sru) is the sum of its SSD pools' device sizes, so pools further off are another node's.
POOLS_TOLERANCE_PERMILLE = 5


def pools_match_total(ssd_sum: int, total_sru: int) -> bool:
    """Whether SSD pools adding up to `ssd_sum` can be the pools of a node whose SSD total is `total_sru`."""
    return abs(ssd_sum - total_sru) * 1000 <= POOLS_TOLERANCE_PERMILLE * max(total_sru, 1)


def pools_bounded(sizes: Sequence[int], *, what: str = "pools") -> None:
    """ValueError naming the cap when these SSD pool sizes are more than a node can have."""
    if len(sizes) > MAX_POOLS:
        raise ValueError(f"{what}: {len(sizes)} pools; a node has at most {MAX_POOLS}")
    if len(set(sizes)) > MAX_POOL_SIZES:
        raise ValueError(
            f"{what}: {len(set(sizes))} different SSD pool sizes; at most {MAX_POOL_SIZES} are judged "
            "(pools of one drive model have one size)"
        )


@dataclass
class Tally:
    """How much judging the pools cost: outcomes (shapes) weighed. Tests bound it instead of time."""

    shapes: int = 0


TALLY = Tally()


@dataclass(frozen=True)
class Blurred:
    """Outcomes too many to weigh one by one, as what they all certainly have: at least `room` bytes
    left over `pools` pools. A disk of `size` then places in every order if room > pools * (size - 1)
    (some pool has `size` left, and storaged finds it, mounted or not); placing takes exactly its size."""

    room: int
    pools: int

    def holds(self, size: int) -> bool:
        return size <= 0 or self.room > self.pools * (size - 1)


def largest_room(state: list[PoolState] | Blurred) -> int:
    """The room of the largest pool (for a blurred state, what the largest surely has)."""
    if isinstance(state, Blurred):
        return -(-state.room // state.pools) if state.pools else 0
    return max((p.room for p in state), default=0)


def _total_room(state: list[PoolState] | Blurred) -> int:
    return state.room if isinstance(state, Blurred) else sum(p.room for p in state)


def _shape(state: list[PoolState] | Blurred) -> tuple:
    if isinstance(state, Blurred):
        return ("blurred", state.room, state.pools)
    # A mounted pool acts by its room and whether it holds vdisks; an unmounted one by its size.
    return tuple(sorted((p.mounted, p.room if p.mounted else p.size, p.vdisks, p.size, p.first) for p in state))


def _disk_outcomes(state: list[PoolState], size: int, *, vdisk: bool) -> list[list[PoolState]] | None:
    """Every distinct pools after one disk, over the ties device order decides; None: no pool holds it."""
    if size <= 0:
        return [state]
    mounted = [i for i, pool in enumerate(state) if pool.mounted and pool.room >= size]
    if mounted:
        if vdisk and any(state[i].vdisks for i in mounted):
            # storaged takes the first vdisk pool in most-room order: a vdisk pool with most room.
            mounted = [i for i in mounted if state[i].vdisks]
        most = max(state[i].room for i in mounted)
        choices = _distinct(state, [i for i in mounted if state[i].room == most])
    else:
        unmounted = [i for i, pool in enumerate(state) if not pool.mounted and pool.size >= size]
        if not unmounted:
            return None
        choices = _distinct(state, unmounted)
    outcomes = []
    for chosen in choices:
        # Outcomes share the pools they leave alone: a pool is replaced, never changed, on this path.
        trial, pool = list(state), state[chosen]
        trial[chosen] = PoolState(pool.size, pool.used + size, True, pool.vdisks or vdisk, pool.first)
        outcomes.append(trial)
    return outcomes


def _distinct(state: Sequence[PoolState], indexes: Sequence[int]) -> list[int]:
    """One index per kind of pool among these (alike pools give alike outcomes); the boot pool,
    first of its size in device order, goes before the others of its size."""
    seen: dict[tuple, int] = {}
    for i in indexes:
        pool = state[i]
        kind = (pool.room, pool.vdisks, pool.size, pool.mounted)
        if kind not in seen or pool.first:
            seen[kind] = i
    firsts = {state[i].size for i in seen.values() if state[i].first}
    return [i for i in seen.values() if state[i].first or state[i].size not in firsts]


def vm_outcomes(state: list[PoolState], data: int, rootfs: int) -> tuple[list[list[PoolState]], str]:
    """Every distinct pools after one VM's data disk then rootfs, and "" or what failed in some order
    (the outcomes listed are those where it placed)."""
    if isinstance(state, Blurred):
        if not state.holds(data):
            return [], "data"
        after_data = Blurred(state.room - max(data, 0), state.pools)
        if not after_data.holds(rootfs):
            return [], "rootfs"
        return [Blurred(after_data.room - max(rootfs, 0), state.pools)], ""
    after_data = _disk_outcomes(state, data, vdisk=True)
    if after_data is None:
        return [], "data"
    placed, failed = [], ""
    for trial in after_data:
        after = _disk_outcomes(trial, rootfs, vdisk=False)
        if after is None:
            failed = "rootfs"
        else:
            placed.extend(after)
    return placed, failed


def distinct_outcomes(states: Sequence[list[PoolState]]) -> list[list[PoolState]]:
    """The states, one of each shape; past MAX_SHAPES, one Blurred state all of them have."""
    kept: dict[tuple, list[PoolState] | Blurred] = {}
    for state in states:
        kept.setdefault(_shape(state), state)
    TALLY.shapes += len(kept)
    pools = max((s.pools if isinstance(s, Blurred) else len(s) for s in kept.values()), default=1)
    if len(kept) * max(pools, 4) > MAX_SHAPES or (len(kept) > 1 and any(isinstance(s, Blurred) for s in kept.values())):
        return [Blurred(min(_total_room(s) for s in kept.values()), pools)]
    return list(kept.values())


def pools_after(pools: Sequence[int], cache: int, vms: Sequence[tuple[int, int]]) -> list[list[PoolState]]:
    """The pools after boot and these VMs' (data, rootfs) disks, placed in turn: every distinct outcome
    over the device orders. A VM that would not place in an order is skipped there (ZOS refused it)."""
    states = [pools_at_boot(pools, cache)]
    for data, rootfs in vms:
        states = distinct_outcomes(after_vm(states, data, rootfs))
    return states


def after_vm(states: Sequence[list[PoolState]], data: int, rootfs: int) -> list[list[PoolState]]:
    """Each state after one VM, kept as it was where the VM did not place."""
    out = []
    for state in states:
        if isinstance(state, Blurred):
            # Placed or not, the VM may have taken its disks: count them taken.
            out.append(Blurred(max(state.room - max(data, 0) - max(rootfs, 0), 0), state.pools))
            continue
        placed, failed = vm_outcomes(state, data, rootfs)
        out.extend(placed)
        if failed:
            out.append(state)
    return out


def vms_placed_in_every_order(
    pools: Sequence[int], cache: int, occupied: Sequence[tuple[int, int]], new: tuple[int, int], *, limit: int
) -> int:
    """How many VMs of disks `new` (data, rootfs) place one after another after `occupied`,
    in the worst device order; at most `limit`."""
    states = pools_after(pools, cache, occupied)
    placed = 0
    while placed < limit:
        following = []
        for state in states:
            outcomes, failed = vm_outcomes(state, *new)
            if failed:
                return placed
            following.extend(outcomes)
        states = distinct_outcomes(following)
        placed += 1
    return placed


def largest_pool_room(pools: Sequence[int], cache: int, occupied: Sequence[tuple[int, int]]) -> int:
    """The room of the largest pool after the occupied disks, in the worst device order."""
    return min(largest_room(state) for state in pools_after(pools, cache, occupied))
