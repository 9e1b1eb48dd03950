"""Calibration: compare what nodes really use with what their capacity policy assumes.

A node's used memory, as ZOS's memory refusals reveal it (its statistics report only the
accounted use, docs/domain.md "What the node's statistics really say"), is modelled as

    used_mru = reserve + vm_mru + vm_count * overhead

where `vm_mru` is the memory of the VMs it hosts. One sample cannot tell the node
reserve from a per-VM overhead (the seed issue's "a 4 GiB VM costs 7 GiB" was exactly
that confusion); samples taken at two or more different VM counts can, by least squares.
Disk is fitted the same way (`used_sru = reserve + vm_sru + vm_count * overhead`).

The fit itself is pure (`fit_overhead` takes plain tuples); the services read the readings in a fixed
number of queries (`readings_by_node`): memory from the refusals (the memory really used then), which are
the memory Observations not held aside and, for a refusal that taught nothing, its CapacitySample
(source "refusal"; lessons.services.observations keeps each refusal once), disk from every reading. Refusals of one
slice size all happen at the same VM count; from one count the per-VM figure is taken with
the policy's reserve (as the observation itself does).
"""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dashboard import capacity
from dashboard.capacity import MiB, format_size
from dashboard.grid.types import Grid, GridError
from dashboard.models import CapacitySample, Node, Observation, Slice
from dashboard.nodes.services.zos_cache import THROUGH_PROXY, statistics_heard
from dashboard.policies.selectors.policy_book import policies_for_nodes, policy_for_node

log = logging.getLogger(__name__)

# Grid figures are not exact to the byte (rounding in ZOS's own accounting, a few MiB of
# page cache): differences under these are noise, not a finding.
MRU_TOLERANCE = 64 * MiB
SRU_TOLERANCE = 256 * MiB

NEED_TWO_COUNTS = "need two or more VMs (at different counts) to tell reserve from per-VM overhead"


@dataclass(frozen=True)
class Fit:
    """used - vm = reserve + n * overhead, fitted over samples at several VM counts."""

    reserve: int  # bytes the node keeps whatever it hosts
    overhead_per_vm: int  # bytes each VM costs beyond its own size
    residual: int  # root-mean-square misfit in bytes: large means the model does not explain the node
    samples: int
    vm_counts: tuple[int, ...]

    def as_dict(self) -> dict:
        return {
            "reserve": self.reserve,
            "overhead_per_vm": self.overhead_per_vm,
            "residual": self.residual,
            "samples": self.samples,
            "vm_counts": list(self.vm_counts),
        }


def fit_overhead(points: Iterable[tuple[int, int, int]]) -> Fit | None:
    """Least-squares fit of (vm_count, vm_bytes, used_bytes) points; None below two distinct counts.

    Pure: plain integers in, integer bytes out.
    """
    rows = [(int(n), int(used) - int(vm)) for n, vm, used in points]
    counts = sorted({n for n, _ in rows})
    if len(counts) < 2:
        return None
    k = len(rows)
    line = capacity.least_squares(rows)
    slope, intercept = line.slope, line.intercept
    residual = (sum((y - intercept - slope * n) ** 2 for n, y in rows) / k) ** 0.5
    return Fit(
        reserve=round(intercept),
        overhead_per_vm=round(slope),
        residual=round(residual),
        samples=k,
        vm_counts=tuple(counts),
    )


def fit_pooled_overhead(groups: Iterable[Sequence[tuple[int, int, int]]]) -> int | None:
    """One per-VM overhead for many nodes, each keeping its own reserve (a fixed-effects fit).

    Pooling raw samples across nodes would mix different reserves (10% of 8 GiB is not 10% of
    256 GiB) into the slope; centring each node's samples on its own mean removes that.
    Nodes sampled at a single VM count add nothing and are skipped. None when no node can help.
    """
    sxx = 0.0
    sxy = 0.0
    for points in groups:
        rows = [(int(n), int(used) - int(vm)) for n, vm, used in points]
        if len({n for n, _ in rows}) < 2:
            continue
        line = capacity.least_squares(rows)
        sxx += line.sxx
        sxy += line.sxy
    if not sxx:
        return None
    return round(sxy / sxx)


