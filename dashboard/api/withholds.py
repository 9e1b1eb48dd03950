"""Withholding a node through the API: POST (a window, from now or later, until a time or released),
DELETE (release, or lift a quarantine) and GET (the node's windows). Writes need a token with the
`act` scope whose user may withhold (admins); every write is audited as the pages' are."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.utils import timezone
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError

from dashboard.api.auth import ACT, READ
from dashboard.api.errors import BadInput
from dashboard.api.inputs import Line, WindowTime
from dashboard.api.nodes import node_or_404
from dashboard.api.schemas import ERRORS_OR_404
from dashboard.api.writes import api_write
from dashboard.models import Node, NodeWithhold
from dashboard.nodes.selectors.withholds import node_windows
from dashboard.nodes.services.withholds import REASON_MAX, WithholdError, node_withhold, withhold_release

router = Router(tags=["withhold"])
PERMISSION = "dashboard.withhold_node"


class WithholdIn(Schema):
    reason: Line = Field(..., min_length=1, max_length=REASON_MAX, description="why, shown beside the node everywhere")
    starts_at: WindowTime | None = Field(
        None, description="ISO 8601 with a zone, up to a year and a day ahead; default now (later: ahead of time)"
    )
    ends_at: WindowTime | None = Field(
        None, description="ISO 8601 with a zone, up to a year and a day ahead; default: until released"
    )


class WindowOut(Schema):
    id: int
    node_id: int
    source: str = Field(description="manual (maintenance) or quarantine")
    reason: str
    starts_at: datetime
    ends_at: datetime | None = Field(description="None: until released")
    open: bool = Field(description="in force now")
    released_at: datetime | None
    failures: list[int] = Field(description="a quarantine's failed deployment ids")


class NodeWithheldOut(Schema):
    node_id: int
    withheld: bool = Field(description="a window holds the node's free slices off offer now")
    withheld_reason: str
    withheld_until: datetime | None
    windows: list[WindowOut]


class ReleaseQuery(Schema):
    source: Literal["manual", "quarantine"] | None = Field(None, description="release only these (default: all)")


def _may_withhold(request) -> None:
    if not request.auth.user.has_perm(PERMISSION):
        raise HttpError(403, f"token {request.auth.prefix}… belongs to a user who may not withhold nodes")


def _answer(node: Node) -> NodeWithheldOut:
    node.refresh_from_db()
    now = timezone.now()
    return NodeWithheldOut.model_validate(
        {
            "node_id": node.grid_id,
            "withheld": bool(node.withheld_reason),
            "withheld_reason": node.withheld_reason,
            "withheld_until": node.withheld_until,
            "windows": [_window(row.window, node, open=row.open) for row in node_windows(node=node, now=now)],
        }
    )


def _window(w: NodeWithhold, node: Node, *, open: bool) -> dict:
    return {
        "id": w.pk,
        "node_id": node.grid_id,
        "source": w.source,
        "reason": w.reason,
        "starts_at": w.starts_at,
        "ends_at": w.ends_at,
        "open": open,
        "released_at": w.released_at,
        "failures": list(w.failures),
    }


@router.get(
    "/nodes/{node_id}/withhold",
    auth=READ,
    response={200: NodeWithheldOut, **ERRORS_OR_404},
    summary="The node's windows",
)
def withheld(request, node_id: int):
    return _answer(node_or_404(node_id))


@router.post(
    "/nodes/{node_id}/withhold",
    auth=ACT,
    response={201: NodeWithheldOut, **ERRORS_OR_404},
    summary="Withhold the node's free slices (maintenance) with a reason, from now or later, until a time or released",
)
def withhold(request, node_id: int, body: WithholdIn):
    """201 with the node's windows. 400, nothing written, for a window that ends before it starts or has
    ended, or a time with no zone. Rented and deployed slices are untouched."""
    _may_withhold(request)
    node = node_or_404(node_id)
    with api_write("nodes.withhold", request):
        try:
            node_withhold(
                nodes=[node],
                reason=body.reason,
                starts_at=body.starts_at,
                ends_at=body.ends_at,
                by=request.auth.user,
                via="api",
            )
        except WithholdError as exc:
            raise BadInput(str(exc), field=exc.field or None) from None
        answer = _answer(node)
    return Status(201, answer)


@router.delete(
    "/nodes/{node_id}/withhold",
    auth=ACT,
    response={200: NodeWithheldOut, **ERRORS_OR_404},
    summary="Release the node's windows open or to come (source=quarantine: lift its quarantine only)",
)
def release(request, node_id: int, filters: Query[ReleaseQuery]):
    """400 when nothing withholds the node (nor will)."""
    _may_withhold(request)
    node = node_or_404(node_id)
    with api_write("nodes.withhold-release", request):
        try:
            withhold_release(node=node, by=request.auth.user, via="api", source=filters.source)
        except WithholdError as exc:
            raise BadInput(str(exc), field=exc.field or None) from None
        answer = _answer(node)
    return answer
