"""The fleet and its nodes: totals, the filtered table, one node, its precheck and its re-register."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from django.http import Http404
from django.utils import timezone
from ninja import Field, Path, Query, Router, Schema

from dashboard.api.auth import ACT, PRECHECK, READ, REPORT
from dashboard.api.errors import BadInput, GridTrouble
from dashboard.api.inputs import INTEGER_MAX, Counting, Line, Whole
from dashboard.api.jobs import job_out, job_started
from dashboard.api.node_room import room_out, wake_out
from dashboard.api.schemas import (
    ERRORS_OR_404,
    ErrorOut,
    FleetTotalsOut,
    JobStartedOut,
    NodeDetailOut,
    NodesPageOut,
    PrecheckIn,
    PrecheckOut,
    ReregisterIn,
)
from dashboard.api.writes import api_write
from dashboard.catalogs.services.precheck import PrecheckReport, precheck_prepare, precheck_write
from dashboard.deployments.selectors.holds import buyer_shown
from dashboard.deployments.services.holds import HoldConflict, hold_words
from dashboard.figures.selectors.fleet import SORT_KEYS, FleetFilters, fleet_page
from dashboard.grid.types import GridError
from dashboard.jobs.services.jobs import job_request
from dashboard.models import Hold, Job, Node
from dashboard.nodes.selectors.node import NodeDetail, node_detail
from dashboard.nodes.selectors.uptime import uptime_percent
from dashboard.nodes.services.pools import PoolsError, pools_report
from dashboard.policies.selectors.carries import NodeCarries, node_carries

router = Router(tags=["fleet"])


def node_id_path():
    return Path(..., ge=0, le=INTEGER_MAX, description="the grid's node id")


class NodesFilter(Schema):
    farm_id: Whole | None = None
    status: Node.Status | None = None
    stale: bool | None = None
    tier: Literal["now", "after-wake", "blocked", "closed"] | None = Field(
        None,
        description="nodes whose deployable slices are usable now (up and open), after wake (standby), blocked "
        "(down, unknown) or closed (withheld, rented by another twin, ...): figures.selectors.tiers",
    )
    has_phantoms: bool | None = None
    search: Line | None = Field(
        None,
        max_length=128,
        description="a farm name (contains, any case); digits also match a node id by its leading digits, or a farm id",
    )
    sort: Line = Field("node_id", max_length=32, description=f"one of {', '.join(SORT_KEYS)}; prefix - for descending")
    page: Counting = 1
    per_page: int = Field(50, ge=1, le=500)


@router.get("/fleet", auth=READ, response={200: FleetTotalsOut, **ERRORS_OR_404}, summary="Fleet totals")
def fleet(request):
    return fleet_page(per_page=1).totals


@router.get(
    "/nodes",
    auth=READ,
    response={200: NodesPageOut, **ERRORS_OR_404},
    summary="Nodes, filtered and paged as the fleet page",
)
def nodes(request, filters: Query[NodesFilter]):
    try:
        kept = FleetFilters(
            farm_id=filters.farm_id,
            status=filters.status,
            stale=filters.stale,
            has_phantoms=filters.has_phantoms,
            search=filters.search,
            tier=filters.tier,
        )
        shown = fleet_page(page=filters.page, per_page=filters.per_page, filters=kept, sort=filters.sort)
    except ValueError as exc:  # the status is an enum above, so only the sort key is left to refuse
        raise BadInput(str(exc), field="sort") from None
    return {
        "count": shown.count,
        "page": shown.page.number,
        "pages": shown.page.paginator.num_pages,
        "per_page": filters.per_page,
        "totals": shown.totals,
        "nodes": _with_uptime(shown.rows),
    }


class _RowWithUptime:
    """A fleet row as the API gives it: the row's own fields, and its uptime over 30 days."""

    def __init__(self, row, uptime: float | None) -> None:
        self._row, self.uptime_percent_30d = row, uptime

    def __getattr__(self, name):
        return getattr(self._row, name)


def _with_uptime(rows) -> list[_RowWithUptime]:
    rows = list(rows)
    shares = uptime_percent([row.pk for row in rows], now=timezone.now())
    return [_RowWithUptime(row, shares.get(row.pk)) for row in rows]


