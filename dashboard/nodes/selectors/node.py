"""Reads for the node page: the capacity bars, the catalog, the latest verdicts and the jobs.

A fixed number of queries whatever the size of the node's catalog or history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, OuterRef, Subquery
from django.utils import timezone

from dashboard import capacity
from dashboard.capacity.kept import Kept
from dashboard.deployments.selectors.holds import Held
from dashboard.deployments.selectors.placement import placement_for
from dashboard.figures.closure import closure_of
from dashboard.figures.warning import warnings_of
from dashboard.jobs.selectors.jobs import node_active_job, node_jobs
from dashboard.lessons.selectors.odds import free_slices_odds
from dashboard.lessons.selectors.reconcile import Reconciliation, node_reconcile
from dashboard.models import Deployment, Hold, Job, Node, Observation, PoolReport, Slice
from dashboard.nodes.selectors.node_room import NodeRoom, node_live, node_room, pools_told_words
from dashboard.nodes.selectors.wake import WakeAdvice, farm_wakes
from dashboard.policies.selectors.policy_book import catalog_is_stale, node_carve, policy_for_node

# How the node's build was heard (Node.zos_version_source); its pools: nodes.selectors.node_room.POOLS_TOLD_BY.
VERSION_TOLD_BY = {
    "rmb": "the node said it over RMB",
    "simulated": "the simulated node said it, over the simulated grid's RMB loopback (not rmb-peer)",
}

# Bars are drawn in thousandths of their width (SVG user units; CSP forbids inline styles).
BAR_UNITS = 1000
BAR_TITLES = {"mru": "Memory", "sru": "SSD disk"}


@dataclass(frozen=True)
class BarPart:
    kind: str  # reserve, step, hidden, occupied, free, unusable (BAR_KINDS)
    label: str
    size: int  # bytes
    x: int
    width: int
    # One (x, width) per slice, so the bar can be counted slice by slice.
    cells: tuple[tuple[int, int], ...] = ()
    source: str = ""  # where the figure came from (capacity.kept)


@dataclass(frozen=True)
class CapacityBar:
    """One resource of the node: what the policy reserves, what VMs hold, what the catalog offers."""

    resource: str  # mru or sru
    title: str
    total: int
    reserve: int
    occupied: int
    free: int
    parts: tuple[BarPart, ...]
    # Bytes the catalog promises beyond the node's total: the phantom slices, made visible.
    over: int
    total_x: int  # where the node's total ends on the bar
    over_width: int
    unusable: int
    reported_used: int | None
    reported_x: int | None

    @property
    def promised(self) -> int:
        return self.reserve + self.occupied + self.free


@dataclass(frozen=True)
class CpuFigures:
    total: int
    occupied: int
    free: int
    reported_used: int | None


@dataclass(frozen=True)
class CatalogSlice:
    slice: Slice
    charge: capacity.Resources  # what it costs the node under the policy, rootfs included
    last_deployment_state: str | None
    last_deployment_cause: str | None
    # None when the node was never read; else whether the last reading leaves room for it.
    fits_now: bool | None
    hold: Hold | None = None  # the live hold keeping this free slice for one buyer
    # A free slice's odds of deploying at the first try now (capacity.odds); None when not free.
    odds: float | None = None
    # The node's closure, for a free slice of a closed node: nothing deploys there now, so its odds are 0.
    closed_by: capacity.Closure | None = None

    # One rule for every door that shows a slice (API catalog, node page): a free slice under a live hold
    # reads "held", until its hold ends; it is not on offer, so neither does it "fit now" (issue 34, finding 4).
    @property
    def held(self) -> bool:
        return self.hold is not None and self.slice.state == Slice.State.FREE

    @property
    def state(self) -> str:
        return "held" if self.held else self.slice.state

    @property
    def held_until(self):
        return self.hold.expires_at if self.held else None

    @property
    def sure(self) -> bool | None:
        """A free slice a headline may promise (odds at or above SLICE_MIN_ODDS); None when not free."""
        return None if self.odds is None else self.odds >= settings.SLICE_MIN_ODDS

    @property
    def placeable(self) -> bool | None:
        return None if self.held else self.fits_now


@dataclass(frozen=True)
class SliceVerdictLine:
    index: int
    fits: bool
    words: str


@dataclass(frozen=True)
class NodeDetail:
    node: Node
    policy: capacity.Policy
    stale: bool
    stale_reason: str
    carve: capacity.Carve  # what the policy in force would carve now, occupied slices kept
    nominal: int
    free: int
    occupied: int
    catalog: tuple[CatalogSlice, ...]
    bars: tuple[CapacityBar, ...]
    cpu: CpuFigures
    verdicts: tuple[SliceVerdictLine, ...] | None  # None when the node's capacity was never read
    jobs: tuple[Job, ...]
    active_job: Job | None
    failed_deployments: int  # ZOS refused them (or the grid failed them)
    turned_away_deployments: int = 0  # our precheck stopped them: nothing was sent to the grid
    observations: tuple[Observation, ...] = ()  # the live ones, newest first
    reconciliation: Reconciliation | None = None  # catalog, grid and lessons side by side
    holds: tuple[Hold, ...] = ()  # the live holds of its free slices (off offer until they end)
    breakdown: NodeRoom | None = None  # what ZOS keeps and the rest, its pools and its largest disk now
    wake: WakeAdvice | None = None  # on standby: how long its farm's wakes take, and whether to wait

    @property
    def held(self) -> int:
        return len(self.holds)

    @property
    def offered(self) -> int:
        """Free slices on offer: the free ones no buyer holds."""
        return self.free - self.held

    @property
    def pools_known(self) -> bool:
        return self.node.pools is not None

    @property
    def pools_source_words(self) -> str:
        """Who reported the pools, inside a sentence ("reported by ..."): the node over RMB, the simulated
        node in process, an operator, a token; "the registration" for older rows."""
        return pools_told_words(self.node)

    @property
    def pools_origin(self) -> str | None:
        """Where the pools came from, in the API's words: rmb (the node over RMB), simulated (the simulated
        grid's node over its RMB loopback: stored as "zos"), api (a token), form (an admin on the node page),
        cli (node_register --pools); "registration" for pools given at registration before reports were
        kept; None when unknown."""
        if not self.pools_known:
            return None
        source = self.node.pools_source
        if source == PoolReport.Source.OPERATOR:
            by = self.node.pool_reports.values_list("by_id", flat=True).first()
            return "form" if by else "cli"  # the audit trail's rule: an operator with a user is the web
        if source == PoolReport.Source.ZOS:
            return "simulated"
        return source or "registration"

    @property
    def version_told_words(self) -> str:
        """How the node's build was heard, inside a sentence: over RMB, or from the simulated node in process."""
        return VERSION_TOLD_BY.get(self.node.zos_version_source, "the node said it")

    @property
    def phantom_reasons(self) -> list[tuple[str, int]]:
        """(words, count) of the stored phantom slices, by reason."""
        reasons = self.node.phantom_reasons or {}
        return [(capacity.PHANTOM_REASONS[r], reasons[r]) for r in capacity.PHANTOM_REASONS if reasons.get(r)]

    @property
    def carve_words(self) -> str:
        """What the policy would carve, as it would really be: kept slices plus new ones."""
        carve = self.carve
        kept = f"the {carve.occupied} rented or deployed slice{'s' if carve.occupied != 1 else ''} kept"
        if not carve.new_slices:
            why = "the node has no room for another" if carve.occupied else "the node cannot hold one slice"
            if carve.limited_by == "cru":
                why = f"each slice asks {carve.slice.cru} vCPUs, more than ZOS lets one VM have on this node"
            return (
                f"{carve.slices} slice{'s' if carve.slices != 1 else ''}: {kept}, no new one ({why})"
                if carve.occupied
                else (f"no slice: {why}")
            )
        size = carve.slice
        new = (
            f"{carve.new_slices} new slice{'s' if carve.new_slices != 1 else ''} of {size.cru} vCPU, "
            f"{capacity.format_size(size.mru)}, {capacity.format_size(size.sru)} disk"
            + (f" + {capacity.format_size(size.rootfs)} rootfs" if size.rootfs else "")
        )
        limit = {"mru": "memory", "sru": "disk", "cru": "CPU"}.get(carve.limited_by, "nothing left")
        head = f"{carve.slices} slice{'s' if carve.slices != 1 else ''}: "
        return head + (f"{kept} + {new}" if carve.occupied else new) + f"; limited by {limit}"

    @property
    def deployable(self) -> int:
        return self.carve.slices

    @property
    def gap(self) -> int:
        """Slices the catalog offers beyond what the node can host; negative when more would fit."""
        return self.nominal - self.deployable

    @property
    def closure(self) -> capacity.Closure | None:
        """Why the node offers nothing now (capacity.closures), decided from its row and the settings."""
        return closure_of(self.node)

    @property
    def warnings(self) -> tuple:
        """Why a deploy may fail though the node looks free (capacity.warnings), decided from its row."""
        return warnings_of(self.node)

    @property
    def rent_words(self) -> str:
        """Who rents the node, when anyone does: the marketplace (with its rent contract) or another twin."""
        node = self.node
        if node.rented_by_twin_id is None:
            return ""
        contract = f" under rent contract {node.rent_contract_id}" if node.rent_contract_id else ""
        state = " (in its grace period: unpaid)" if node.rent_state == capacity.GRACE_PERIOD else ""
        if node.rented_by_twin_id in settings.MARKETPLACE_TWIN_ID:
            return f"Rented by the marketplace (twin {node.rented_by_twin_id}){contract}{state}."
        judged = "" if settings.MARKETPLACE_TWIN_ID else " (MARKETPLACE_TWIN_ID is not set: rent is not judged)"
        return f"Rented by twin {node.rented_by_twin_id}{contract}{state}{judged}."

    @property
    def away_words(self) -> str:
        """A closed node (down, on standby, ...) places nothing: one line for the page, not a verdict per slice."""
        closed = self.closure
        return closed.sentence(free_slices=self.free) if closed else ""

    @property
    def room(self) -> int:
        return max(self.deployable - self.nominal, 0)

    # The figures stored by the last precheck (or re-register, or deploy), as the fleet page shows
    # them: the two pages must not disagree. The verdicts above are worked out per slice.
    @property
    def _held(self) -> Held:
        node = self.node
        return Held.on_node(
            self.held,
            placeable=node.placeable_now,
            phantom=node.phantom_slices,
            up_and_open=node.status == "up" and not node.closure,
        )

    @property
    def phantom(self) -> int | None:
        """Of the free slices on offer (a held one is a buyer's VM to be: neither placeable nor phantom)."""
        phantom = self.node.phantom_slices
        return None if phantom is None else max(phantom - self._held.phantom, 0)

    @property
    def placeable_now(self) -> int | None:
        placeable = self.node.placeable_now
        return None if placeable is None else max(placeable - self._held.placeable, 0)


