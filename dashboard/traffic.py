"""A month of marketplace traffic on simulated ZOS nodes, with the dashboard's decisions in the loop.

One fleet (a stated mix: a fifth of the nodes with hidden per-VM memory use, a third with 2-4 SSD
pools of near-equal size in an unknown device order, some standby churn) and one event stream
(deploy requests, each with the lifetime its VM will have; nodes going to standby and waking) are
replayed against each policy:

- `legacy`: the seed's carve (1 GiB reserve, 100% of the disk), no precheck, no learning;
- `flat-overhead`: the seed's proposed fix (+3 GiB, +20 GiB per VM), no precheck;
- `zos`: ZOS's accounting and disk placement, the precheck before every deploy, no learning;
- `zos-learning`: the product as shipped: `zos` plus what refusals teach (hidden memory per VM,
  full pools), used by the precheck at once and by the daily bulk re-register of stale nodes.

ZOS is played by `grid.simgrid.ZosMachine` (its own implementation of ZOS's rules: memory check
with the hidden use, storaged's placement); the dashboard's side is its own code: `capacity.carve`,
`capacity.precheck`/`fits` with the node's pools, VMs and lessons, `grid.classify` and
`capacity.refusal_lesson`, and the stale rule of the bulk re-register. The database plumbing around
them (rows, jobs, audit) is left out so that a month of a thousand nodes runs in minutes; the suite
tests that plumbing on its own.

The marketplace asks the dashboard which nodes have placeable slices (where the policy has a
precheck; otherwise any free slice), fills the fullest node first, and after a refusal stops sending
to that node until one of its VMs is released.

Figures, per policy: deploys sent to ZOS, refusals by cause, refusals per 1,000 deploys, refusals
after the first one on each node, utilisation and phantom slice-hours:
- utilisation: on nodes the marketplace can put nothing more on (full by the dashboard's word, or
  turned away after a refusal), the memory of the VMs running there over the memory ZOS would allow
  (the most 4 GiB slices with minimal disks ZOS accepts at once on the empty node), weighted by the
  time each node stays full; 1.0 means every full node holds all that ZOS would let it hold;
- phantom slice-hours: free catalog slices that ZOS would refuse if deployed now, times hours.
"""

from __future__ import annotations

import heapq
import math
import random
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

from dashboard import capacity
from dashboard.capacity import GiB, MiB, Resources, SliceSize
from dashboard.catalog_rules import catalog_stale
from dashboard.grid.classify import classify
from dashboard.grid.simgrid import ZosMachine

HOURS = 30 * 24  # a month
MEAN_LIFETIME_HOURS = 45 * 24  # about half the VMs are released within the month
RE_REGISTER_EVERY_HOURS = 24  # the beat's bulk re-register of stale nodes
MAX_ATTEMPTS = 5  # nodes the marketplace tries for one request
TICK_EVERY = 250  # events between two calls of simulate's `tick`
POLICY_NAMES = ("legacy", "flat-overhead", "zos", "zos-learning")
MEMORY_CHOICES_GIB = (8, 16, 16, 32, 32, 64)
SSD_CHOICES_GIB = (240, 480, 960, 1920)
HIDDEN_CHOICES = (256 * MiB, 512 * MiB, GiB, 1536 * MiB)


@dataclass(frozen=True)
class Mode:
    profile: str
    precheck: bool
    learning: bool
    reregister: bool


MODES = {
    "legacy": Mode("legacy", precheck=False, learning=False, reregister=False),
    "flat-overhead": Mode("flat-overhead", precheck=False, learning=False, reregister=False),
    "zos": Mode("zos", precheck=True, learning=False, reregister=True),
    "zos-learning": Mode("zos", precheck=True, learning=True, reregister=True),
}


@dataclass(frozen=True)
class Contender:
    """A policy replayed by name in the figures: its parameters, and which of the product's reactions run
    with it (`mode.profile` is not read: the parameters are `policy`). The built-in names are contenders
    too (`contender("zos-learning")`); the policy page's job passes the policy in force and a candidate."""

    name: str
    policy: capacity.Policy
    mode: Mode


def contender(name: str) -> Contender:
    """One of the four built-in policies, by name."""
    if name not in MODES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(MODES)}")
    return Contender(name=name, policy=capacity.profile(MODES[name].profile), mode=MODES[name])


@dataclass(frozen=True)
class NodeSpec:
    node_id: int
    cru: int
    mru: int
    sru: int
    pools: tuple[int, ...]  # in device order (the dashboard sees them largest first)
    hidden_mru: int  # memory each running VM really uses beyond its size


@dataclass(frozen=True)
class Event:
    at: float  # hours since the start
    kind: str  # deploy, standby, wake
    pick: float  # the marketplace's tie-break among equally full nodes, or which node changes status
    lifetime: float = 0.0  # hours the VM of a deploy request will live


