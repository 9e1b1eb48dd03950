"""Belief in proportion to evidence in the month: lessons.services.lesson_evidence's rules on in-memory readings.

Each memory reading (a buyer's refusal the marketplace reports, a proposed probe, a forged report) is
judged as the product judges it (capacity.plausible): held aside when implausible; else its node's alone
until a second independent source agrees (capacity.corroborate.second_source), then both reach the
group's fit within its line's doubt (admitted_point). Reports that teach are bounded per token in time
(LESSON_REPORTS_PER_TOKEN within LESSON_REPORTS_WINDOW). `Forger` is the hostile reporter of
`simulate_traffic --forged-reports N`: one token sending absurd and plausible made-up figures.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from dashboard import capacity
from dashboard.capacity.corroborate import Witness, admitted_point, group_expects, second_source
from dashboard.capacity.plausible import usable_judged
from dashboard.capacity.sizes import MiB

MARKETPLACE = "account marketplace"  # the buyers' refusals, reported by the marketplace's token
PROPOSED_PROBE = "a proposed probe"
FORGER = "account forger"
# settings.LESSON_REPORTS_PER_TOKEN and LESSON_REPORTS_WINDOW's defaults (3600 s).
PER_TOKEN = 30
WINDOW_HOURS = 1.0


@dataclass(frozen=True)
class Taken:
    held: bool = False
    bounded: bool = False  # refused (429) past the token's bound
    admitted: tuple[capacity.MemoryPoint, ...] = ()  # the points the group's fit takes now


@dataclass
class MonthEvidence:
    """Each group's live readings (waiting or admitted), each node's own reading, the counts."""

    readings: dict[str, list[tuple[Witness, bool]]] = field(default_factory=dict)  # (witness, admitted)
    # node -> its most cautious per-VM reading, waiting alone or admitted: a node's own readings decide its
    # own figures whatever its group takes of them (lessons.services.lesson_evidence.node_readings_apply).
    own: dict[int, int] = field(default_factory=dict)
    sent: dict[str, deque] = field(default_factory=dict)  # token -> hours of its recent reports
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # who vouched -> held, alone, group, bounded
    seq: int = 0
    # node -> the most VMs it ran at a live reading: a reading tells a node's use with as many VMs as it ran
    # then, and no more (lessons.selectors.odds.unread_among).
    vms_read: dict[int, int] = field(default_factory=dict)
    _read_memo: dict = field(default_factory=dict)
    _differs_memo: dict = field(default_factory=dict)

    def take(self, memory, group: str, point: capacity.MemoryPoint, *, usable: int, per_vm: int, by: str, now: float):
        """Judge one reading; the points its group's fit takes now (with a second source's, if that waited)."""
        counts = self.counts.setdefault(by, {"held": 0, "alone": 0, "group": 0, "bounded": 0})
        if by != PROPOSED_PROBE and self._bounded(by, now):
            counts["bounded"] += 1
            return Taken(bounded=True)
        fit = memory.fits.get(group)
        priors = {"own_prior_mru": memory.own_prior(group), "per_vm_prior_mru": memory.per_vm_prior(group)}
        judging = group_expects(fit, vms=point.vms, total_mru=point.total_mru, per_vm_prior_sd=0, **priors)
        judged = usable_judged(
            total_mru=point.total_mru, usable_mru=usable, vm_mru=point.vm_mru, vms=point.vms, expected=judging
        )
        if not judged.plausible:
            counts["held"] += 1
            return Taken(held=True)
        self.seq += 1
        self.own[point.node] = max(self.own.get(point.node, 0), per_vm)
        self.vms_read[point.node] = max(self.vms_read.get(point.node, -1), point.vms)
        mine = Witness(observation=self.seq, node=point.node, vouched_by=by, point=point)
        live = self.readings.setdefault(group, [])

        def expects(p: capacity.MemoryPoint):
            return group_expects(memory.fits.get(group), vms=p.vms, total_mru=p.total_mru, **priors)

        other = second_source(mine, [w for w, _ in live], expects=expects)
        if other is None:
            live.append((mine, False))
            counts["alone"] += 1
            return Taken()
        admitted = []
        for witness in (other, mine):
            if (witness, True) in live:
                continue
            expected = group_expects(
                memory.fits.get(group), vms=witness.point.vms, total_mru=witness.point.total_mru, **priors
            )
            admitted.append(admitted_point(witness.point, expected))
            if (witness, False) in live:
                live.remove((witness, False))
            live.append((witness, True))
            tally = self.counts.setdefault(witness.vouched_by, {"held": 0, "alone": 0, "group": 0, "bounded": 0})
            tally["group"] += 1
            if witness is other:
                tally["alone"] -= 1  # it waited alone until now
        return Taken(admitted=tuple(admitted))

    def spread(self, group: str) -> capacity.Spread:
        """The group's nodes read so far and those whose reading stayed their own (capacity.spread), as
        lessons.selectors.probes counts them from the live observations."""
        live = self.readings.get(group, [])
        read = {w.node for w, _admitted in live}
        own = {w.node for w, admitted in live if not admitted}
        return capacity.Spread(nodes_read=len(read), nodes_own=len(own))

    def read(self, group: str) -> set[int]:
        """The group's nodes with a live reading (a refusal or a probe): a probe there would tell it again."""
        key = (group, self.seq)
        if self._read_memo.get(group, (None,))[0] != key:
            self._read_memo[group] = (key, {w.node for w, _admitted in self.readings.get(group, [])})
        return self._read_memo[group][1]

    def read_at(self, node: int) -> int:
        """The most VMs `node` ran at a live reading of it; -1 for a node never read."""
        return self.vms_read.get(node, -1)

    def differs(self, memory, group: str) -> tuple[float, tuple[int, ...]] | None:
        """How an unread node of the group may differ (capacity.differs): from the nodes proposed probes read,
        each one's most excess per VM over its group's line (capacity.excess_per_vm), as
        lessons.selectors.odds.unread_differs reads them from the live observations."""
        if group and group not in memory.fits:
            return None  # no line yet: beside a prior every node of a build differs alike
        belief = memory.belief(group)
        memo = self._differs_memo.get(group)
        if memo is not None and memo[0] == self.seq and memo[1] is belief:
            return memo[2]
        excess: dict[int, int] = {}
        for witness, _admitted in self.readings.get(group, []):
            if witness.vouched_by != PROPOSED_PROBE:
                continue
            p = witness.point
            expected = memory.expected_beyond(group, vms=p.vms, total_mru=p.total_mru)
            if expected is None and not group:
                # The fleet-wide group with no line, or read apart from it: ZOS's count is all its nodes share.
                expected = capacity.zos_reserve_mru(p.total_mru)
            if expected is None:
                continue
            excess[p.node] = max(excess.get(p.node, 0), capacity.excess_per_vm(p, expected))
        found = capacity.differs(excess.values())
        self._differs_memo[group] = (self.seq, belief, found)
        return found

    def read_apart(self, memory) -> bool:
        """Whether proposed probes read the fleet-wide group's nodes apart from its line (capacity.read_apart), as
        lessons.selectors.odds.fleet_wide_apart reads it; False without a line, and once it is apart."""
        if "" not in memory.fits or "" in memory.apart:
            return False
        points = [w.point for w, _admitted in self.readings.get("", []) if w.vouched_by == PROPOSED_PROBE]
        return capacity.read_apart(
            points, lambda p: memory.expected_beyond("", vms=p.vms, total_mru=p.total_mru) or 0.0
        )

    def _bounded(self, by: str, now: float) -> bool:
        recent = self.sent.setdefault(by, deque())
        while recent and recent[0] <= now - WINDOW_HOURS:
            recent.popleft()
        if len(recent) >= PER_TOKEN:
            return True
        recent.append(now)
        return False

    def with_own(self, node: int, observed: capacity.Observed, *, carved: int, total_mru: int) -> capacity.Observed:
        """The group's figure for a node, or its own reading where that is the more cautious."""
        reading = self.own.get(node)
        if reading is None:
            return observed
        return capacity.memory_more_cautious(observed, reading, running=carved, total_mru=total_mru)


