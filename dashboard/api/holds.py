"""/api/v1/holds: a buyer holds one free slice for a while (POST), lets it go (DELETE), and lists them (GET)."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from ninja import Field, Query, Router, Schema, Status

from dashboard.api.auth import READ, REPORT
from dashboard.api.inputs import Counting, Line, Strict, Whole
from dashboard.api.schemas import ERRORS, ErrorOut, PageOut
from dashboard.api.writes import api_write
from dashboard.deployments.selectors.holds import buyer_shown
from dashboard.deployments.services.holds import hold_create, hold_release
from dashboard.models import Hold

router = Router(tags=["holds"])


class HoldIn(Schema):
    node_id: Strict = Field(description="the grid's node id")
    slice_index: Strict = Field(description="the free slice to hold")
    ttl_seconds: Strict = Field(description="how long to hold it, 1 to HOLD_MAX_TTL seconds (a number, not true)")
    marketplace_id: str = Field(description="the buyer's deployment or contract id its `deployed` report will carry")
    public_ipv4: int = Field(
        0, ge=0, le=1, description="1: the VM will carry a public IPv4; the hold keeps one of the farm's free IPs"
    )


class HoldOut(Schema):
    id: int
    node_id: int
    farm_id: int
    slice_index: int
    marketplace_id: str | None = Field(
        description="the buyer's id, to a token whose user may deploy (admins: every token that may hold or report "
        "is one); null to the others (a support token sees that a slice is held, not for whom)"
    )
    state: str = Field(description="live, expired, released or deployed (a deployed report of its id took it)")
    created_at: datetime
    expires_at: datetime
    ended_at: datetime | None


class HoldsFilter(Schema):
    node_id: Whole | None = None
    marketplace_id: Line | None = Field(None, max_length=128)
    page: Counting = 1
    per_page: int = Field(500, ge=1, le=1000)


class HoldsPageOut(PageOut):
    count: int = Field(description="live holds matching the filters, on all pages")
    holds: list[HoldOut]


def hold_out(hold: Hold, now: datetime, *, request) -> dict:
    return {
        "id": hold.pk,
        "node_id": hold.node.grid_id,
        "farm_id": hold.node.farm_id,
        "slice_index": hold.slice_index,
        "marketplace_id": (hold.marketplace_id if buyer_shown(request.auth.user) else None),
        "state": hold.state_at(now),
        "created_at": hold.created_at,
        "expires_at": hold.expires_at,
        "ended_at": hold.ended_at,
    }


@router.post(
    "/holds",
    auth=REPORT,
    response={201: HoldOut, 409: ErrorOut, **ERRORS},
    summary="Hold one free slice for one buyer until it expires, is released or is deployed",
)
def holds_create(request, body: HoldIn):
    """201 with the hold; 409 when the slice is rented, deployed or held already (the answer names the
    hold and its expiry). Of many asking for one slice at once exactly one gets it. Until the hold
    ends the slice is off offer on every page, total, the placement answer, the precheck and /metrics."""
    with api_write("holds.create", request):
        hold = hold_create(
            node_id=body.node_id,
            slice_index=body.slice_index,
            ttl_seconds=body.ttl_seconds,
            marketplace_id=body.marketplace_id,
            by=request.auth.user,
            token=request.auth,
            public_ipv4=body.public_ipv4,
        )
        answer = HoldOut.model_validate(hold_out(hold, timezone.now(), request=request))
    return Status(201, answer)


@router.delete(
    "/holds/{hold_id}",
    auth=REPORT,
    response={200: HoldOut, 404: ErrorOut, 409: ErrorOut, **ERRORS},
    summary="Release a live hold (the buyer's own token, or an admin's): on offer again at once",
)
def holds_release(request, hold_id: int):
    hold = hold_release(hold_id=hold_id, by=request.auth.user, token=request.auth)
    return hold_out(hold, timezone.now(), request=request)


@router.get("/holds", auth=READ, response={200: HoldsPageOut, **ERRORS}, summary="The live holds, paged")
def holds_list(request, filters: Query[HoldsFilter]):
    """The live holds, soonest to expire first, `per_page` a page with the count of all (no silent stop).
    Each hold's buyer (`marketplace_id`) only to a token whose user may deploy, as GET /nodes/{id} says it."""
    now = timezone.now()
    holds = Hold.objects.live(now).select_related("node").order_by("expires_at", "pk")
    if filters.node_id is not None:
        holds = holds.filter(node__grid_id=filters.node_id)
    if filters.marketplace_id:
        holds = holds.filter(marketplace_id=filters.marketplace_id)
    count = holds.count()
    start = (filters.page - 1) * filters.per_page
    return {
        "count": count,
        "page": filters.page,
        "pages": max(-(-count // filters.per_page), 1),
        "per_page": filters.per_page,
        "holds": [hold_out(h, now, request=request) for h in holds[start : start + filters.per_page]],
    }
