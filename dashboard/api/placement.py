"""GET /api/v1/placement: where a slice of one size can go, fleet-wide, from the stored figures."""

from __future__ import annotations

from ninja import Query, Router

from dashboard.api.auth import READ
from dashboard.api.schemas import ErrorOut, PlacementIn, PlacementOut
from dashboard.selectors.placement import placement_for

router = Router(tags=["fleet"])


@router.get(
    "/placement",
    auth=READ,
    response={200: PlacementOut, 400: ErrorOut, 401: ErrorOut, 403: ErrorOut},
    summary="Where a slice of this size can go now (no grid read)",
)
def placement(request, size: Query[PlacementIn]):
    answer = placement_for(cru=size.cru, mru=size.mru, sru=size.sru, best=size.best)
    return {
        "size": {"cru": size.cru, "mru": size.mru, "sru": size.sru},
        "nodes": answer.nodes,
        "can_host": answer.can_host,
        "blocked": answer.blocked,
        "reading_max_age_seconds": answer.reading_max_age,
        "best": answer.best,
    }