def node_detail(*, node_id: int, job_limit: int = 10) -> NodeDetail:
    """Everything the node page shows; Node.DoesNotExist when the node is not registered."""
    node = Node.objects.get(grid_id=node_id)
    policy = policy_for_node(node)
    counts = _deployments_gone_wrong(node)
    slices = _slices_with_last_deployment(node)
    occupied = [s for s in slices if s.is_occupied]
    free = [s for s in slices if s.state == Slice.State.FREE]
    occupied_sizes = [s.size.resources for s in occupied]
    carve = node_carve(node, policy, occupied=occupied_sizes)
    stale, stale_reason = catalog_is_stale(
        node, policy, occupied=occupied_sizes, free=[s.size for s in free], carve=carve
    )
    observations = tuple(_live_observations(node))
    verdict_lines = _free_slice_verdicts(node, policy, free=free, occupied_sizes=occupied_sizes)
    holds = tuple(Hold.objects.live(timezone.now()).filter(node=node).order_by("slice_index"))
    room = node_room(node, policy, occupied=occupied_sizes, free=[s.size.resources for s in free])
    wake = _wake_advice(node, carve) if node.status == Node.Status.STANDBY else None
    return NodeDetail(
        node=node,
        policy=policy,
        stale=stale,
        stale_reason=stale_reason,
        carve=carve,
        nominal=len(slices),
        free=len(free),
        occupied=len(occupied),
        catalog=_catalog(node, policy, slices, free=free, occupied=occupied, verdicts=verdict_lines, holds=holds),
        bars=(
            capacity_bar(room.memory, reported_used=node.used_mru),
            capacity_bar(room.disk, reported_used=node.used_sru),
        ),
        cpu=CpuFigures(
            total=node.total_cru,
            occupied=sum(s.cru for s in occupied),
            free=sum(s.cru for s in free),
            reported_used=node.used_cru,
        ),
        verdicts=verdict_lines,
        jobs=tuple(node_jobs(node=node, limit=job_limit)),
        active_job=node_active_job(node=node),
        failed_deployments=counts.get(Deployment.State.FAILED, 0),
        turned_away_deployments=counts.get(Deployment.State.REFUSED, 0),
        observations=observations,
        reconciliation=node_reconcile(
            node=node, policy=policy, occupied=occupied, observations=observations, now=timezone.now()
        ),
        holds=holds,
        breakdown=room,
        wake=wake,
    )


