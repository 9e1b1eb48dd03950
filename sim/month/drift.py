"""What the real grid does behind the catalog's back, in the month of traffic, and how true the catalog stays.

`sim.month` replays a month against each policy; `Drift` (passed as `simulate(drift=...)`) adds:

- **unreported releases**: a share of the VMs that end are never reported by the marketplace; the VM is
  gone on ZOS, the catalog keeps its slice taken (an orphan);
- **foreign deploys**: a share of the deploy requests land on a node outside the catalog (a VM the catalog
  does not know, using capacity behind its back). It is no larger than the node's slice (half of it, or all
  of it) and lives as long as a marketplace VM would;
- **outages and new disks**: nodes go down (with their VMs, which ZOS keeps) and come back, beside the
  standby and wake events already there; a few nodes get a new SSD (one more pool: the total grows);
- **the product's answers** (on unless `watch=False`, the command's `--no-watch`):
  - the fleet watch reads every node every `WATCH_EVERY_HOURS` (5 minutes): its status is known from then
    on; used capacity that moved with no outcome reported is the `used-moved` node event, which runs the
    slice audit of that node; a total that changed makes the catalog stale, and the daily re-register
    (already in `traffic`) re-carves it. Modelled at the first watch tick after each change made behind the
    catalog's back (between two changes the watch reads nothing new, so the tick-by-tick read of every node
    is left out: it would cost 8,640 reads a node a month for the same effect);
  - the nightly slice audit (`AUDIT_AT_HOUR` each day) of every node.
  The audit's fix is the product's (branch `audit`, catalogs.services.catalog_audit): an orphan slice is freed as a release
  report would free it; a foreign VM takes the lowest free slice, marked deployed; with no free slice it is
  left uncounted. The simulation assumes the fix runs (CATALOG_AUDIT_AUTOFIX, or an admin's click).
  Without the watch, a node's status is known when the daily re-register reads it.

The figure, `catalog_truth`: the share of node-hours in which the node's catalog is true, that is
- its status in the catalog is its status on the grid;
- no slice is marked taken whose VM is gone (no orphan);
- when it is up, its free catalog slices, deployed now one after another against ZOS's real state
  (foreign VMs and hidden memory use included), all deploy (no phantom).
`untruth_of` is that rule, pure; `orphans` and `uncounted` are what the audit matches.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from dashboard.capacity import GiB, SliceSize
from sim.month import HOURS, SSD_CHOICES_GIB, Contender, Run, SimNode

WATCH_EVERY_HOURS = 5 / 60  # FLEET_WATCH_EVERY = 300 s
AUDIT_AT_HOUR = 3  # the nightly audit, each day at 03:00
DOWN_SHARE = 0.01  # of the events drawn: a node goes down (any node, VMs and all)
BACK_SHARE = 0.01  # a node that is down comes back
DISK_SHARE = 0.002  # a node gets a new SSD


@dataclass(frozen=True)
class DriftEvent:
    """A change behind the catalog's back, in the stream beside traffic's `Event` (same first fields)."""

    at: float
    kind: str  # foreign, down, back, disk
    pick: float  # which node
    lifetime: float = 0.0  # hours a foreign VM lives
    size: float = 0.0  # foreign: its share of the node's slice (0.5 or 1); disk: the new SSD in bytes


@dataclass(frozen=True)
class Drift:
    """The drift and the product's answers to it; `simulate(drift=Drift(...))` replays them for every policy."""

    unreported_releases: float = 0.05
    foreign_deploys: float = 0.02
    watch: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("unreported_releases", "foreign_deploys"):
            share = getattr(self, name)
            if not 0 <= share <= 1:
                raise ValueError(f"{name.replace('_', '-')} must be a fraction between 0 and 1; got {share}")

    def stream(self, events: Sequence, rng: random.Random) -> list:
        return drift_stream(events, rng, foreign_deploys=self.foreign_deploys)

    def run(self, contender: Contender, specs, allowed, **options) -> DriftRun:
        return DriftRun(contender, specs, allowed, drift=self, **options)

    def as_dict(self) -> dict:
        return {
            "unreported_releases": self.unreported_releases,
            "foreign_deploys": self.foreign_deploys,
            "watch": self.watch,
            "watch_every_s": round(WATCH_EVERY_HOURS * 3600),
            "down_share_of_events": DOWN_SHARE,
            "disk_share_of_events": DISK_SHARE,
        }


