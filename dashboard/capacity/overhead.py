"""The fleet's memory overhead model: what ZOS itself and each VM really use, learnt across nodes.

ZOS refuses a VM whose memory is above total - max(counted, actual) (zosbase
pkg/primitives/statistics.go), so each memory refusal tells the node's actual use then
(MemTotal - usable) with the VMs then running. Actual = ZOS's own use + the VMs' memory +
VMs x the per-VM overhead (hypervisor, virtiofsd, console); the same ZOS build gives about the
same two figures on every node. `overhead_fit` fits them per build by least squares over the
observations, `y = actual - VMs' memory = own + VMs x per_vm`, with a node's own residual on top
and the uncertainty of each. One observation (or all at one VM count) cannot part the two: it is
attributed per VM over the node's reserve, as a single node's lesson always was.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from dashboard.capacity.lessons import Observed, hidden_use_per_vm, zos_reserve_mru
from dashboard.capacity.sizes import MiB

# The spread of a node around its build's line when the fit has no degrees of freedom left to
# measure it (two observations give an exact line): what ZOS nodes of one build differ by.
PRIOR_SPREAD_MRU = 48 * MiB


@dataclass(frozen=True)
class MemoryPoint:
    """One memory refusal (or probe): the node, its total, the VMs then running and their memory,
    and the actual use ZOS's `usable` figure told (MemTotal - usable)."""

    node: int
    total_mru: int
    vms: int
    vm_mru: int
    actual_mru: int

    @property
    def beyond_vms(self) -> int:
        """Actual use less the VMs' own memory: ZOS's own use + VMs x the per-VM overhead."""
        return self.actual_mru - self.vm_mru


@dataclass(frozen=True)
class OverheadFit:
    """A build's fitted figures. `own_mru` None: one observation's per-VM attribution (the node's
    reserve taken as ZOS's own use). Standard deviations in bytes; `spread_mru` a node's own."""

    own_mru: int | None
    per_vm_mru: int
    own_sd: int
    per_vm_sd: int
    spread_mru: int
    points: int
    nodes: int
    mean_vms: float = 0.0
    residuals: dict[int, int] = field(default_factory=dict)  # node -> its mean residual (bytes)

    def predicted(self, *, vms: int, total_mru: int, node: int | None = None) -> int:
        """Actual use beyond the VMs' memory the model expects on a node running `vms` VMs."""
        own = zos_reserve_mru(total_mru) if self.own_mru is None else self.own_mru
        return own + vms * self.per_vm_mru + self.residuals.get(node, 0)

    def predicted_sd(self, *, vms: int, node: int | None = None) -> float:
        """The prediction's standard deviation at `vms` VMs: the line's own (ordinary least squares:
        s^2 (1/n + (x - mean)^2 / Sxx)), and a node's spread unless its residual is known."""
        if self.own_mru is None:
            return float(self.spread_mru)
        spread = 0 if node in self.residuals else self.spread_mru
        line = self.spread_mru**2 / self.points + ((vms - self.mean_vms) * self.per_vm_sd) ** 2
        return math.sqrt(spread**2 + line)

    def observed_for(self, *, node: int | None, vms: int, margin_sd: float = 1.0) -> Observed:
        """The node's memory lesson for the carve and precheck: the line (and the node's residual)
        raised by `margin_sd` standard deviations, at no VMs and at `vms` (about what a full node
        runs): the chord lies above the curve between them, so the precheck rarely says yes wrongly."""
        if self.own_mru is None:
            return Observed(hidden_mru_per_vm=self.per_vm_mru)
        low = margin_sd * self.predicted_sd(vms=0, node=node)
        high = margin_sd * self.predicted_sd(vms=max(vms, 1), node=node)
        own = max(self.own_mru + self.residuals.get(node, 0) + math.ceil(low), 0)
        per_vm = max(self.per_vm_mru + math.ceil((high - low) / max(vms, 1)), 0)
        return Observed(hidden_mru_per_vm=per_vm, zos_own_mru=own)


def overhead_fit(points: Sequence[MemoryPoint], *, prior_spread_mru: int = PRIOR_SPREAD_MRU) -> OverheadFit | None:
    """Fit ZOS's own use and the per-VM overhead over one build's observations; None without any."""
    # usable 0 is censored: the host's use reached its memory, so it tells only a lower bound.
    points = [p for p in points if p.actual_mru < p.total_mru] or list(points)
    if not points:
        return None
    nodes = {p.node for p in points}
    counts = {p.vms for p in points}
    if len(counts) < 2:
        # Nothing parts ZOS's own use from the VMs': attributed per VM over each node's reserve,
        # the largest seen (the precheck must never say yes wrongly).
        per_vm = max(
            hidden_use_per_vm(
                total_mru=p.total_mru,
                usable_mru=p.total_mru - p.actual_mru,
                accounted_mru=p.vm_mru + zos_reserve_mru(p.total_mru),
                running=max(p.vms, 1),
            )
            for p in points
        )
        return OverheadFit(None, per_vm, 0, 0, prior_spread_mru, len(points), len(nodes), float(next(iter(counts))))
    n = len(points)
    mean_x = sum(p.vms for p in points) / n
    mean_y = sum(p.beyond_vms for p in points) / n
    sxx = sum((p.vms - mean_x) ** 2 for p in points)
    slope = sum((p.vms - mean_x) * (p.beyond_vms - mean_y) for p in points) / sxx
    slope = max(slope, 0.0)  # a VM never frees memory: noise below zero is none
    intercept = max(mean_y - slope * mean_x, 0.0)
    residual = {p: p.beyond_vms - (intercept + slope * p.vms) for p in points}
    # The nodes' spread: measured once there are degrees of freedom left, never below the prior
    # (few points measure it badly); the line's own uncertainty from it (ordinary least squares).
    dof = n - 2
    measured = math.sqrt(sum(r * r for r in residual.values()) / dof) if dof > 0 else 0.0
    spread = max(measured, float(prior_spread_mru))
    per_vm_sd = spread / math.sqrt(sxx)
    own_sd = spread * math.sqrt(1 / n + mean_x**2 / sxx)
    by_node: dict[int, list[float]] = {}
    for p, r in residual.items():
        by_node.setdefault(p.node, []).append(r)
    # A node's residual counts once it is its own: seen at two VM counts or more, or where the
    # line rests on other nodes too (two nodes' exact line leaves each a residual of zero).
    residuals = {node: round(sum(rs) / len(rs)) for node, rs in by_node.items() if len(nodes) > 1 or len(rs) > 1}
    return OverheadFit(
        own_mru=round(intercept),
        per_vm_mru=math.ceil(slope),
        own_sd=round(own_sd),
        per_vm_sd=math.ceil(per_vm_sd),
        spread_mru=round(spread),
        points=n,
        nodes=len(nodes),
        mean_vms=mean_x,
        residuals=residuals,
    )