def _wake_advice(node: Node, carve: capacity.Carve) -> WakeAdvice:
    """A standby node: its farm's measured wakes, and how many nodes up could host its slice size now."""
    size = carve.slice
    elsewhere = placement_for(cru=size.cru, mru=size.mru, sru=size.sru, best=1).can_host
    return WakeAdvice(wake=farm_wakes([node.farm_id], now=timezone.now())[node.farm_id], elsewhere=elsewhere)


def _deployments_gone_wrong(node: Node) -> dict[str, int]:
    """The node's deployments ZOS refused (failed) and those the precheck turned away (refused), by state."""
    return dict(
        Deployment.objects.filter(node=node, state__in=(Deployment.State.FAILED, Deployment.State.REFUSED))
        .order_by()
        .values_list("state")
        .annotate(n=Count("pk"))
    )


def _slices_with_last_deployment(node: Node) -> list[Slice]:
    """The node's slices in order, each with its last deployment's state and cause (one query)."""
    last_deployment = Deployment.objects.filter(slice=OuterRef("pk")).order_by("-started_at", "-pk")
    return list(
        Slice.objects.filter(node=node)
        .annotate(
            last_deployment_state=Subquery(last_deployment.values("state")[:1]),
            last_deployment_cause=Subquery(last_deployment.values("cause")[:1]),
        )
        .order_by("index")
    )