def drift_stream(events: Sequence, rng: random.Random, *, foreign_deploys: float) -> list:
    """The stream with a share of its deploys turned foreign, and outages, returns and new disks added.

    Draws from `rng` after the stream was drawn, so the fleet and the other events are those of a month
    without drift. Outages and new disks are added at DOWN_SHARE, BACK_SHARE, DISK_SHARE of the events.
    """
    out: list = []
    for event in events:
        if event.kind == "deploy" and rng.random() < foreign_deploys:
            out.append(DriftEvent(event.at, "foreign", event.pick, event.lifetime, rng.choice((0.5, 1.0))))
        else:
            out.append(event)
    for kind, share in (("down", DOWN_SHARE), ("back", BACK_SHARE), ("disk", DISK_SHARE)):
        for _ in range(round(len(events) * share)):
            size = rng.choice(SSD_CHOICES_GIB) * GiB if kind == "disk" else 0.0
            out.append(DriftEvent(rng.uniform(0, HOURS), kind, rng.random(), size=size))
    return sorted(out, key=lambda e: e.at)


# --- the rules, pure ----------------------------------------------------------------------------


def orphans(taken: Sequence[str], running: set[str]) -> list[str]:
    """Workloads the catalog holds a slice for that ZOS no longer runs."""
    return [w for w in taken if w not in running]


def uncounted(running: Sequence[str], taken: set[str]) -> list[str]:
    """VMs ZOS runs that no catalog slice accounts for (foreign)."""
    return [w for w in running if w not in taken]


def untruth_of(*, status: str, seen_status: str, orphan_count: int, phantom: int) -> str:
    """Why one node's catalog is not true now ("" when it is): its status unknown, an orphan, or (up) a phantom."""
    if status != seen_status:
        return "status"
    if orphan_count:
        return "orphan"
    return "phantom" if status == "up" and phantom else ""


def next_tick(at: float, every: float = WATCH_EVERY_HOURS) -> float:
    """The first watch read strictly after `at` (the watch runs at 0, every, 2 every, ...)."""
    return (math.floor(at / every) + 1) * every


# --- the run ------------------------------------------------------------------------------------