def fleet_mix(nodes: int, rng: random.Random) -> list[NodeSpec]:
    """A fifth of the nodes with hidden per-VM use, a third with 2-4 near-equal SSD pools."""
    specs = []
    for i in range(nodes):
        mru = rng.choice(MEMORY_CHOICES_GIB) * GiB
        sru = rng.choice(SSD_CHOICES_GIB) * GiB
        pools: tuple[int, ...] = (sru,)
        if rng.random() < 1 / 3:
            count = rng.randint(2, 4)
            base = sru // count
            sizes = [base + rng.randint(-base // 50, base // 50) for _ in range(count)]
            pools = tuple(sizes)
            sru = sum(sizes)
        hidden = rng.choice(HIDDEN_CHOICES) if rng.random() < 0.2 else 0
        specs.append(
            NodeSpec(node_id=1 + i, cru=max(mru // (2 * GiB), 4), mru=mru, sru=sru, pools=pools, hidden_mru=hidden)
        )
    return specs


def event_stream(events: int, rng: random.Random) -> list[Event]:
    """Deploy requests (92%), standby (4%) and wake-ups (4%), spread over the month."""
    stream = []
    for _ in range(events):
        at = rng.uniform(0, HOURS)
        roll = rng.random()
        if roll < 0.92:
            stream.append(Event(at, "deploy", rng.random(), rng.expovariate(1 / MEAN_LIFETIME_HOURS)))
        else:
            stream.append(Event(at, "standby" if roll < 0.96 else "wake", rng.random()))
    return sorted(stream, key=lambda e: e.at)


# --- one node, as ZOS and as the dashboard see it ------------------------------------------


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

    @property
    def reported_pools(self) -> tuple[int, ...]:
        return tuple(sorted(self.spec.pools, reverse=True))

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
        self.nodes = [SimNode(spec=spec, machine=_boot(spec), allowed_mru=allowed[spec.node_id]) for spec in specs]
        self.releases: list[tuple[float, int, int, str]] = []  # (at, seq, node position, workload)
        self.seq = 0
        self.deploys = 0
        self.requests = 0
        self.unserved = 0
        self.precheck_stops = 0
        self.refused_by_cause: dict[str, int] = {}
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

    def _carve(self, node: SimNode, *, fresh: bool = False) -> bool:
        """Register (fresh) or re-register: re-carve the free slices; True when the catalog changed."""
        total, used = node.machine.reading()
        carve = capacity.carve(
            total,
            self.policy,
            occupied=self._occupied(node),
            pools=node.reported_pools,
            observed=self._observed(node, used.sru),
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
        )
        if not fresh and not stale:
            return False  # current by the bulk job's own rule: it leaves the node alone
        node.carved_slice_sru = size.sru
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
            if self._carve(node):
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
                self._judge(node)
                return
            cause = classify(refusal.raw).cause
            self.refused_by_cause[cause] = self.refused_by_cause.get(cause, 0) + 1
            self.daily[int(event.at // 24)]["refused"] += 1
            node.refusals += 1
            node.turned_away = True
            if self.mode.learning:
                self._learn(node, slot, refusal.raw, total, used)
            self._judge(node)
        self.unserved += 1

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


def _boot(spec: NodeSpec) -> ZosMachine:
    return ZosMachine.boot(
        spec.node_id, cru=spec.cru, mru=spec.mru, sru=spec.sru, pools=spec.pools, per_vm_overhead_mru=spec.hidden_mru
    )


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


def allowed_mru(spec: NodeSpec) -> int:
    """The memory ZOS would let the empty node hold at once in 4 GiB slices with 10 GiB disks."""
    machine = _boot(spec)
    size = SliceSize(cru=1, mru=4 * GiB, sru=10 * GiB)
    count = 0
    while True:
        vm, _refusal = machine.place(size, name=f"a{count}", deployment_id=count + 1)
        if vm is None:
            return count * size.mru
        count += 1


@dataclass(frozen=True)
class PolicyFigures:
    name: str
    requests: int
    deploys: int
    refused: int
    refused_by_cause: dict[str, int]
    refused_per_1000: float
    refused_after_first: int
    nodes_refused: int
    refused_without_hidden_use: int  # refusals on nodes whose memory use is all accounted
    precheck_stops: int
    unserved: int
    utilisation: float
    phantom_slice_hours: float
    seconds: float
    daily: list[dict]
    drift: dict = field(default_factory=dict)  # catalog_truth and the drift's counts, with simulate(drift=...)

    def as_dict(self) -> dict:  # the figures in the order of the fields, the drift's (if any) merged in
        return {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("name", "daily", "drift")
        } | self.drift


@dataclass(frozen=True)
class Simulation:
    nodes: int
    events: int
    seed: int
    mix: dict
    policies: dict[str, PolicyFigures]
    seconds: float
    peak_memory_mib: float

    def as_dict(self) -> dict:
        return {
            "nodes": self.nodes,
            "events": self.events,
            "seed": self.seed,
            "hours": HOURS,
            "mix": self.mix,
            "policies": {name: figures.as_dict() for name, figures in self.policies.items()},
            "seconds": self.seconds,
            "peak_memory_mib": self.peak_memory_mib,
        }


def simulate(
    *,
    nodes: int | None = None,
    events: int,
    seed: int,
    policies: Sequence[str | Contender] = POLICY_NAMES,
    progress=None,
    fleet: Sequence[NodeSpec] | None = None,
    tick: Callable[[str, int, int], None] | None = None,
    drift=None,
) -> Simulation:
    """Replay one fleet and one event stream against each policy; the figures side by side.

    The fleet is the stated mix of `nodes` nodes, or the caller's `fleet` (the seed then draws only
    the events). A policy is a built-in name or a Contender. `progress(figures)` is called as each
    policy finishes; `tick(name, events_done, events)` every TICK_EVERY events, for a heartbeat;
    `drift` (a traffic_drift.Drift) adds what the grid does behind the catalog's back, and catalog_truth.
    """
    contenders = [p if isinstance(p, Contender) else contender(p) for p in policies]
    names = [c.name for c in contenders]
    if len(set(names)) != len(names):
        raise ValueError(f"each policy needs its own name; got {', '.join(names)}")
    if fleet is not None:
        if not fleet:
            raise ValueError("the fleet needs at least one node")
        if len({spec.node_id for spec in fleet}) != len(fleet):
            raise ValueError("each node of the fleet needs its own node_id")
        nodes = len(fleet)
    if nodes is None or nodes < 1 or events < 0:
        raise ValueError("nodes must be at least 1 and events zero or more")
    started = time.perf_counter()
    rng = random.Random(seed)
    specs = fleet_mix(nodes, rng) if fleet is None else list(fleet)
    stream = event_stream(events, rng) if drift is None else drift.stream(event_stream(events, rng), rng)
    allowed = {spec.node_id: allowed_mru(spec) for spec in specs}
    results = {}
    for entrant in contenders:
        name = entrant.name
        run_started = time.perf_counter()
        run = Run(entrant, specs, allowed) if drift is None else drift.run(entrant, specs, allowed)
        next_reregister = RE_REGISTER_EVERY_HOURS
        for done, event in enumerate(stream):
            if tick is not None and done % TICK_EVERY == 0:
                tick(name, done, len(stream))
            while next_reregister <= event.at:
                run.release_until(next_reregister)
                run.reregister_stale(next_reregister)
                next_reregister += RE_REGISTER_EVERY_HOURS
            run.release_until(event.at)
            if event.kind == "deploy":
                run.deploy(event)
            else:
                run.status(event)
        run.release_until(HOURS)
        run.finish()
        refused = sum(run.refused_by_cause.values())
        results[name] = PolicyFigures(
            name=name,
            requests=run.requests,
            deploys=run.deploys,
            refused=refused,
            refused_by_cause=dict(sorted(run.refused_by_cause.items())),
            refused_per_1000=round(1000 * refused / run.deploys, 2) if run.deploys else 0.0,
            refused_after_first=sum(max(n.refusals - 1, 0) for n in run.nodes),
            nodes_refused=sum(1 for n in run.nodes if n.refusals),
            refused_without_hidden_use=sum(n.refusals for n in run.nodes if not n.spec.hidden_mru),
            precheck_stops=run.precheck_stops,
            unserved=run.unserved,
            utilisation=round(run.util_num / run.util_den, 4) if run.util_den else 0.0,
            phantom_slice_hours=round(run.phantom_hours, 1),
            seconds=round(time.perf_counter() - run_started, 2),
            daily=run.daily,
            drift={} if drift is None else run.drift_figures(),
        )
        if progress is not None:
            progress(results[name])
    return Simulation(
        nodes=nodes,
        events=events,
        seed=seed,
        mix={
            "hidden_use": sum(1 for s in specs if s.hidden_mru),
            "several_pools": sum(1 for s in specs if len(s.pools) > 1),
            "memory_gib": sorted(set(MEMORY_CHOICES_GIB)) if fleet is None else sorted({s.mru // GiB for s in specs}),
            "ssd_gib": list(SSD_CHOICES_GIB) if fleet is None else sorted({s.sru // GiB for s in specs}),
            "standby_share_of_events": 0.08,
            "mean_lifetime_days": MEAN_LIFETIME_HOURS / 24,
        }
        | ({} if drift is None else {"drift": drift.as_dict()}),
        policies=results,
        seconds=round(time.perf_counter() - started, 2),
        peak_memory_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    )