def _free_slice_verdicts(
    node: Node, policy: capacity.Policy, *, free: list[Slice], occupied_sizes: list[capacity.Resources]
) -> tuple[SliceVerdictLine, ...] | None:
    """Whether each free slice fits the node's last reading; None when its capacity was never read."""
    used = node.used
    if used is None:
        return None
    live = node_live(node, policy, occupied_sizes)  # as the stored figures judge it (catalogs.services.precheck)
    check = capacity.precheck(
        [(s.index, s.size) for s in free], node.total, used, policy, live=live, closure=closure_of(node)
    )
    return tuple(SliceVerdictLine(index=v.index, fits=v.verdict.fits, words=v.verdict.words) for v in check.verdicts)


def _catalog(
    node: Node,
    policy: capacity.Policy,
    slices: list[Slice],
    *,
    free: list[Slice],
    occupied: list[Slice],
    verdicts: tuple[SliceVerdictLine, ...] | None,
    holds: tuple[Hold, ...],
) -> tuple[CatalogSlice, ...]:
    """Each slice with its charge, last deployment, whether it fits now, its hold and its odds."""
    fits_by_index = {v.index: v.fits for v in verdicts} if verdicts is not None else {}
    hold_of = {h.slice_index: h for h in holds}
    # The odds are the chance it deploys now: on a closed node (rented by another twin, withheld, down, ...)
    # none does, whatever the memory model says (issue 45, defect 3).
    closed = closure_of(node)
    odds_of = (
        {s.index: 0.0 for s in free} if closed is not None else free_slices_odds(node, free=free, occupied=occupied)
    )
    return tuple(
        CatalogSlice(
            slice=s,
            charge=policy.vm_charge(s.cru, s.mru, s.sru),
            last_deployment_state=s.last_deployment_state,
            last_deployment_cause=s.last_deployment_cause or None,
            fits_now=fits_by_index.get(s.index) if s.state == Slice.State.FREE and verdicts is not None else None,
            hold=hold_of.get(s.index),
            odds=odds_of.get(s.index),
            closed_by=closed if s.state == Slice.State.FREE else None,
        )
        for s in slices
    )


def _live_observations(node: Node):
    # The age limit is the one lessons.services.observations distils the node's lessons with.
    oldest = timezone.now() - timedelta(days=settings.OBSERVATION_MAX_AGE_DAYS)
    return Observation.objects.filter(node=node, cleared_at__isnull=True, seen_at__gte=oldest).order_by("-seen_at")


# The bar's pattern of each part of capacity.kept: ZOS's own parts grey, what it learnt apart.
BAR_KINDS = {
    "reserve": "reserve",
    "cache": "reserve",
    "cache_step": "step",
    "hidden": "hidden",
    "vms": "occupied",
    "free": "free",
    "left": "unusable",
}


def capacity_bar(kept: Kept, *, reported_used: int | None) -> CapacityBar:
    """The parts of capacity.kept on one scale: what ZOS keeps, the VMs, the free slices, what is left.

    The scale is the larger of the node's total and what the catalog promises, so a catalog that
    promises more than the node has sticks out past the total line instead of being clipped.
    """
    total, over = kept.total, kept.over
    scale = max(total, kept.promised, 1)

    def at(offset: int) -> int:
        return round(offset * BAR_UNITS / scale)

    parts, offset = [], 0
    for part in kept.parts:
        if part.key == "over":
            continue
        cells, cell_offset = [], offset
        for charge in part.cells:
            cells.append((at(cell_offset), at(cell_offset + charge) - at(cell_offset)))
            cell_offset += charge
        width = at(offset + part.size) - at(offset)
        parts.append(BarPart(BAR_KINDS[part.key], part.label, part.size, at(offset), width, tuple(cells), part.source))
        offset += part.size
    return CapacityBar(
        resource=kept.resource,
        title=BAR_TITLES[kept.resource],
        total=total,
        reserve=kept.zos_keeps,
        occupied=kept.part("vms"),
        free=kept.part("free"),
        parts=tuple(parts),
        over=over,
        total_x=at(total),
        over_width=BAR_UNITS - at(total) if over else 0,
        unusable=kept.part("left"),
        reported_used=reported_used,
        reported_x=min(at(reported_used), BAR_UNITS) if reported_used is not None else None,
    )