@dataclass(frozen=True)
class Calibration:
    """One node's fitted reserve and per-VM overhead beside what its policy assumes."""

    node_id: int
    policy: str
    samples: int
    vm_counts: tuple[int, ...]
    mru: Fit | None
    sru: Fit | None
    policy_reserve_mru: int
    policy_overhead_mru: int
    policy_reserve_sru: int
    policy_overhead_sru: int
    findings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def enough(self) -> bool:
        return self.mru is not None

    @property
    def flagged(self) -> bool:
        """The node really uses more than its policy assumes: its catalog may offer phantom slices."""
        return bool(self.findings)

    @property
    def words(self) -> str:
        if not self.enough:
            seen = f"samples at {len(self.vm_counts)} VM count" + ("" if len(self.vm_counts) == 1 else "s")
            return f"node {self.node_id}: {NEED_TWO_COUNTS} ({seen} so far)"
        text = (
            f"node {self.node_id}: reserve {format_size(self.mru.reserve)}, per-VM overhead "
            f"{format_size(self.mru.overhead_per_vm)} (misfit {format_size(self.mru.residual)}, "
            f"{self.mru.samples} samples at {len(self.mru.vm_counts)} VM counts)"
        )
        if self.findings:
            return text + "; " + "; ".join(self.findings)
        return text + f"; within what policy {self.policy} assumes"

    def as_dict(self) -> dict:
        return {
            "node_id": self.node_id,
            "policy": self.policy,
            "samples": self.samples,
            "vm_counts": list(self.vm_counts),
            "enough": self.enough,
            "mru": self.mru.as_dict() if self.mru else None,
            "sru": self.sru.as_dict() if self.sru else None,
            "policy_assumes": {
                "reserve_mru": self.policy_reserve_mru,
                "overhead_mru_per_vm": self.policy_overhead_mru,
                "reserve_sru": self.policy_reserve_sru,
                "overhead_sru_per_vm": self.policy_overhead_sru,
            },
            "flagged": self.flagged,
            "findings": list(self.findings),
            "words": self.words,
        }


def calibration_judge(
    *,
    node_id: int,
    total: capacity.Resources,
    policy: capacity.Policy,
    samples: Sequence[tuple[int, int, int, int, int]],
    memory_samples: Sequence[tuple[int, int, int, int, int]] | None = None,
) -> Calibration:
    """Fit `samples` (vm_count, vm_mru, used_mru, vm_sru, used_sru) and compare with `policy`. Pure.

    `memory_samples` are those that show the memory really used (refusals); by default all.
    """
    memory = samples if memory_samples is None else memory_samples
    reserve = policy.reserve(total)
    mru = fit_overhead((n, vm_mru, used_mru) for n, vm_mru, used_mru, _, _ in memory)
    if mru is None and memory_samples:
        mru = _one_count_fit(memory_samples, reserve.mru)
    sru = fit_overhead((n, vm_sru, used_sru) for n, _, _, vm_sru, used_sru in samples)
    findings = [
        *_fit_findings(
            mru,
            "memory",
            per_vm=policy.overhead_mru_per_vm,
            reserve=reserve.mru,
            tolerance=MRU_TOLERANCE,
            policy=policy,
        ),
        # vm_sru already holds the rootfs ZOS charged, so the policy's own overhead is the whole allowance.
        *_fit_findings(
            sru, "disk", per_vm=policy.overhead_sru_per_vm, reserve=reserve.sru, tolerance=SRU_TOLERANCE, policy=policy
        ),
    ]
    return Calibration(
        node_id=node_id,
        policy=policy.name,
        samples=len(samples),
        vm_counts=tuple(sorted({s[0] for s in samples})),
        mru=mru,
        sru=sru,
        policy_reserve_mru=reserve.mru,
        policy_overhead_mru=policy.overhead_mru_per_vm,
        policy_reserve_sru=reserve.sru,
        policy_overhead_sru=policy.overhead_sru_per_vm,
        findings=tuple(findings),
    )


