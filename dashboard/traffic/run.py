"""One policy's month: the catalog, the marketplace and ZOS, event by event.

ZOS is played by `grid.simgrid.ZosMachine` (its own implementation of ZOS's rules: memory check
with the hidden use, storaged's placement); the dashboard's side is its own code: `capacity.carve`,
`capacity.precheck`/`fits` with the node's pools when reported (else every plausible layout), its VMs
and lessons, `grid.classify` and `capacity.refusal_lesson`, and the stale rule of the bulk
re-register (`catalog_rules`). The marketplace asks the dashboard which nodes have placeable slices
(where the policy has a precheck; otherwise any free slice), fills the fullest node first, and
after a refusal stops sending to that node until one of its VMs is released.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from dashboard import capacity
from dashboard.capacity import Resources, SliceSize
from dashboard.catalog_rules import catalog_stale
from dashboard.grid.classify import classify
from dashboard.grid.simgrid import ZosMachine
from dashboard.traffic import fleet
from dashboard.traffic.fleet import HOURS, Event, NodeSpec, boot, in_plausible_set
from dashboard.traffic.policies import Contender

RE_REGISTER_EVERY_HOURS = 24  # the beat's bulk re-register of stale nodes
MAX_ATTEMPTS = 5  # nodes the marketplace tries for one request


@dataclass
class Slot:
    index: int
    size: SliceSize
    workload: str = ""  # "" while free

    @property
    def free(self) -> bool:
        return not self.workload


@dataclass
class SimNode:
    spec: NodeSpec
    machine: ZosMachine
    allowed_mru: int  # what ZOS would let this node hold at once, for utilisation
    slots: list[Slot] = field(default_factory=list)
    status: str = "up"
    observed: capacity.Observed = capacity.NOTHING_OBSERVED
    bound_used_sru: int | None = None
    turned_away: bool = False  # refused once: the marketplace waits for a release
    refusals: int = 0
    placeable: int = 0
    phantom: int = 0
    full: bool = False
    changed_at: float = 0.0
    next_index: int = 0
    carved_slice_sru: int = 0
    carved_pools_known: bool = False
    plausible: bool = True  # its drives fit the prudent carve's plausible layouts (fleet.in_plausible_set)
    disk_given_up: int = 0  # data disk its registration's carve gave up to layouts it may not have (pools unknown)
    images: set[int] = field(default_factory=set)  # the images its zos-cache holds (fleet.IMAGES)
    known_cache: int | None = None  # the zos-cache's bound from the last pool report the dashboard read

    @property
    def reported_pools(self) -> tuple[int, ...] | None:
        """What the dashboard knows of the pools: reported (largest first) or nothing, as from the proxy."""
        return tuple(sorted(self.spec.pools, reverse=True)) if self.spec.pools_reported else None

    def deployed_mru(self) -> int:  # what runs on ZOS (a slice marked taken may have lost its VM: traffic_drift)
        return sum(vm.mru for vm in self.machine.vms)

    def free_slots(self) -> list[Slot]:
        return [s for s in self.slots if s.free]


class Run:
    """One policy's month: the catalog, the marketplace and ZOS, event by event."""

    def __init__(self, contender: Contender, specs: list[NodeSpec], allowed: dict[int, int]):
        self.name = contender.name
        self.mode = contender.mode
        self.policy = contender.policy
        self.nodes = [
            SimNode(spec=spec, machine=boot(spec), allowed_mru=allowed[spec.node_id], plausible=in_plausible_set(spec))
            for spec in specs
        ]
        self.releases: list[tuple[float, int, int, str]] = []  # (at, seq, node position, workload)
        self.seq = 0
        self.deploys = 0
        self.requests = 0
        self.unserved = 0
        self.precheck_stops = 0
        self.refused_by_cause: dict[str, int] = {}
        # On nodes of several SSDs: by cause, and the disk refusals by what the dashboard knew of the pools.
        self.several_pools_by_cause: dict[str, int] = {}
        self.disk_refused = {"in_plausible_set": 0, "outside_plausible_set": 0, "pools_reported": 0}
        self.util_num = 0.0
        self.util_den = 0.0
        self.phantom_hours = 0.0
        self.daily: list[dict] = [
            {"refused": 0, "deploys": 0, "util_num": 0.0, "util_den": 0.0} for _ in range(HOURS // 24 + 1)
        ]
        for node in self.nodes:
            self._carve(node, fresh=True)
            self._judge(node)

    # --- the dashboard's side ---------------------------------------------------------

    def _observed(self, node: SimNode, used_sru: int) -> capacity.Observed:
        return capacity.observed_now(
            hidden_mru_per_vm=node.observed.hidden_mru_per_vm,
            pool_room_below=node.observed.pool_room_below,
            bound_used_sru=node.bound_used_sru,
            used_sru=used_sru,
        )

    def _occupied(self, node: SimNode) -> list[Resources]:
        return [s.size.resources for s in node.slots if not s.free]

    def _hear_pools(self, node: SimNode) -> None:
        """A pool report read beside the reading (at registration, then daily as the watch does after
        POOLS_MAX_AGE): the zos-cache's bound, as services.pools derives it in production."""
        if node.reported_pools is None:
            return
        _total, used = node.machine.reading()
        pools = sorted(node.machine.storage_pools(), key=lambda p: p.size, reverse=True)  # as reported_pools
        bound = capacity.cache_bound(
            [p.size for p in pools], [p.used for p in pools], disks_sru=used.sru - capacity.PROXY_CACHE_SRU
        )
        node.known_cache = bound[0] if bound else None

    def _carve(self, node: SimNode, *, fresh: bool = False) -> bool:
        """Register (fresh) or re-register: re-carve the free slices; True when the catalog changed."""
        if fresh:
            self._hear_pools(node)
        total, used = node.machine.reading()
        # Remembered: the daily stale check carves every node again, and most have not changed since.
        carve = capacity.carve_memoised(
            total,
            self.policy,
            occupied=self._occupied(node),
            pools=node.reported_pools,
            observed=self._observed(node, used.sru),
            cache=node.known_cache,
        )
        free = node.free_slots()
        size = SliceSize(cru=carve.slice.cru, mru=carve.slice.mru, sru=carve.slice.sru, rootfs=carve.slice.rootfs)
        stale = catalog_stale(
            carved_policy_name=self.policy.name,
            carved_policy_version=self.policy.version,
            carved_slice_sru=node.carved_slice_sru,
            policy=self.policy,
            free=[(s.size.cru, s.size.mru, s.size.sru) for s in free],
            carve=carve,
            carved_pools_known=node.carved_pools_known,
        )
        if not fresh and not stale:
            return False  # current by the bulk job's own rule: it leaves the node alone
        node.carved_slice_sru = size.sru
        node.carved_pools_known = carve.pools_known
        if fresh:
            node.disk_given_up = carve.disk_given_up
        node.slots = [s for s in node.slots if not s.free]
        for _ in range(carve.new_slices):
            node.slots.append(Slot(index=node.next_index, size=size))
            node.next_index += 1
        return True

    def _live(self, node: SimNode, used_sru: int) -> capacity.LiveNode:
        return capacity.live_node(
            policy=self.policy,
            pools=node.reported_pools,
            occupied=self._occupied(node),
            observed=self._observed(node, used_sru),
            cache=node.known_cache,
        )

    def _placeable(self, node: SimNode) -> int:
        free = node.free_slots()
        if not free or node.status != "up":
            return 0
        total, used = node.machine.reading()
        check = capacity.precheck(
            [(s.index, s.size) for s in free], total, used, self.policy, live=self._live(node, used.sru)
        )
        return check.placeable_now

    def _fits(self, node: SimNode, slot: Slot) -> bool:
        total, used = node.machine.reading()
        return capacity.fits(slot.size, total, used, self.policy, live=self._live(node, used.sru)).fits

    def _learn(self, node: SimNode, slot: Slot, raw: str, total: Resources, used: Resources) -> None:
        diagnosis = classify(raw)
        lesson = capacity.refusal_lesson(
            cause=diagnosis.cause,
            needed=diagnosis.needed_bytes,
            usable=diagnosis.usable_bytes,
            total=total,
            used=used,
            vm_count=sum(1 for s in node.slots if not s.free),
            data_disk=slot.size.sru,
            rootfs=capacity.zos_rootfs(slot.size.cru, slot.size.mru),
        )
        if lesson is not None:
            node.observed = capacity.observed_after(node.observed, lesson)
            if lesson.kind == "disk":
                node.bound_used_sru = lesson.used_sru

    # --- accounting of figures -----------------------------------------------------------

    def _close(self, node: SimNode, now: float) -> None:
        """Count the node's figures up to `now`; call before anything about it changes."""
        self._account(node, now)
        node.changed_at = now

    def _judge(self, node: SimNode) -> None:
        """Work out the node's state after a change: placeable, full, phantom."""
        up = node.status == "up"
        if self.mode.precheck:
            node.placeable = self._placeable(node)
            offered = node.placeable > 0
        else:
            offered = bool(node.free_slots())
        # Full: the marketplace can put nothing more there, by the dashboard's word or after a refusal.
        node.full = up and (node.turned_away or not offered)
        node.phantom = _phantom(node) if up else len(node.free_slots())

    def _account(self, node: SimNode, now: float) -> None:
        span = now - node.changed_at
        if span <= 0:
            return
        self.phantom_hours += node.phantom * span
        if node.full and node.allowed_mru:
            deployed = node.deployed_mru()
            self.util_num += deployed * span
            self.util_den += node.allowed_mru * span
            start = node.changed_at
            while start < now:  # spread over the days it covers, for the chart
                day = int(start // 24)
                end = min(now, (day + 1) * 24)
                self.daily[min(day, len(self.daily) - 1)]["util_num"] += deployed * (end - start)
                self.daily[min(day, len(self.daily) - 1)]["util_den"] += node.allowed_mru * (end - start)
                start = end

    # --- events ------------------------------------------------------------------------

    def release_until(self, now: float) -> None:
        while self.releases and self.releases[0][0] <= now:
            at, _seq, position, workload = heapq.heappop(self.releases)
            node = self.nodes[position]
            self._close(node, at)
            node.machine.release(workload)
            for slot in node.slots:
                if slot.workload == workload:
                    slot.workload = ""
            node.turned_away = False
            self._judge(node)

    def reregister_stale(self, now: float) -> None:
        if not self.mode.reregister:
            return
        for node in self.nodes:
            self._account(node, now)
            node.changed_at = now
            cache = node.known_cache
            self._hear_pools(node)
            if self._carve(node) or node.known_cache != cache:
                self._judge(node)

    def status(self, event: Event) -> None:
        if event.kind == "standby":
            node = self.nodes[int(event.pick * len(self.nodes))]
            if node.status != "up" or not all(s.free for s in node.slots):
                return  # the farm's power manager only switches off idle nodes
            self._close(node, event.at)
            node.status = "standby"
        else:
            asleep = [n for n in self.nodes if n.status == "standby"]
            if not asleep:
                return
            node = asleep[int(event.pick * len(asleep))]
            self._close(node, event.at)
            node.status = "up"
        self._judge(node)

    def deploy(self, event: Event) -> None:
        self.requests += 1
        tried: set[int] = set()
        for _ in range(MAX_ATTEMPTS):
            position = self._pick(event.pick, tried)
            if position is None:
                self.unserved += 1
                return
            tried.add(position)
            node = self.nodes[position]
            slot = min(node.free_slots(), key=lambda s: s.index)
            if self.mode.precheck and not self._fits(node, slot):
                self.precheck_stops += 1
                continue
            self.deploys += 1
            self.daily[int(event.at // 24)]["deploys"] += 1
            total, used = node.machine.reading()
            self.seq += 1
            self._close(node, event.at)
            vm, refusal = node.machine.place(slot.size, name=f"s{slot.index}", deployment_id=self.seq)
            if vm is not None:
                slot.workload = vm.workload_id
                heapq.heappush(self.releases, (event.at + event.lifetime, self.seq, position, vm.workload_id))
                if node.spec.cache_grows:
                    # Its image is pulled into the zos-cache; storaged's check (every 5 minutes) resizes it.
                    node.images.add(fleet.image_of(event))
                    node.machine.cache_check(len(node.images) * fleet.IMAGE_CACHE_USE)
                self._judge(node)
                return
            cause = classify(refusal.raw).cause
            self.refused_by_cause[cause] = self.refused_by_cause.get(cause, 0) + 1
            self._count_pools_refusal(node, cause)
            self.daily[int(event.at // 24)]["refused"] += 1
            node.refusals += 1
            node.turned_away = True
            if self.mode.learning:
                self._learn(node, slot, refusal.raw, total, used)
            self._judge(node)
        self.unserved += 1

    def _count_pools_refusal(self, node: SimNode, cause: str) -> None:
        if len(node.spec.pools) > 1:
            self.several_pools_by_cause[cause] = self.several_pools_by_cause.get(cause, 0) + 1
        if cause == "disk":
            where = (
                "pools_reported"
                if node.spec.pools_reported
                else "in_plausible_set"
                if node.plausible
                else "outside_plausible_set"
            )
            self.disk_refused[where] += 1

    def _pick(self, pick: float, tried: set[int]) -> int | None:
        """The fullest node that still offers a slice (fewest free first), ties broken by `pick`."""
        best: list[int] = []
        fewest = math.inf
        for position, node in enumerate(self.nodes):
            if position in tried or node.status != "up" or node.turned_away:
                continue
            if self.mode.precheck:
                offered = node.placeable
            else:
                offered = sum(1 for s in node.slots if s.free)
            if offered <= 0:
                continue
            if offered < fewest:
                fewest, best = offered, [position]
            elif offered == fewest:
                best.append(position)
        if not best:
            return None
        return best[int(pick * len(best)) % len(best)]

    def finish(self) -> None:
        for node in self.nodes:
            self._account(node, HOURS)
            node.changed_at = HOURS


def _phantom(node: SimNode) -> int:
    """Free slices ZOS would refuse if they were deployed one after another now (ZOS's own word)."""
    free = sorted(node.free_slots(), key=lambda s: s.index)
    if not free:
        return 0
    trial = node.machine.copy()
    refused = 0
    for n, slot in enumerate(free):
        vm, _refusal = trial.place(slot.size, name=f"p{n}", deployment_id=10**9 + n)
        refused += vm is None
    return refused
