"""The fleet's memory overhead model: what ZOS itself and each VM really use, learnt across nodes.

ZOS refuses a VM whose memory is above total - max(counted, actual) (zosbase
pkg/primitives/statistics.go), so each memory refusal tells the node's actual use then
(MemTotal - usable) with the VMs then running. Actual = ZOS's own use + the VMs' memory +
VMs x the per-VM overhead (hypervisor, virtiofsd, console); the same ZOS build gives about the
same two figures on every node. `overhead_fit` fits them per build by least squares over the
observations, `y = actual - VMs' memory = own + VMs x per_vm`, with a node's own residual on top
and the uncertainty of each. One observation (or all at one VM count) cannot part the two: ZOS's
own use is then taken from a prior (`OWN_PRIOR_MRU`, or the fleet's own figure when the caller
has one) with its uncertainty, and the observation fits only the per-VM overhead. ZOS's own use
does not grow with the node, so the prior is one figure, not the reserve (max(10%, 2 GiB)), which
would over-count on big nodes and under-count on small ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from dashboard.capacity.lessons import Observed, used_is_the_count, zos_reserve_mru
from dashboard.capacity.line import Line, least_squares
from dashboard.capacity.sizes import GiB, MiB

# The spread of a node around its build's line when the fit has no degrees of freedom left to
# measure it (two observations give an exact line): what ZOS nodes of one build differ by.
PRIOR_SPREAD_MRU = 48 * MiB
# ZOS's own use before any line parts it from the VMs': the reserve's floor (what ZOS keeps for
# itself on a node of 20 GiB or less, zos provisiond getNodeReserved), give or take 1 GiB (the
# simulated builds use 1.5 and 2.5 GiB; zos#1826 and #1907 report figures in that range).
OWN_PRIOR_MRU = 2 * GiB
OWN_PRIOR_SD = GiB
# Once a day zosbase's provisiontest boots a 512 MiB VM for up to ~3 minutes outside ZOS's count: a
# refusal then tells actual with it running, 512 MiB and its overhead above the build's line. A point
# that far above the line the others draw (half the test VM) is read as that, and left out of the fit.
ABOVE_LINE_MRU = 256 * MiB


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
    """A build's fitted figures. `own_mru` None: a lesson kept before the prior (one observation's
    per-VM figure over the node's reserve). Standard deviations in bytes; `spread_mru` a node's own."""

    own_mru: int | None
    per_vm_mru: int
    own_sd: int
    per_vm_sd: int
    spread_mru: int
    points: int
    nodes: int
    mean_vms: float = 0.0
    residuals: dict[int, int] = field(default_factory=dict)  # node -> its mean residual (bytes)
    # Every point at one VM count (`mean_vms`): ZOS's own use is the prior's, not measured.
    on_prior: bool = False
    # The line's standard deviation at `mean_vms` from rival readings of its points (which of them
    # were beside the test VM: `_readings`), beyond what the points' spread gives it.
    line_sd: int = 0
    per_vm_doubt: int = 0  # and of the per-VM overhead (beside per_vm_sd, the line's own)

    def predicted(self, *, vms: int, total_mru: int, node: int | None = None) -> int:
        """Actual use beyond the VMs' memory the model expects on a node running `vms` VMs."""
        own = zos_reserve_mru(total_mru) if self.own_mru is None else self.own_mru
        return own + vms * self.per_vm_mru + self.residuals.get(node, 0)

    def predicted_sd(self, *, vms: int, node: int | None = None, doubt: bool = True) -> float:
        """The prediction's standard deviation at `vms` VMs: the line's own (ordinary least squares:
        s^2 (1/n + (x - mean)^2 / Sxx)), and a node's spread unless its residual is known; with `doubt`,
        its rival readings' too (line_sd, per_vm_doubt)."""
        if self.own_mru is None:
            return float(self.spread_mru)
        spread = 0 if node in self.residuals else self.spread_mru
        line_sd, per_vm_sd = (
            (self.line_sd, math.hypot(self.per_vm_sd, self.per_vm_doubt)) if doubt else (0, self.per_vm_sd)
        )
        line = self.spread_mru**2 / self.points + line_sd**2 + ((vms - self.mean_vms) * per_vm_sd) ** 2
        return math.sqrt(spread**2 + line)

    def observed_for(self, *, node: int | None, vms: int, margin_sd: float = 1.0) -> Observed:
        """The node's memory lesson for the carve and precheck: the line (and the node's residual)
        raised by `margin_sd` standard deviations, at no VMs and at `vms` (about what a full node
        runs): the chord lies above the curve between them, so the precheck rarely says yes wrongly."""
        if self.own_mru is None:
            return Observed(hidden_mru_per_vm=self.per_vm_mru)
        if self.on_prior:
            return self._hopeful_for(vms=vms, margin_sd=margin_sd)
        # The carve's chord is the line's own; the rival readings' doubt is for the odds, which the
        # deployments ZOS took then narrow (capacity.hidden), as a chord cannot.
        low = margin_sd * self.predicted_sd(vms=0, node=node, doubt=False)
        high = margin_sd * self.predicted_sd(vms=max(vms, 1), node=node, doubt=False)
        own = max(self.own_mru + self.residuals.get(node, 0) + math.ceil(low), 0)
        per_vm = max(self.per_vm_mru + math.ceil((high - low) / max(vms, 1)), 0)
        return Observed(hidden_mru_per_vm=per_vm, zos_own_mru=own)

    def _hopeful_for(self, *, vms: int, margin_sd: float) -> Observed:
        """The lesson of points all at one VM count x0, where they tell y0 = ZOS's own use + x0 x per VM:
        every line through (x0, y0) with ZOS's own use from 0 to y0 is possible, so the node is judged by
        the lowest of them where it runs (`vms`): own use 0 below x0, no per-VM overhead above it, raised by
        the nodes' spread. The precheck then never refuses what a ZOS the refusals allow would take; what
        it lets through beyond is a guess its odds say (predicted_sd keeps the prior's uncertainty), and a
        refusal there is at a new VM count: it parts the line."""
        x0 = self.mean_vms
        y0 = self.own_mru + x0 * self.per_vm_mru
        spread = math.ceil(margin_sd * self.spread_mru * math.sqrt(1 + 1 / max(self.points, 1)))
        if x0 > 0 and vms <= x0:
            return Observed(hidden_mru_per_vm=math.ceil(y0 / x0), zos_own_mru=spread)
        return Observed(hidden_mru_per_vm=0, zos_own_mru=math.ceil(y0) + spread)