def _fit_findings(
    fit: Fit | None, what: str, *, per_vm: int, reserve: int, tolerance: int, policy: capacity.Policy
) -> list[str]:
    """Where the fit of one resource (`what`: memory or disk) exceeds what the policy assumes by more than
    `tolerance`: its cost per VM beyond the VM's size, and what the node keeps for itself."""
    if fit is None:
        return []
    findings = []
    if fit.overhead_per_vm > per_vm + tolerance:
        findings.append(
            f"each VM costs {format_size(fit.overhead_per_vm)} more {what} than its size, "
            f"policy {policy.name} assumes {format_size(per_vm)}"
        )
    if fit.reserve > reserve + tolerance:
        findings.append(
            f"the node keeps {format_size(fit.reserve)} of {what} for itself, "
            f"policy {policy.name} assumes {format_size(reserve)}"
        )
    return findings


def _one_count_fit(memory: Sequence[tuple[int, int, int, int, int]], reserve_mru: int) -> Fit | None:
    """All memory readings at one VM count: the per-VM figure over ZOS's own reserve."""
    counts = {n for n, *_ in memory}
    if len(counts) != 1 or 0 in counts:
        return None
    (count,) = counts
    overheads = [max(used - vm - reserve_mru, 0) / count for _, vm, used, _, _ in memory]
    return Fit(
        reserve=reserve_mru, overhead_per_vm=round(max(overheads)), residual=0, samples=len(memory), vm_counts=(count,)
    )


Sample = tuple[int, int, int, int, int]  # (vm_count, vm_mru, used_mru, vm_sru, used_sru), as calibration_judge fits


@dataclass
class Readings:
    """A node's samples: `all` for the disk fit (every reading with its SSD), `memory` for the memory fit
    (the refusals: only they tell the memory really used)."""

    all: list[Sample] = field(default_factory=list)
    memory: list[Sample] = field(default_factory=list)


def readings_by_node(node: Node | None = None) -> dict[int, Readings]:
    """Node pk -> its readings, oldest first, in two queries: the CapacitySample rows (statistics, and the
    memory refusals that taught nothing) and the memory Observations neither held aside nor cleared (the refusals that
    taught something: a refusal is kept once, as one or the other; capacity.refusal_reading converts it)."""
    dated: list[tuple[int, object, int, int, Sample, bool]] = []
    samples = CapacitySample.objects.all() if node is None else CapacitySample.objects.filter(node=node)
    for s in samples:
        reading = (s.vm_count, s.vm_mru, s.used_mru, s.vm_sru, s.used_sru)
        dated.append((s.node_id, s.at, 0, s.pk, reading, s.source == "refusal"))
    # Held aside or cleared (dropped by an admin, or its lessons cleared), a refusal no longer speaks for its node.
    refusals = Observation.objects.filter(
        kind=Observation.Kind.MEMORY, usable_mru__isnull=False, cleared_at__isnull=True
    ).exclude(standing=Observation.Standing.HELD)
    for o in refusals if node is None else refusals.filter(node=node):
        dated.append((o.node_id, o.seen_at, 1, o.pk, tuple(o.reading), True))
    by_node: dict[int, Readings] = defaultdict(Readings)
    for node_pk, _at, _source, _pk, reading, refusal in sorted(dated, key=lambda d: d[:4]):
        readings = by_node[node_pk]
        if reading[3] is not None:  # an Observation kept before its SSD was: memory only
            readings.all.append(reading)
        if refusal:
            readings.memory.append(reading)
    return dict(by_node)


def node_calibration(node: Node) -> Calibration:
    """Fit one node's readings (two queries) against its effective policy."""
    readings = readings_by_node(node).get(node.pk, Readings())
    return calibration_judge(
        node_id=node.grid_id,
        total=node.total,
        policy=policy_for_node(node),
        samples=readings.all,
        memory_samples=readings.memory,
    )