class DriftRun(Run):
    """traffic.Run with the drift and the product's answers; it also counts the true node-hours."""

    def __init__(self, contender: Contender, specs, allowed, *, drift: Drift, **options):
        self.drift = drift
        self.seen: dict[int, str] = {spec.node_id: "up" for spec in specs}
        self.untrue_now: dict[int, str] = {}  # node id -> why its catalog is not true ("" when it is)
        self.untrue_hours: dict[str, float] = {}  # by why; a phantom where use is hidden on its own
        self.visits: list[tuple[float, int]] = []  # (at, node position): the watch's next read of a node
        self.visiting: set[int] = set()
        self.foreign_ends: list[tuple[float, int, int, str]] = []
        self.next_audit = AUDIT_AT_HOUR if drift.watch else math.inf
        self.release_draws = random.Random(drift.seed)
        self.counts = dict.fromkeys(
            ("unreported", "foreign_placed", "foreign_refused", "down", "disk", "orphans_freed", "foreign_counted"), 0
        )
        super().__init__(contender, specs, allowed, **options)

    # --- truth accounting (hooks of traffic.Run) ---

    def _judge(self, node: SimNode) -> None:
        super()._judge(node)
        running = {vm.workload_id for vm in node.machine.vms}
        taken = [s.workload for s in node.slots if not s.free]
        self.untrue_now[node.spec.node_id] = untruth_of(
            status=node.status,
            seen_status=self.seen[node.spec.node_id],
            orphan_count=len(orphans(taken, running)),
            phantom=node.phantom,
        )

    def _account(self, node: SimNode, now: float) -> None:
        span, why = now - node.changed_at, self.untrue_now.get(node.spec.node_id, "")
        if span > 0 and why:
            if node.spec.hides_use:  # the catalog cannot know that use before a refusal tells it
                learned = node.observed.hidden_mru_per_vm or node.observed.zos_own_mru is not None
                why = f"{why}_hidden_use" + ("_learned" if learned else "")
            self.untrue_hours[why] = self.untrue_hours.get(why, 0.0) + span
        super()._account(node, now)

    def catalog_truth(self, *, where_no_use_is_hidden: bool = False) -> float:
        """The share of node-hours with a true catalog (of all nodes, or of those whose use is all accounted)."""
        nodes = [n for n in self.nodes if not (where_no_use_is_hidden and n.spec.hides_use)]
        untrue = sum(h for why, h in self.untrue_hours.items() if not (where_no_use_is_hidden and "hidden" in why))
        return round(1 - untrue / (len(nodes) * HOURS), 5) if nodes else 1.0

    # --- time: releases, foreign VMs ending, the watch's reads, the nightly audit ---

    def release_until(self, now: float) -> None:
        while True:
            due = [
                (self.releases[0][0] if self.releases else math.inf, 0),
                (self.foreign_ends[0][0] if self.foreign_ends else math.inf, 1),
                (self.visits[0][0] if self.visits else math.inf, 2),
                (self.next_audit, 3),
            ]
            at, which = min(due)
            if at > now:
                return
            if which == 0:
                self._release(*heapq.heappop(self.releases))
            elif which == 1:
                at, _seq, position, workload = heapq.heappop(self.foreign_ends)
                self._behind_back(position, at, lambda node, w=workload: node.machine.release(w))
            elif which == 2:
                _at, position = heapq.heappop(self.visits)
                self.visiting.discard(position)
                self._audit(self.nodes[position], at)
            else:
                for node in self.nodes:
                    self._audit(node, at)
                self.next_audit += 24

    def _release(self, at: float, _seq: int, position: int, workload: str) -> None:
        if self.release_draws.random() < self.drift.unreported_releases:
            self.counts["unreported"] += 1
            self._behind_back(position, at, lambda node: node.machine.release(workload))
            return
        node = self.nodes[position]  # reported: as traffic.Run.release_until frees it
        self._close(node, at)
        node.machine.release(workload)
        for slot in node.slots:
            if slot.workload == workload:
                slot.workload = ""
        node.turned_away = False
        self._judge(node)

    def _behind_back(self, position: int, at: float, change) -> None:
        """A change on the grid that nobody reports: made, judged, and read by the next watch tick."""
        node = self.nodes[position]
        self._close(node, at)
        change(node)
        self._judge(node)
        if self.drift.watch and position not in self.visiting:
            self.visiting.add(position)
            heapq.heappush(self.visits, (next_tick(at), position))

    def _audit(self, node: SimNode, at: float) -> None:
        """What one read of the node by the watch (and the audit it triggers) makes true."""
        running = [vm.workload_id for vm in node.machine.vms]
        taken = {s.workload for s in node.slots if not s.free}
        lost, foreign = orphans(list(taken), set(running)), uncounted(running, taken)
        if self.seen[node.spec.node_id] == node.status and not lost and not (foreign and node.free_slots()):
            return  # nothing to correct: the read changes nothing
        self._close(node, at)
        self.seen[node.spec.node_id] = node.status
        for slot in node.slots:
            if not slot.free and slot.workload not in running:
                slot.workload = ""  # the orphan, freed as a release report would free it
                self.counts["orphans_freed"] += 1
        taken = {s.workload for s in node.slots if not s.free}
        for workload in uncounted(running, taken):
            free = node.free_slots()
            if not free:
                break  # "no free slice left to count it against"
            min(free, key=lambda s: s.index).workload = workload
            self.counts["foreign_counted"] += 1
        self._judge(node)

    def reregister_stale(self, now: float) -> None:
        super().reregister_stale(now)
        if not self.mode.reregister:
            return
        for node in self.nodes:  # the bulk re-register read every node: its status is known
            if self.seen[node.spec.node_id] != node.status:
                self._close(node, now)
                self.seen[node.spec.node_id] = node.status
                self._judge(node)

    # --- the drift's events ---

    def status(self, event) -> None:
        if event.kind in ("standby", "wake"):
            before = [n.status for n in self.nodes]
            super().status(event)
            for position, node in enumerate(self.nodes):
                if node.status != before[position]:
                    self._behind_back(position, event.at, lambda node: None)
            return
        if event.kind == "foreign":
            self._foreign(event)
        elif event.kind == "down":
            ups = [p for p, n in enumerate(self.nodes) if n.status == "up"]
            if ups:
                self.counts["down"] += 1
                self._behind_back(ups[int(event.pick * len(ups))], event.at, _set_status("down"))
        elif event.kind == "back":
            downs = [p for p, n in enumerate(self.nodes) if n.status == "down"]
            if downs:
                self._behind_back(downs[int(event.pick * len(downs))], event.at, _set_status("up"))
        elif event.kind == "disk":
            self.counts["disk"] += 1
            self._behind_back(int(event.pick * len(self.nodes)), event.at, _new_disk(int(event.size)))
        else:
            raise ValueError(f"unknown event kind {event.kind!r}")

    def _foreign(self, event: DriftEvent) -> None:
        ups = [p for p, n in enumerate(self.nodes) if n.status == "up" and n.slots]
        if not ups:
            return
        position = ups[int(event.pick * len(ups))]
        node = self.nodes[position]
        self.seq += 1
        size, name, seq = foreign_size(node.slots[-1].size, event.size), f"f{self.seq}", self.seq
        if node.machine.copy().place(size, name=name, deployment_id=seq)[0] is None:
            self.counts["foreign_refused"] += 1  # its deployer was turned away; nothing changed on the node
            return
        self.counts["foreign_placed"] += 1
        placed = []
        self._behind_back(
            position, event.at, lambda n: placed.append(n.machine.place(size, name=name, deployment_id=seq)[0])
        )
        heapq.heappush(self.foreign_ends, (event.at + event.lifetime, seq, position, placed[0].workload_id))

    def drift_figures(self) -> dict:
        return {
            "catalog_truth": self.catalog_truth(),
            "catalog_truth_where_no_use_is_hidden": self.catalog_truth(where_no_use_is_hidden=True),
            "catalog_untrue_node_hours": {why: round(h, 1) for why, h in sorted(self.untrue_hours.items())},
            "drift": dict(self.counts),
        }


def foreign_size(slice_size: SliceSize, share: float) -> SliceSize:
    """A foreign VM of `share` (0.5 or 1) of the node's slice: no larger than the slice the audit counts it as."""
    if share >= 1:
        return slice_size
    return SliceSize(
        cru=max(slice_size.cru // 2, 1),
        mru=max(slice_size.mru // 2, 256 * 2**20),
        sru=slice_size.sru // 2,
        rootfs=0,
    )


def _set_status(status: str):
    def change(node: SimNode) -> None:
        node.status = status

    return change


def _new_disk(size: int):
    """One more SSD pool on the node: ZOS mounts it when a disk needs it; the total grows."""

    def change(node: SimNode) -> None:
        machine = node.machine
        machine.node = dataclasses.replace(machine.node, pools=(*machine.node.pools, size), sru=machine.node.sru + size)
        machine.storaged.sizes = [*machine.storaged.sizes, size]
        machine.storaged.allocated = [*machine.storaged.allocated, 0]
        node.spec = dataclasses.replace(node.spec, pools=(*node.spec.pools, size), sru=node.spec.sru + size)

    return change
