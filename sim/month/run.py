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
import random
from dataclasses import dataclass, field

from dashboard import capacity
from dashboard.capacity import Resources, SliceSize
from dashboard.capacity.catalog import catalog_stale
from dashboard.grid.classify import classify
from dashboard.grid.types import DeploymentFailed
from sim.grid import SimVm, ZosMachine
from sim.month import fleet
from sim.month.evidence import MARKETPLACE, PROPOSED_PROBE, Forger, MonthEvidence, per_vm_of
from sim.month.farm_ips import NO_FREE_IP, FarmIps
from sim.month.fleet import HOURS, Event, NodeSpec, boot, in_plausible_set, test_vm_running
from sim.month.memory import MIN_ODDS, FleetMemory
from sim.month.policies import Contender
from sim.month.trials import phantom_count, room_left

RE_REGISTER_EVERY_HOURS = 24  # the beat's bulk re-register of stale nodes
MAX_ATTEMPTS = 5  # nodes the marketplace tries for one request
PROBE_EVERY_HOURS = (
    1  # how often the deployer asks GET /api/v1/probes and sends what it lists (hourly: a node fills within hours)
)
PROBES_LISTED = 20  # the endpoint's default limit
# A buyer takes an uncertain slice (below SLICE_MIN_ODDS) only at these odds or better.
UNCERTAIN_FLOOR = 0.7


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
    slice_size: SliceSize | None = None  # its catalog's slice, from the last carve
    room_mru: int = 0  # full: memory of the node's slices ZOS would still take now (utilisation's denominator)
    sure: int = 0  # free slices at or above the minimum odds, in order (what headlines promise)
    checked: int = 0  # free slices the precheck places now, before the odds cut them
    first_odds: float = 1.0  # the first free slice's odds (what a buyer of an uncertain slice is told)

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

    def __init__(
        self,
        contender: Contender,
        specs: list[NodeSpec],
        allowed: dict[int, int],
        *,
        min_odds: float = MIN_ODDS,
        probes: bool = False,
        forged: int = 0,
    ):
        self.name = contender.name
        self.min_odds = min_odds
        self.probes = probes and contender.mode.learning  # the deployer sends what GET /api/v1/probes lists
        self.probes_sent = 0
        self.probe_taught: set[str] = set()  # groups a probe's refusal has taught
        self.refused_on_probe_taught = 0  # buyer refusals on a node of such a group
        # The fleet's memory lessons (lessons.services.memory_model), where the policy learns.
        self.memory = FleetMemory() if contender.mode.learning else None
        # How far each reading is believed (traffic.evidence), and the hostile reporter (--forged-reports).
        self.evidence = MonthEvidence() if contender.mode.learning else None
        self.forger = Forger(forged, random.Random(forged)) if forged and contender.mode.learning else None
        self.odds_outcomes: list[tuple[float, bool]] = []  # (the slice's odds, deployed) of every deploy sent
        # Refusals by why: hidden memory before its group had a lesson, after, the test VM's, disk, ...
        self.refused_by_reason: dict[str, int] = {}
        self.refused_by_build: dict[str, int] = {}
        self.first_refusals_by_build: dict[str, int] = {}
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
        self.ipv4_share = 0.0  # simulate() sets it
        self.ipv4_requests = 0
        self.ips = FarmIps(self.nodes)  # the farms' public IPv4 (traffic.farm_ips)
        self.util_num = 0.0
        self.util_den = 0.0
        self.phantom_hours = 0.0
        self.daily: list[dict] = [
            {"refused": 0, "deploys": 0, "util_num": 0.0, "util_den": 0.0} for _ in range(HOURS // 24 + 1)
        ]
        for node in self.nodes:
            if self.mode.oracle:
                node.observed = oracle_observed(node.machine)
            self._carve(node, fresh=True)
            self._judge(node)

    # --- the dashboard's side ---------------------------------------------------------

    def _observed(self, node: SimNode, used_sru: int) -> capacity.Observed:
        return capacity.observed_now(
            hidden_mru_per_vm=node.observed.hidden_mru_per_vm,
            pool_room_below=node.observed.pool_room_below,
            zos_own_mru=node.observed.zos_own_mru,
            bound_used_sru=node.bound_used_sru,
            used_sru=used_sru,
            zos_version=node.spec.told_build,  # the version it told (capacity.test_vm), as production reads it
        )

    def _occupied(self, node: SimNode) -> list[Resources]:
        return [s.size.resources for s in node.slots if not s.free]

    def _hear_pools(self, node: SimNode) -> None:
        """A pool report read beside the reading (at registration, then daily as the watch does after
        POOLS_MAX_AGE): the zos-cache's bound, as nodes.services.pools derives it in production."""
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
        node.slice_size = size
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
        # The precheck reads each pool's use over RMB as it judges (catalogs.services.precheck), where the node answers.
        pools = sorted(node.machine.storage_pools(), key=lambda p: p.size, reverse=True)  # as reported_pools
        return capacity.live_node(
            policy=self.policy,
            pools=node.reported_pools,
            pools_used=[p.used for p in pools] if node.reported_pools is not None else None,
            occupied=self._occupied(node),
            observed=self._observed(node, used_sru),
            cache=node.known_cache,
        )

    def _placeable(self, node: SimNode) -> int:
        node.checked = 0
        free = node.free_slots()
        if not free or node.status != "up":
            return 0
        total, used = node.machine.reading()
        check = capacity.precheck(
            [(s.index, s.size) for s in free], total, used, self.policy, live=self._live(node, used.sru)
        )
        node.checked = check.placeable_now
        return min(check.placeable_now, self._sure(node, free))

    def _odds(self, node: SimNode, free: list[Slot]) -> tuple[float, ...]:
        """The free slices' odds in order (capacity.slices_odds on the group's fit); 1 without learning."""
        if self.memory is None:
            return (1.0,) * len(free)
        total, used = node.machine.reading()
        return self.memory.odds(
            node.spec.told_build,
            node=node.spec.node_id,
            total_mru=total.mru,
            vm_mru=max(used.mru - capacity.zos_reserve_mru(total.mru), 0),
            running=sum(1 for s in node.slots if not s.free),
            sizes_mru=[s.size.mru for s in sorted(free, key=lambda s: s.index)],
            differs=self._unread_differs(node),
        )

    def _unread_differs(self, node: SimNode) -> tuple[float, tuple[int, ...]] | None:
        """For a node no reading tells at the VMs it runs now, how its group's nodes probes read were seen to
        differ (capacity.differs, lessons.selectors.odds.unread_among); None for a node read with as many VMs or
        more, and where probes read none that differ."""
        group = node.spec.told_build
        if not self.probes:
            return None
        if self.evidence.read_at(node.spec.node_id) >= sum(1 for s in node.slots if not s.free):
            return None
        return self.evidence.differs(self.memory, group)

    def _sure(self, node: SimNode, free: list[Slot]) -> int:
        """Free slices a headline may promise: those in a row from the first at or above the minimum odds."""
        sure = 0
        all_odds = self._odds(node, free)
        node.first_odds = all_odds[0] if all_odds else 0.0
        for odds in all_odds:
            if odds < self.min_odds:
                break
            sure += 1
        node.sure = sure
        return sure

    def _odds_moved(self, node: SimNode) -> bool:
        """Whether new odds change what the node offers (its precheck's count stands: nothing of it moved)."""
        was = (node.sure, node.first_odds >= UNCERTAIN_FLOOR)
        self._sure(node, node.free_slots())
        return (node.sure, node.first_odds >= UNCERTAIN_FLOOR) != was

    def _fits(self, node: SimNode, slot: Slot) -> bool:
        total, used = node.machine.reading()
        return capacity.fits(slot.size, total, used, self.policy, live=self._live(node, used.sru)).fits

    def _learn(self, node: SimNode, slot: Slot, raw: str, total: Resources, used: Resources, now: float) -> None:
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
            node.observed = capacity.observed_after(node.observed, lesson, running=len(node.slots), total_mru=total.mru)
            if lesson.kind == "disk":
                node.bound_used_sru = lesson.used_sru
        if diagnosis.cause == "memory" and diagnosis.usable_bytes is not None and self.memory is not None:
            self._learn_fleet(node, total, used, diagnosis.usable_bytes, now)

    def _learn_fleet(
        self, node: SimNode, total: Resources, used: Resources, usable: int, now: float, by: str = MARKETPLACE
    ) -> None:
        """The refusal's point refits its group once a second source agrees (traffic.evidence), and the
        lesson reaches every node of it at once; till then it is its node's alone."""
        running = sum(1 for s in node.slots if not s.free)
        group = node.spec.told_build
        point = capacity.MemoryPoint(
            node=node.spec.node_id,
            total_mru=total.mru,
            vms=running,
            vm_mru=max(used.mru - capacity.zos_reserve_mru(total.mru), 0),
            actual_mru=total.mru - usable,
        )
        per_vm = capacity.hidden_use_per_vm(
            total_mru=total.mru, usable_mru=usable, accounted_mru=used.mru, running=running
        )
        taken = self.evidence.take(self.memory, group, point, usable=usable, per_vm=per_vm, by=by, now=now)
        apart = group in self.memory.apart
        fitted = [] if apart else [self.memory.observe(group, p, per_vm=per_vm_of(p)) for p in taken.admitted]
        if not fitted or fitted[-1] is None:
            # Its own reading still reaches its node, as node_readings_apply writes it after each report.
            node.observed = self.evidence.with_own(
                node.spec.node_id, node.observed, carved=len(node.slots), total_mru=node.spec.mru
            )
            return
        for other in self.nodes:
            if other.spec.told_build != group:
                continue
            observed = self.memory.observed_for(
                group, node=other.spec.node_id, carved=len(other.slots), pool_room_below=other.observed.pool_room_below
            )
            observed = self.evidence.with_own(
                other.spec.node_id, observed, carved=len(other.slots), total_mru=other.spec.mru
            )
            if observed != other.observed:
                if other is not node:
                    self._close(other, now)
                other.observed = observed
                if other is not node:
                    self._judge(other)
            elif other is not node and other.status == "up" and other.checked > other.sure and self._odds_moved(other):
                self._close(other, now)  # the new fit moved its odds alone
                self._judge(other)

    def _learn_taken(
        self, node: SimNode, slot: Slot, total: Resources, used: Resources, running: int, now: float
    ) -> None:
        """ZOS took the VM: actual was at most total - its memory, a bound on the group's line at the VMs
        then running (lessons.services.memory_model.accepted_seen). Where it moves the group's belief, the nodes
        whose odds held their offer back are judged again."""
        group = node.spec.told_build
        room = total.mru - slot.size.mru - max(used.mru - capacity.zos_reserve_mru(total.mru), 0)
        if not self.memory.accept(group, capacity.Accepted(node=node.spec.node_id, vms=running, room_mru=room)):
            return
        for other in self.nodes:
            if other is node or other.spec.told_build != group or other.status != "up":
                continue
            if other.checked > other.sure and self._odds_moved(other):
                self._close(other, now)
                self._judge(other)

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
        # The slices on offer are judged: placeable now and at or above SLICE_MIN_ODDS; the rest are no
        # promise (utilisation counts what ZOS would still take of them).
        offer = node.placeable if self.mode.precheck and self.memory is not None else None
        node.phantom = phantom_count(node, offer) if up else len(node.free_slots())
        node.room_mru = room_left(node) if node.full else 0

    def _account(self, node: SimNode, now: float) -> None:
        span = now - node.changed_at
        if span <= 0:
            return
        self.phantom_hours += node.phantom * span
        if node.full:
            # Over what ZOS would hold at best under its own rule: what runs, and the node's slices
            # ZOS would still take now; so at most 1 by construction.
            deployed = node.deployed_mru()
            allowed = deployed + node.room_mru
            self.util_num += deployed * span
            self.util_den += allowed * span
            start = node.changed_at
            while start < now:  # spread over the days it covers, for the chart
                day = int(start // 24)
                end = min(now, (day + 1) * 24)
                self.daily[min(day, len(self.daily) - 1)]["util_num"] += deployed * (end - start)
                self.daily[min(day, len(self.daily) - 1)]["util_den"] += allowed * (end - start)
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

    def wants_ipv4(self, event: Event) -> bool:
        """A share of the requests ask a public IPv4, read off the event's own draw (the stream is unchanged)."""
        return self.ipv4_share > 0 and (event.pick * 1_000_003) % 1.0 < self.ipv4_share

    def deploy(self, event: Event) -> None:
        self.requests += 1
        ipv4 = self.wants_ipv4(event)
        self.ipv4_requests += ipv4
        tried: set[int] = set()
        if ipv4 and self.mode.precheck:
            # The dashboard's bound: a farm with no free IP offers no IPv4 slice (nodes.selectors.farm_ips).
            without = self.ips.without()
            tried |= {p for p in range(len(self.nodes)) if self.ips.farm(p) in without}
        for _ in range(MAX_ATTEMPTS):
            position = self._pick(event.pick, tried)
            if position is None:
                self.unserved += 1
                return
            tried.add(position)
            if self._attempt(position, event, ipv4=ipv4):
                return
        self.unserved += 1

    def _attempt(self, position: int, event: Event, *, ipv4: bool) -> bool:
        """The marketplace tries the node at `position`: the precheck, then ZOS. True once the VM runs."""
        node = self.nodes[position]
        if self._probe_first(node, event.at) and not node.placeable:
            return False  # the probe read a use of the node's own: its slices are judged on it now
        slot = min(node.free_slots(), key=lambda s: s.index)
        if self.mode.precheck and not self._fits(node, slot):
            self.precheck_stops += 1
            return False
        self.deploys += 1
        self.daily[int(event.at // 24)]["deploys"] += 1
        total, used = node.machine.reading()
        running = sum(1 for s in node.slots if not s.free)
        odds = self._odds(node, node.free_slots())[0]  # the slot is the first free one
        self.seq += 1
        self._close(node, event.at)
        vm, refusal, test_vm_in_the_way = self._place(node, slot, position, event.at, ipv4=ipv4)
        self.odds_outcomes.append((odds, vm is not None))
        if vm is None:
            assert refusal is not None  # ZOS answers a VM or a refusal
            self._refused(node, slot, refusal, test_vm_in_the_way, total, used, event.at)
            return False
        if self.memory is not None:
            self._learn_taken(node, slot, total, used, running, event.at)
        if ipv4:
            self.ips.hold(position, vm.workload_id)
        slot.workload = vm.workload_id
        heapq.heappush(self.releases, (event.at + event.lifetime, self.seq, position, vm.workload_id))
        if node.spec.cache_grows:
            # Its image is pulled into the zos-cache; storaged's check (every 5 minutes) resizes it.
            node.images.add(fleet.image_of(event))
            node.machine.cache_check(len(node.images) * fleet.IMAGE_CACHE_USE)
        self._judge(node)
        return True

    def _probe_first(self, node: SimNode, now: float) -> bool:
        """The deployer probes a node before a buyer's VM goes to a slice whose odds its want of a reading
        lowers (the placement answer's `probe_first`: capacity.probe_first), then deploys on what the probe
        read: a contract created and cancelled instead of a buyer refused. True when it probed."""
        if not self.probes or self._unread_differs(node) is None:
            return False
        if not capacity.probe_first(self._odds(node, node.free_slots())[0], unread=True):
            return False
        self._probe_one(node, now)
        return True

    def _place(
        self, node: SimNode, slot: Slot, position: int, now: float, *, ipv4: bool
    ) -> tuple[SimVm | None, DeploymentFailed | None, bool]:
        """ZOS's answer to the slot's VM (the chain's first, for a public IPv4): the VM or the refusal, and
        whether the node's test VM running then was what stood in the way."""
        node.machine.test_vm = test_vm_running(node.spec, now)
        test_vm_in_the_way = False
        if ipv4 and self.ips.free(self.ips.farm(position)) <= 0:
            vm, refusal = None, DeploymentFailed(NO_FREE_IP.format(node=node.spec.node_id))
        else:
            vm, refusal = node.machine.place(slot.size, name=f"s{slot.index}", deployment_id=self.seq)
            if vm is None and node.machine.test_vm:
                node.machine.test_vm = False
                test_vm_in_the_way = node.machine.copy().place(slot.size, name="t", deployment_id=0)[0] is not None
        node.machine.test_vm = False
        return vm, refusal, test_vm_in_the_way

    def _refused(
        self,
        node: SimNode,
        slot: Slot,
        refusal: DeploymentFailed,
        test_vm_in_the_way: bool,
        total: Resources,
        used: Resources,
        now: float,
    ) -> None:
        """A refusal counted by cause and reason; the marketplace turns away from the node, a learning policy learns."""
        cause = classify(refusal.raw).cause
        self.refused_by_cause[cause] = self.refused_by_cause.get(cause, 0) + 1
        self._count_pools_refusal(node, cause)
        self._count_reason(node, cause, test_vm_in_the_way)
        self.refused_on_probe_taught += node.spec.told_build in self.probe_taught
        self.daily[int(now // 24)]["refused"] += 1
        node.refusals += 1
        node.turned_away = True
        if self.mode.learning and cause != "public-ip":  # an IP refusal teaches nothing of the node
            self._learn(node, slot, refusal.raw, total, used, now)
        self._judge(node)

    def probe(self, now: float) -> None:
        """The deployer sends the probes GET /api/v1/probes lists (its rule, lessons.selectors.probes: up nodes running
        VMs never read, the PROBES_LISTED whose memory the model knows least per slice they still offer,
        capacity.probe_need with the group's capacity.spread, capacity.probe_rank): each a VM larger than the node, which ZOS refuses with its `usable` figure;
        reported as a probe, no failure."""
        if not self.probes or self.memory is None:
            return
        spreads: dict[str, capacity.Spread] = {}
        read: dict[str, set[int]] = {}
        ranked: list[tuple[float, int, int]] = []
        for position, node in enumerate(self.nodes):
            running = sum(1 for s in node.slots if not s.free)
            if node.status != "up" or not running:
                continue
            group = node.spec.told_build
            if group not in spreads:
                spreads[group], read[group] = self.evidence.spread(group), self.evidence.read(group)
            if node.spec.node_id in read[group]:
                continue
            unknown, _why = capacity.probe_need(
                self.memory.fits.get(group),
                build=group,
                running=running,
                node=node.spec.node_id,
                own_unknown_mru=spreads[group].own_unknown_mru(running),
            )
            rank = capacity.probe_rank(unknown, free_slices=len(node.free_slots()))
            ranked.append((-rank, node.spec.node_id, position))
        differed = {group: self.evidence.differs(self.memory, group) for group in spreads}
        for _unknown, _node_id, position in sorted(ranked)[:PROBES_LISTED]:
            self._probe_one(self.nodes[position], now)
        if "" in differed and self.evidence.read_apart(self.memory):
            self._fleet_wide_apart(now)
        for group, was in differed.items():
            if self.evidence.differs(self.memory, group) != was:
                self._judge_unread(group, now)

    def _probe_one(self, node: SimNode, now: float) -> None:
        """One probe: a VM larger than the node, which ZOS refuses with its `usable` figure (reported as a probe)."""
        group = node.spec.told_build
        total, used = node.machine.reading()
        size = SliceSize(cru=1, mru=total.mru + capacity.PROBE_BEYOND_MRU, sru=0)
        self.seq += 1
        self.probes_sent += 1
        node.machine.test_vm = test_vm_running(node.spec, now)
        vm, refusal = node.machine.place(size, name="probe", deployment_id=self.seq)
        node.machine.test_vm = False
        if vm is not None:  # ZOS never takes a VM larger than the node; guard the simulation's own rule
            raise AssertionError(f"node {node.spec.node_id} took a probe larger than its memory")
        diagnosis = classify(refusal.raw)
        if diagnosis.cause == "memory" and diagnosis.usable_bytes is not None:
            self.probe_taught.add(group)
            self._close(node, now)
            self._learn_fleet(node, total, used, diagnosis.usable_bytes, now, by=PROPOSED_PROBE)
            self._judge(node)

    def _fleet_wide_apart(self, now: float) -> None:
        """Probes read the fleet-wide group's nodes apart from its line (capacity.read_apart): its nodes share no
        build, so its line reaches none of them any more; each keeps its own readings, and an unread one is judged
        by Unread over ZOS's count (lessons.selectors.odds.fleet_wide_apart)."""
        self.memory.apart.add("")
        for other in self.nodes:
            if other.spec.told_build:
                continue
            observed = self.evidence.with_own(
                other.spec.node_id,
                capacity.Observed(pool_room_below=other.observed.pool_room_below),
                carved=len(other.slots),
                total_mru=other.spec.mru,
            )
            if observed != other.observed:
                self._close(other, now)
                other.observed = observed
                self._judge(other)

    def _judge_unread(self, group: str, now: float) -> None:
        """What the probes read moved how the group's unread nodes may differ: their offers are judged again."""
        read = self.evidence.read(group)
        for other in self.nodes:
            if (
                other.spec.told_build == group
                and other.status == "up"
                and other.spec.node_id not in read
                and other.checked > 0
                and self._odds_moved(other)
            ):
                self._close(other, now)
                self._judge(other)

    def _count_reason(self, node: SimNode, cause: str, test_vm: bool) -> None:
        """Why ZOS refused: the test VM in the way, hidden memory before or after its group's lesson, disk, ..."""
        build = node.spec.zos_build or "none"
        if cause != "memory":
            reason = cause
        elif test_vm:
            reason = "memory_test_vm"
        elif node.observed.hidden_mru_per_vm or node.observed.zos_own_mru is not None:
            reason = "memory_after_lesson"
        else:
            reason = "memory_before_lesson"
        self.refused_by_reason[reason] = self.refused_by_reason.get(reason, 0) + 1
        self.refused_by_build[build] = self.refused_by_build.get(build, 0) + 1
        if not node.refusals:
            self.first_refusals_by_build[build] = self.first_refusals_by_build.get(build, 0) + 1

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
        """The fullest node that still offers a slice (fewest free first), ties broken by `pick`. A slice
        uncertain only because its node was not read with as many VMs is taken in its turn: the deployer probes
        the node first (`_probe_first`). Any other uncertain slice is taken at its odds: nothing will tell more
        of it by waiting."""
        best: list[int] = []
        fewest = math.inf
        for position, node in enumerate(self.nodes):
            if position in tried or node.status != "up" or node.turned_away:
                continue
            if self.mode.precheck:
                offered = node.placeable or self._uncertain_offer(node)
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

    def _uncertain_offer(self, node: SimNode) -> int:
        """1 where the node has no sure slice but the precheck places its next one at UNCERTAIN_FLOOR
        odds or better: the catalog shows it at its odds (the API's placement without `min_odds`), and
        a buyer may take it; ZOS's answer then teaches the group (a bound, or a refusal's point)."""
        return int(self.memory is not None and node.checked > 0 and node.first_odds >= UNCERTAIN_FLOOR)

    def finish(self) -> None:
        for node in self.nodes:
            self._account(node, HOURS)
            node.changed_at = HOURS


def oracle_observed(machine) -> capacity.Observed:
    """What the oracle policy is told of a node before the month: its true hidden use, ZOS's own and each
    VM's (the machine's, sim.grid.records.SimNode.hidden_use), as a memory lesson the carve and precheck take."""
    own, per_vm = machine.node.hidden_use()
    return capacity.Observed(hidden_mru_per_vm=per_vm, zos_own_mru=own)