def count_decided(point: MemoryPoint) -> bool:
    """Whether ZOS's count decided the refusal (used = counted to the byte: the VMs and the reserve), so its
    `usable` tells the count, not actual: actual beyond the VMs was at most the reserve, a bound and no
    point of the line (as a deployment ZOS took is: capacity.hidden.Accepted)."""
    return used_is_the_count(total_mru=point.total_mru, vm_mru=point.vm_mru, actual_mru=point.actual_mru)


def overhead_fit(
    points: Sequence[MemoryPoint],
    *,
    prior_spread_mru: int = PRIOR_SPREAD_MRU,
    prior_own_mru: int = OWN_PRIOR_MRU,
    prior_own_sd: int = OWN_PRIOR_SD,
    bounds: Mapping[int, int] | None = None,
) -> OverheadFit | None:
    """Fit ZOS's own use and the per-VM overhead over one build's observations; None without any.
    `prior_own_mru` (± `prior_own_sd`) stands for ZOS's own use while the points lie at one VM count.
    Up to READINGS_MAX_POINTS points, each may be read as told beside the daily test VM (`_readings`,
    whose rivals raise the fit's doubt; `bounds`, capacity.tightest of the deployments ZOS took, weigh
    the readings: a line above one is unlikely); beyond, points far above the line (ABOVE_LINE_MRU) are left
    out, once: a VM never frees memory, so hidden use only adds to the line, the points' floor."""
    # usable 0 is censored: the host's use reached its memory, so it tells only a lower bound.
    points = [p for p in points if p.actual_mru < p.total_mru] or list(points)
    # Where ZOS's count decided (used = counted to the byte: few VMs on a big node's reserve, as a probe
    # may find), usable tells the count, not actual, only that actual was no more: no point of the line.
    points = [p for p in points if not count_decided(p)] or points
    if not points:
        return None
    priors = (prior_spread_mru, prior_own_mru, prior_own_sd)
    if len(points) <= READINGS_MAX_POINTS:
        return _readings(points, *priors, bounds=bounds or {})
    return _far_left_out(points, *priors)


