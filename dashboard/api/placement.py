"""GET /api/v1/placement: where a slice of one size can go, fleet-wide, from the stored figures."""

from __future__ import annotations

from ninja import Query, Router

from dashboard.api.auth import READ
from dashboard.api.errors import BadInput
from dashboard.api.placement_schemas import PlacementIn, PlacementOut
from dashboard.api.schemas import ERRORS
from dashboard.deployments.selectors.placement import placement_for
from dashboard.deployments.selectors.placement_rules import RulesError, rules_parsed

router = Router(tags=["fleet"])


@router.get(
    "/placement",
    auth=READ,
    response={200: PlacementOut, **ERRORS},
    summary="Where a slice of this size can go now (no grid read)",
)
def placement(request, size: Query[PlacementIn]):
    """With the asker's rules: exclusions, per_node and per_farm limits, and the strategy; the answer
    counts the nodes each exclusion blocked and what each limit held back (`limited`)."""
    try:
        rules = rules_parsed(
            exclude_nodes=size.exclude_nodes,
            exclude_farms=size.exclude_farms,
            per_node=size.per_node,
            per_farm=size.per_farm,
            strategy=size.strategy,
            ipv4=size.ipv4,
            min_odds=size.min_odds,
        )
    except RulesError as exc:
        raise BadInput(str(exc), field=exc.field) from None
    answer = placement_for(cru=size.cru, mru=size.mru, sru=size.sru, best=size.best, rules=rules)
    return {
        "size": {"cru": size.cru, "mru": size.mru, "sru": size.sru},
        "nodes": answer.nodes,
        "can_host": answer.can_host,
        "blocked": answer.blocked,
        "reading_max_age_seconds": answer.reading_max_age,
        "strategy": rules.strategy,
        "limited": answer.limited,
        "held_nodes": answer.held_nodes,
        "best": answer.best,
        "slices_offered": answer.slices_offered,
        "ipv4": rules.ipv4,
        "notes": list(answer.notes),
    }