@router.get(
    "/nodes/{node_id}",
    auth=READ,
    response={200: NodeDetailOut, **ERRORS_OR_404},
    summary="One node: catalog, figures, reading ages",
)
def node(
    request,
    node_id: int = node_id_path(),
    min_odds: float | None = Query(
        None,
        ge=0,
        le=1,
        description=(
            "list only the free slices whose odds of deploying at the first try are at least this (e.g. 0.95: sure "
            "slices only); occupied slices are always listed"
        ),
    ),
):
    try:
        detail = node_detail(node_id=node_id, job_limit=0)
    except Node.DoesNotExist:
        raise Http404(f"node {node_id} is not registered") from None
    n = detail.node
    now = timezone.now()
    # Who holds a slice is the buyer's business (deployments.selectors.holds.buyer_shown: GET /holds's rule too).
    shown = buyer_shown(request.auth.user)
    return {
        "node_id": n.grid_id,
        "farm_id": n.farm_id,
        "farm_name": n.farm_name,
        "status": n.status,
        "total": n.total.as_dict(),
        "used": n.used.as_dict() if n.used is not None else None,
        "policy": {"name": detail.policy.name, "version": detail.policy.version},
        "figures": _figures_out(detail),
        "carries": _carries_out(node_carries(n, now)),
        "pools": _pools_out(detail, now),
        "reading": _reading_out(n, now),
        "catalog": [
            _catalog_slice(c, buyer_shown=shown)
            for c in detail.catalog
            if min_odds is None or c.odds is None or c.odds >= min_odds
        ],
        "verdicts": list(detail.verdicts) if detail.verdicts is not None else None,
        "active_job": job_out(detail.active_job) if detail.active_job else None,
        "failed_deployments": detail.failed_deployments,
        "turned_away_deployments": detail.turned_away_deployments,
        "grid_condition": _grid_condition_out(n, now),
        "lessons": _lessons_out(detail),
        "room": room_out(detail.breakdown) if detail.breakdown else None,
        "wake": wake_out(detail.wake) if detail.wake else None,
    }


@router.post(
    "/nodes/{node_id}/precheck",
    auth=PRECHECK,
    response={200: PrecheckOut, 503: ErrorOut, **ERRORS_OR_404},
    summary="Read the node's live capacity now and say which free slices can be placed",
)
def precheck(request, node_id: int = node_id_path(), body: PrecheckIn | None = None):
    """A fresh read from the grid, bounded by the grid client's time-outs and retries
    (GRID_CONNECT_TIMEOUT, GRID_READ_TIMEOUT, GRID_RETRIES). Stores the reading and the
    placeable/phantom figures, as the node page's precheck does; never touches the catalog.
    With max_age_seconds, answers from the stored reading when it is that young (read_now false,
    with its age); a reading past READING_MAX_AGE_MINUTES is always read again first."""
    target = node_or_404(node_id)
    asked = body.slice_index if body else None
    if asked is not None and not target.slices.filter(index=asked, state="free").exists():
        raise BadInput(
            f"node {node_id} has no free slice {asked}; ask about a free slice, or leave slice_index out",
            field="slice_index",
        )
    holds = list(Hold.objects.live(timezone.now()).filter(node=target).select_related("node"))
    buyer = (body.marketplace_id or "").strip() if body else ""
    refused = next((h for h in holds if h.slice_index == asked and h.marketplace_id != buyer), None)
    if refused is not None:
        raise HoldConflict(
            f"slice {asked} of node {node_id} is off offer: {hold_words(refused, timezone.now())}", field="slice_index"
        )
    max_age = timedelta(seconds=body.max_age_seconds) if body is not None and body.max_age_seconds is not None else None
    try:
        # Every call out (the Grid Proxy, the node over RMB) before the transaction: a silent node or a
        # slow grid never holds the node's row locked while holds, reports and re-registers wait on it.
        prepared = precheck_prepare(node=target, max_age=max_age)
    except GridError as exc:
        raise GridTrouble(exc) from None
    with api_write("nodes.precheck", request):
        report = prepared if isinstance(prepared, PrecheckReport) else precheck_write(node=target, read=prepared)
        answer = report.as_dict()
        answer["slice"] = (
            next((v for v in answer["verdicts"] if v["slice"] == asked), None) if asked is not None else None
        )
        answer["held_slices"] = [
            {"slice": h.slice_index, "hold_id": h.pk, "marketplace_id": h.marketplace_id, "expires_at": h.expires_at}
            for h in holds
        ]
        answer = PrecheckOut.model_validate(answer)
    return answer


def _figures_out(detail: NodeDetail) -> dict:
    """The node's slice figures and why some are not on offer, as the node page counts them."""
    return {
        "nominal": detail.nominal,
        "deployable": detail.deployable,
        "gap": detail.gap,
        "free": detail.offered,
        "held": detail.held,
        "occupied": detail.occupied,
        "placeable_now": detail.placeable_now,
        "phantom": detail.phantom,
        "phantom_by_reason": detail.node.phantom_reasons or {},
        "closure": detail.closure.key if detail.closure else "",
        "closure_words": detail.away_words,
        "warnings": [w.as_dict() for w in detail.warnings],
        "stale": detail.stale,
        "stale_reason": detail.stale_reason,
    }


