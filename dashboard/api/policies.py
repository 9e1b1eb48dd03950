"""GET /api/v1/policies: the policies in force, fleet default first, with their node counts."""

from __future__ import annotations

from ninja import Router

from dashboard.api.auth import READ
from dashboard.api.schemas import ErrorOut, PolicyOut
from dashboard.models import Policy
from dashboard.policies.selectors.policy import policies_in_force

router = Router(tags=["policies"])


@router.get(
    "/policies", auth=READ, response={200: list[PolicyOut], 401: ErrorOut, 403: ErrorOut}, summary="Policies in force"
)
def policies(request):
    return [
        {
            "name": p.policy.name,
            "version": p.policy.version,
            "scope": p.row.scope if p.row else "builtin",
            "farm_id": p.row.farm_id if p.row else None,
            "node_id": p.row.node.grid_id if p.row and p.row.node_id else None,
            "nodes": p.nodes,
            "parameters": Policy.parameters_from(p.policy),
            # A built-in profile (no row) carries nothing: the model's defaults.
            "carries": {c: getattr(p.row, c) if p.row else Policy._meta.get_field(c).default for c in Policy.CARRIES},
        }
        for p in policies_in_force()
    ]