def _far_left_out(points, prior_spread_mru, prior_own_mru, prior_own_sd) -> OverheadFit:
    """The line with the points far above the others' line left out, each far node keeping its excess
    (the rule for more points than `_readings` weighs one by one)."""
    fit = _fit(points, prior_spread_mru, prior_own_mru, prior_own_sd)
    if fit.on_prior:
        return fit
    # Each point against the line the others draw (where they part one): of those far above it, the one
    # whose leaving out leaves ZOS the most own use (an end point can look high against a line tilted by
    # the real outlier at the other end; that line's own use falls, as no ZOS's does).
    above = []
    for i, point in enumerate(points):
        others = [*points[:i], *points[i + 1 :]]
        if len({p.vms for p in others}) < 2:
            continue
        line = _line(others)
        slope, intercept = line.slope, line.intercept
        if point.beyond_vms - (max(intercept, 0.0) + max(slope, 0.0) * point.vms) > ABOVE_LINE_MRU:
            above.append((intercept, i))
    if above:
        # Three points leave the others' line one degree: two may look far, only one is; more points
        # tell each far point apart, and all go (the test VM runs on any node, any day).
        far = [points[i] for _intercept, i in above] if len(points) > 3 else [points[max(above)[1]]]
        if len({p.vms for p in points if p not in far}) >= 2:
            return _apart(points, far, prior_spread_mru, prior_own_mru, prior_own_sd)
    line = fit.own_mru or 0
    far = [p for p in points if p.beyond_vms - (line + p.vms * fit.per_vm_mru) > ABOVE_LINE_MRU]
    if not far or len(far) == len(points):
        return fit
    return _apart(points, far, prior_spread_mru, prior_own_mru, prior_own_sd)


# Up to this many points every reading of which were beside the test VM is weighed (2^n readings).
READINGS_MAX_POINTS = 8
# zosbase provisiontest's VM (1 vCPU / 512 MiB, outside ZOS's count): a refusal beside it tells
# actual with one VM more, of this memory, running.
TEST_VM_MRU = 512 * MiB
# The odds against one refusal being beside the test VM, as a cost in log odds: ln((1 - q) / q) with
# q = 1/3 (once the fleet is learnt, the test VM is much of what is left to refuse).
TEST_VM_COST = math.log(2)
# A point far above a reading's line (a node of its own deviation) costs this, however far.
FAR_COST = math.log(4)
RIVAL_WEIGHT_MIN = 0.01  # readings weighing less than this beside the best are ignored
BOUND_COST_MAX = FAR_COST  # as a far point: a bound may rest on a stale count of VMs (unreported releases)


def _readings(points, prior_spread_mru, prior_own_mru, prior_own_sd, *, bounds: Mapping[int, int]) -> OverheadFit:
    """The best reading of few points, and the doubt its rivals leave. A refusal beside the daily test
    VM tells the line at one VM more and TEST_VM_MRU above it, and two or three points cannot say which
    of them were: every subset is tried as those, each reading fitted as `_far_left_out` fits, and
    scored by its misfit over the spread (a far point FAR_COST), ZOS's own use against its prior and
    TEST_VM_COST a point beside the test VM. The best is returned, its uncertainty raised by its
    rivals' (weighted by exp(-cost)), so a line few points draw is not trusted where a rival parts."""
    readings = []
    for beside in _subsets(len(points)):
        read = [_beside_test_vm(p) if i in beside else p for i, p in enumerate(points)]
        fit = _far_left_out(read, prior_spread_mru, prior_own_mru, prior_own_sd)
        own = fit.own_mru or 0
        misfit = 0.0
        for p in read:
            off = p.beyond_vms - own - p.vms * fit.per_vm_mru
            misfit += FAR_COST if off > ABOVE_LINE_MRU else min(off**2 / (2 * prior_spread_mru**2), FAR_COST)
        prior = 0.0 if fit.on_prior else (own - prior_own_mru) ** 2 / (2 * prior_own_sd**2)
        taken = sum(_bound_cost(own + vms * fit.per_vm_mru, room, prior_spread_mru) for vms, room in bounds.items())
        readings.append((misfit + prior + taken + TEST_VM_COST * len(beside), fit))
    best_cost, best = min(readings, key=lambda r: r[0])
    rivals = [(math.exp(best_cost - cost), fit) for cost, fit in readings if fit is not best]
    rivals = [(w, fit) for w, fit in rivals if w >= RIVAL_WEIGHT_MIN and fit.own_mru is not None]
    if not rivals or best.own_mru is None:
        return best
    total = 1.0 + sum(w for w, _ in rivals)

    def doubt(value) -> float:
        return math.sqrt(sum(w * (value(fit) - value(best)) ** 2 for w, fit in rivals) / total)

    return replace(
        best,
        line_sd=math.ceil(doubt(lambda f: f.own_mru + best.mean_vms * f.per_vm_mru)),
        own_sd=math.ceil(math.hypot(best.own_sd, doubt(lambda f: f.own_mru))),
        per_vm_doubt=math.ceil(doubt(lambda f: f.per_vm_mru)),
    )


def _bound_cost(line: float, room: int, spread: int) -> float:
    """-ln P(a node of the line had at most `room` beyond its VMs' memory), as ZOS took a VM there."""
    chance = 0.5 * (1.0 + math.erf((room - line) / (spread * math.sqrt(2.0))))
    return min(-math.log(max(chance, 1e-300)), BOUND_COST_MAX)