# A plausible forgery claims the node's VMs use next to nothing beyond ZOS's count: the lie that would
# make the build's line offer more than its nodes hold (the "three reports the other way").
FORGED_HIDDEN_PER_VM = 16 * MiB


@dataclass
class Forger:
    """One token's made-up reports, `total` over the month at even intervals, absurd and plausible in turn."""

    total: int
    rng: random.Random
    sent: int = 0

    def due(self, hours: float) -> list[float]:
        return [hours * (i + 1) / (self.total + 1) for i in range(self.total)]

    def forged_usable(self, *, total_mru: int, accounted_mru: int, vms: int) -> tuple[int, bool]:
        """The usable figure to claim, and whether it is the absurd kind."""
        self.sent += 1
        if self.sent % 2:
            return 1, True  # the "out of usable 1 bytes"
        return max(total_mru - accounted_mru - vms * FORGED_HIDDEN_PER_VM, 0), False


def forge(run, now: float) -> None:
    """The hostile reporter's next made-up memory refusal, on a random up node running VMs: the absurd
    kind ("usable 1 bytes") and the plausible kind (next to no hidden use) in turn, from one token."""
    if run.forger is None:
        return
    busy = [n for n in run.nodes if n.status == "up" and any(not s.free for s in n.slots)]
    if not busy:
        return
    node = run.forger.rng.choice(busy)
    total, used = node.machine.reading()
    running = sum(1 for s in node.slots if not s.free)
    usable, _absurd = run.forger.forged_usable(total_mru=total.mru, accounted_mru=used.mru, vms=running)
    run._close(node, now)
    before = run.evidence.counts.get(FORGER, {}).get("held", 0)
    run._learn_fleet(node, total, used, usable, now, by=FORGER)
    if run.evidence.counts[FORGER]["held"] == before:  # not held aside: its node takes it as a refusal's
        per_vm = capacity.hidden_use_per_vm(
            total_mru=total.mru, usable_mru=usable, accounted_mru=used.mru, running=running
        )
        lesson = capacity.Lesson("memory", hidden_mru_per_vm=per_vm)
        node.observed = capacity.observed_after(node.observed, lesson, running=len(node.slots), total_mru=total.mru)
    run._judge(node)


def per_vm_of(point: capacity.MemoryPoint) -> int:
    """The per-VM figure over the reserve a point tells (its node's own reading, as memory_model keeps it)."""
    accounted = point.vm_mru + capacity.zos_reserve_mru(point.total_mru)
    return capacity.hidden_use_per_vm(
        total_mru=point.total_mru,
        usable_mru=point.total_mru - point.actual_mru,
        accounted_mru=accounted,
        running=point.vms,
    )