def _carries_out(carries: NodeCarries) -> dict:
    """What the node's slices can carry beyond memory and disk: public IPv4s and GPUs."""
    read = carries.ipv4.farm.read_at is not None
    return {
        "light": carries.light,
        "gpus": carries.gpus,
        # Never read is not 0: null, so a program cannot take an unread pool for an empty one.
        "ipv4_slices": carries.ipv4.slices if carries.ipv4.known else None,
        "ipv4_words": carries.ipv4.words,
        "farm_ips_total": carries.ipv4.farm.total_ips if read else None,
        "farm_ips_free": carries.ipv4.farm.available if read else None,
        "farm_ipv4_slices": carries.ipv4.farm.ipv4_slices if read else None,
        "farm_ips_read_at": carries.ipv4.farm.read_at,
        "gpu_slices": carries.gpu_slices,
        "gpu_words": carries.gpu_words,
    }


def _pools_out(detail: NodeDetail, now: datetime) -> dict:
    """The node's SSD pools: whether they are known, from where, and how old the report is."""
    n = detail.node
    return {
        "known": detail.pools_known,
        "source": detail.pools_origin,
        "at": n.pools_reported_at if detail.pools_known else None,
        "age_seconds": _age(now, n.pools_reported_at) if detail.pools_known else None,
        "sizes": list(n.pools) if n.pools else None,
        "zos_version": n.zos_version or None,
        "refused": n.pools_refused or None,
        "refused_at": n.pools_refused_at if n.pools_refused else None,
        "zos_version_source": n.zos_version_source or None,
    }


def _reading_out(n: Node, now: datetime) -> dict:
    """When the node was last seen, prechecked and reported, and whether that reading can be trusted."""
    return {
        "seen_at": n.seen_at,
        "seen_age_seconds": _age(now, n.seen_at),
        "prechecked_at": n.prechecked_at,
        "prechecked_age_seconds": _age(now, n.prechecked_at),
        "reported_at": n.reported_at,
        "reported_age_seconds": _age(now, n.reported_at),
        "uncertain": n.reading_uncertain(now),
    }


def _grid_condition_out(n: Node, now: datetime) -> dict:
    """What the grid says of the node's health and power, and its uptime over 30 days."""
    return {
        "healthy": n.healthy,
        "power_state": n.power_state,
        "power_target": n.power_target,
        "wake_pending": n.power_target == "up" and n.power_state == "down" and n.status != "up",
        "uptime_seconds": n.uptime,
        "uptime_percent_30d": uptime_percent([n.pk], now=now)[n.pk],
        "no_contracts": n.dedicated,
    }


def _lessons_out(detail: NodeDetail) -> dict:
    """What the node's refusals taught (memory hidden per VM, a bound on its largest free pool), with the evidence."""
    n = detail.node
    return {
        "hidden_mru_per_vm": n.hidden_mru_per_vm,
        "zos_own_mru": n.zos_own_mru,
        "memory_lesson": _memory_lesson(n),
        "pool_room_below": n.observed.pool_room_below,
        "pools_known": detail.pools_known,
        "observations": [
            {
                "kind": o.kind,
                "seen_at": o.seen_at,
                "source": o.source,
                "vm_count": o.vm_count,
                "hidden_mru_per_vm": o.hidden_mru_per_vm,
                "disk_size": o.disk_size,
                "raw_error": o.raw_error,
                "standing": o.standing,
                "held_why": o.held_why,
                "vouched_by": o.vouched_by,
            }
            for o in detail.observations
        ],
    }


def _catalog_slice(c, *, buyer_shown: bool) -> dict:
    """One slice of the catalog as the API gives it: a free slice under a live hold reads "held" (with its
    end, and for an admin its buyer), not "free": it is not on offer, so neither does it "fit now"."""
    return {
        "index": c.slice.index,
        "cru": c.slice.cru,
        "mru": c.slice.mru,
        "sru": c.slice.sru,
        "state": c.state,
        "held_until": c.held_until,
        "held_for": c.hold.marketplace_id if c.held and buyer_shown else None,
        "generation": c.slice.generation,
        "fits_now": c.placeable,
        "odds": c.odds,
        "odds_closed_by": c.closed_by.key if c.closed_by else None,
        "last_deployment_state": c.last_deployment_state,
        "last_deployment_cause": c.last_deployment_cause,
    }