def _beside_test_vm(point: MemoryPoint) -> MemoryPoint:
    """The point read as refused beside the test VM: one VM more, of TEST_VM_MRU, was running."""
    return replace(point, vms=point.vms + 1, vm_mru=point.vm_mru + TEST_VM_MRU)


def _subsets(n: int):
    """Every subset of range(n), as sets, the empty one first."""
    for mask in range(2**n):
        yield {i for i in range(n) if mask >> i & 1}


def _apart(points, far, prior_spread_mru, prior_own_mru, prior_own_sd) -> OverheadFit:
    """The line of the points but `far`; each far point's node keeps its excess as its own residual
    (a node of its own deviation and one refused beside the test VM look alike from one refusal: both
    are judged by what they told, the group by the rest)."""
    rest = [p for p in points if p not in far]
    fit = _fit(rest, prior_spread_mru, prior_own_mru, prior_own_sd)
    own = fit.own_mru or 0
    residuals = dict(fit.residuals)
    for p in far:
        excess = round(p.beyond_vms - (own + p.vms * fit.per_vm_mru))
        residuals[p.node] = max(residuals.get(p.node, excess), excess)
    return replace(fit, points=len(points), nodes=len({p.node for p in points}), residuals=residuals)


def _line(points: Sequence[MemoryPoint]) -> Line:
    """Least squares of beyond_vms over VMs; points at two VM counts at least."""
    return least_squares([(p.vms, p.beyond_vms) for p in points])


def _fit(points: Sequence[MemoryPoint], prior_spread_mru: int, prior_own_mru: int, prior_own_sd: int) -> OverheadFit:
    nodes = {p.node for p in points}
    counts = {p.vms for p in points}
    if len(counts) < 2:
        return _fit_on_prior(points, prior_own_mru, prior_own_sd, prior_spread_mru)
    n = len(points)
    line = _line(points)
    mean_x, mean_y, sxx = line.mean_x, line.mean_y, line.sxx
    slope = max(line.slope, 0.0)  # a VM never frees memory: noise below zero is none
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


def _fit_on_prior(points: Sequence[MemoryPoint], own: int, own_sd: int, spread: int) -> OverheadFit:
    """All points at one VM count: ZOS's own use is the prior's, the per-VM overhead what is left of
    the points' mean over the VMs. The line pivots about the points, so its uncertainty is the
    prior's at no VMs and the spread's alone where the points are."""
    vms = points[0].vms
    mean_y = sum(p.beyond_vms for p in points) / len(points)
    if vms == 0:  # an empty node's refusal tells ZOS's own use alone; nothing of a VM's
        return OverheadFit(
            round(mean_y), 0, spread, own_sd, spread, len(points), len({p.node for p in points}), on_prior=True
        )
    own = min(own, max(round(mean_y), 0))  # the points say ZOS uses no more than they show
    return OverheadFit(
        own_mru=own,
        per_vm_mru=max(math.ceil((mean_y - own) / vms), 0),
        own_sd=own_sd,
        per_vm_sd=math.ceil(own_sd / vms),
        spread_mru=spread,
        points=len(points),
        nodes=len({p.node for p in points}),
        mean_vms=float(vms),
        on_prior=True,
    )


# What a VM's hidden use may be before a build is seen at all (the simulated builds: 0.75 and 1 GiB).
PER_VM_PRIOR_SD = GiB
# A probe (GET /api/v1/probes) asks this much more than the node has: never placeable, whatever it runs.
PROBE_BEYOND_MRU = GiB


def probe_need(
    fit: OverheadFit | None, *, build: str, running: int, node: int | None, own_unknown_mru: float = 0.0
) -> tuple[float, str]:
    """How much a probe of a node running `running` VMs would teach (the standard deviation of its memory
    use the model has now, bytes), and why; the probes' selector ranks nodes by it. `own_unknown_mru`: what
    is not known of a use of the node's own, where it was never read (capacity.spread)."""
    name = build or "version unknown"
    if fit is None:
        unknown = (OWN_PRIOR_SD**2 + (running * PER_VM_PRIOR_SD) ** 2 + own_unknown_mru**2) ** 0.5
        return unknown, f"ZOS {name} has no refusal yet: its hidden memory use is not known"
    line = fit.predicted_sd(vms=running, node=node)
    unknown = math.hypot(line, own_unknown_mru)
    if fit.on_prior and line >= own_unknown_mru:
        return unknown, f"ZOS {name}'s refusals are all at {fit.mean_vms:.0f} VMs; this node runs {running}"
    if own_unknown_mru > line:
        return unknown, f"nodes of ZOS {name} differ from its line; this node runs {running} VMs and was never read"
    return unknown, f"this node runs {running} VMs, away from where ZOS {name} was seen refusing"