@dataclass(frozen=True)
class FleetCalibration:
    nodes: tuple[Calibration, ...]  # every node with samples, by node id
    overhead_mru_per_vm: int | None  # pooled over nodes sampled at two or more VM counts
    overhead_sru_per_vm: int | None
    # The typical node: one node with a hidden overhead pulls the pooled figure up, not this one.
    median_overhead_mru_per_vm: int | None
    reserve_mru_percent: float | None  # the fitted reserves as a share of each node's memory, averaged
    samples: int

    @property
    def flagged(self) -> tuple[Calibration, ...]:
        return tuple(c for c in self.nodes if c.flagged)

    @property
    def fitted(self) -> tuple[Calibration, ...]:
        return tuple(c for c in self.nodes if c.enough)

    @property
    def words(self) -> str:
        if self.overhead_mru_per_vm is None:
            return f"fleet: {NEED_TWO_COUNTS} on at least one node"
        flagged = ", ".join(str(c.node_id) for c in self.flagged) or "none"
        return (
            f"fleet: per-VM overhead {format_size(self.median_overhead_mru_per_vm)} memory on the median node, "
            f"{format_size(self.overhead_mru_per_vm)} pooled over all samples; "
            f"reserve about {self.reserve_mru_percent:.1f}% of memory "
            f"({len(self.fitted)} of {len(self.nodes)} sampled nodes fitted); flagged: {flagged}"
        )

    def as_dict(self) -> dict:
        return {
            "fleet": {
                "overhead_mru_per_vm": self.overhead_mru_per_vm,
                "overhead_sru_per_vm": self.overhead_sru_per_vm,
                "median_overhead_mru_per_vm": self.median_overhead_mru_per_vm,
                "reserve_mru_percent": self.reserve_mru_percent,
                "samples": self.samples,
                "nodes_sampled": len(self.nodes),
                "nodes_fitted": len(self.fitted),
                "words": self.words,
            },
            "flagged": [c.node_id for c in self.flagged],
            "nodes": [c.as_dict() for c in self.nodes],
        }


def fleet_calibration() -> FleetCalibration:
    """Every sampled node's calibration and a fleet-wide estimate, in a fixed number of queries."""
    readings = readings_by_node()
    by_node = {pk: r.all for pk, r in readings.items()}
    memory_by_node = {pk: r.memory for pk, r in readings.items()}
    nodes = list(Node.objects.filter(pk__in=readings).order_by("grid_id"))
    policies = policies_for_nodes(nodes)
    results = tuple(
        calibration_judge(
            node_id=n.grid_id,
            total=n.total,
            policy=policies[n.pk],
            samples=by_node[n.pk],
            memory_samples=memory_by_node[n.pk],
        )
        for n in nodes
    )
    mru_groups = [[(s[0], s[1], s[2]) for s in memory_by_node[n.pk]] for n in nodes]
    sru_groups = [[(s[0], s[3], s[4]) for s in by_node[n.pk]] for n in nodes]
    shares = [
        c.mru.reserve / n.total_mru * 100
        for c, n in zip(results, nodes, strict=True)
        if c.mru is not None and n.total_mru
    ]
    overheads = [c.mru.overhead_per_vm for c in results if c.mru is not None]
    return FleetCalibration(
        nodes=results,
        overhead_mru_per_vm=fit_pooled_overhead(mru_groups),
        overhead_sru_per_vm=fit_pooled_overhead(sru_groups),
        median_overhead_mru_per_vm=round(statistics.median(overheads)) if overheads else None,
        reserve_mru_percent=sum(shares) / len(shares) if shares else None,
        samples=sum(len(v) for v in by_node.values()),
    )


def capacity_sample_record(node: Node, grid: Grid) -> CapacitySample | None:
    """Record the node's own statistics beside the VMs it now hosts, for calibration.

    A failed statistics read only costs one sample; the deploy itself succeeded.
    """
    try:
        stats = grid.statistics(node.grid_id)
    except GridError as exc:
        log.warning("no capacity sample for node %s after deploy: %s", node.grid_id, exc)
        statistics_heard(node=node, answer=exc, source=THROUGH_PROXY)  # a node without its zos-cache says so
        return None
    statistics_heard(node=node, answer=stats, source=THROUGH_PROXY)
    deployed = node.slices.filter(state=Slice.State.DEPLOYED)
    count = 0
    vm_mru = 0
    vm_sru = 0
    for cru, mru, sru in deployed.values_list("cru", "mru", "sru"):
        count += 1
        vm_mru += mru
        vm_sru += sru + capacity.zos_rootfs(cru, mru)
    return CapacitySample.objects.create(
        node=node,
        source="statistics",
        vm_count=count,
        vm_mru=vm_mru,
        vm_sru=vm_sru,
        total_mru=stats.total.mru,
        total_sru=stats.total.sru,
        used_mru=max(stats.used.mru, 0),
        used_sru=max(stats.used.sru, 0),
    )