@router.post(
    "/nodes/{node_id}/reregister",
    auth=ACT,
    response={200: JobStartedOut, 202: JobStartedOut, 503: ErrorOut, **ERRORS_OR_404},
    summary="Start a re-register job (202), or get the node's active job (200)",
)
def reregister(request, node_id: int = node_id_path(), body: ReregisterIn | None = None):
    """202 with the new job, queued for a worker; 200 with the node's active job; 503 when the broker could
    not be told (the job is recorded as failed, with why: never "queued" for a job already failed)."""
    target = node_or_404(node_id)
    with api_write("nodes.reregister", request):
        requested = job_request(
            kind=Job.Kind.REREGISTER,
            node=target,
            by=request.auth.user,
            token=request.auth,
            source=Job.Source.API,
            dry_run=bool(body and body.dry_run),
        )
        # The answer is proven inside the transaction (one that cannot be built rolls the request back)
        # and given from the row as the commit left it.
        JobStartedOut.model_validate({"created": requested.created, "job": job_out(requested.job)})
    return job_started(requested)  # read after the commit that sent it to the broker


class PoolIn(Schema):
    """One entry of ZOS's `zos.storage.pools` answer, as the node sends it over RMB (bytes)."""

    name: Line = Field(..., min_length=1, max_length=128)
    type: Literal["ssd", "hdd"]
    size: int = Field(..., ge=0, le=2**50)
    used: int = Field(..., ge=0, le=2**50)


class PoolsIn(Schema):
    pools: list[PoolIn] = Field(..., min_length=1, max_length=64, description="zos.storage.pools, as it answered")


class PoolReportOut(Schema):
    """The pool report PUT /nodes/{id}/pools kept (NodeDetailOut's `pools`, PoolsOut, is the node's pools now)."""

    node_id: int
    pools: list[dict] = Field(description="the report as kept: name, type, size, used")
    pools_sru: list[int] = Field(description="the node's SSD pool sizes now, the carve's and the precheck's")
    source: str
    reported_at: datetime
    stale: bool = Field(description="the catalog is stale now (a catalog carved for unknown pools is, once reported)")
    stale_reason: str


@router.put(
    "/nodes/{node_id}/pools",
    auth=REPORT,
    response={200: PoolReportOut, **ERRORS_OR_404},
    summary="Report the node's storage pools, as ZOS answers zos.storage.pools over RMB",
)
def pools(request, node_id: int = node_id_path(), body: PoolsIn = ...):
    """The Grid Proxy never reports a node's pools; a deployer that speaks RMB reads them from the node
    and reports them here. Kept with the token, the time and the caller's address; the node's carve
    and precheck use them at once, and a catalog carved for unknown pools becomes stale (a
    re-register gives the larger disks back). 400, and nothing written, when the SSD pools do not add
    up to the SSD total the grid reports (within 0.5%), with the numbers."""
    target = node_or_404(node_id)
    with api_write("nodes.pools", request):
        try:
            report = pools_report(
                node=target,
                pools=[p.model_dump() for p in body.pools],
                source="api",
                by=request.auth.user,
                token=request.auth,
                origin=request.META.get("REMOTE_ADDR", ""),
            )
        except PoolsError as exc:
            raise BadInput(str(exc), field="pools") from None
        target.refresh_from_db()
        answer = PoolReportOut.model_validate(
            {
                "node_id": target.grid_id,
                "pools": report.pools,
                "pools_sru": target.pools_sru,
                "source": report.source,
                "reported_at": report.reported_at,
                "stale": target.stale,
                "stale_reason": target.stale_reason,
            }
        )
    return answer


def node_or_404(node_id: int) -> Node:
    """The registered node of this grid id, or a 404 saying it is not registered (every node path of the API)."""
    found = Node.objects.filter(grid_id=node_id).first()
    if found is None:
        raise Http404(f"node {node_id} is not registered")
    return found


def _age(now, at) -> float | None:
    return round((now - at).total_seconds(), 3) if at is not None else None


def _memory_lesson(node) -> dict | None:
    lesson = node.memory_lesson
    if lesson is None:
        return None
    return {
        "scope": node.memory_lesson_scope,
        "lesson": lesson.pk,
        "build": lesson.build,
        "zos_own_mru": node.zos_own_mru,
        "per_vm_mru": lesson.per_vm_mru,
        "learnt_at": lesson.learnt_at,
        "learnt_from": lesson.learnt_from,
        "points": lesson.points,
    }
