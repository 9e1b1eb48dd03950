"""The one definition of the fleet's tiers: when a node's deployable slices can be used.

Every deployable slice is in exactly one tier, so the tiers add up to `deployable` on every reader (the
headline tiles, the filtered fleet table and its `tier=` filter, the CSV's `tier` column, the farm totals
kept per farm (FarmTotals), the API):

    now         up and open
    after-wake  on standby (the farm's power manager wakes it), nothing else closing it
    blocked     down, or a status the grid never gave
    closed      closed for a reason of its own, whatever its status (capacity.CLOSURE_REASONS but the two
                the status alone decides: withheld, rented by another twin, needs our rent, rent in grace)

Before (issue 34, finding 2) withheld and rented-away nodes had no tier: the filtered path counted them
by status, the farm totals left them out, and the tiers did not add up. The Python `tier_of` and the SQL
`tier_q` read the same two stored columns (status, closure) and the same lists below.
"""

from __future__ import annotations

from django.db.models import Q, QuerySet, Sum

from dashboard.capacity import CLOSURE_REASONS

# The closures the status alone decides: a down node is "blocked", a standby one "after wake".
STATUS_CLOSURES = ("down", "standby")
# The closures that make a tier of their own.
CLOSED = tuple(key for key in CLOSURE_REASONS if key not in STATUS_CLOSURES)

TIER_WORDS = {"now": "now", "after-wake": "after wake", "blocked": "blocked", "closed": "closed"}
TIERS = tuple(TIER_WORDS)
# The statuses each open tier takes (a closed node is in "closed" whatever its status).
TIER_STATUSES = {"now": ("up",), "after-wake": ("standby",), "blocked": ("down", "unknown")}


def tier_of(status: str, closure: str = "") -> str:
    """The tier of a node's deployable slices from its stored status and closure."""
    if closure in CLOSED:
        return "closed"
    return "now" if status == "up" else "after-wake" if status == "standby" else "blocked"


def tier_q(tier: str) -> Q:
    """The nodes of a tier, as a filter: the same rule as tier_of."""
    if tier == "closed":
        return Q(closure__in=CLOSED)
    if tier not in TIER_STATUSES:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}, not {tier!r}")
    return Q(status__in=TIER_STATUSES[tier]) & ~Q(closure__in=CLOSED)


def _name(tier: str) -> str:
    return "deployable_" + tier.replace("-", "_")


# The figure each tier's sum is kept under (deployable_now, deployable_after_wake, ...).
TIER_FIGURES = {tier: _name(tier) for tier in TIERS}


def tier_sums(prefix: str = "") -> dict:
    """Each tier's deployable slices as aggregates, for one `aggregate()` / `annotate()` with the others."""
    return {prefix + TIER_FIGURES[tier]: Sum("deployable", filter=tier_q(tier)) for tier in TIERS}


def closed_by_reason(nodes: QuerySet) -> dict[str, int]:
    """The closed tier's deployable slices by closure (capacity.CLOSURE_REASONS order), zero ones left out.

    One grouped query over the closed nodes only (Node.closure is indexed)."""
    rows = dict(
        nodes.filter(closure__in=CLOSED)
        .order_by()
        .values("closure")
        .annotate(s=Sum("deployable"))
        .values_list("closure", "s")
    )
    return {key: int(rows[key]) for key in CLOSED if rows.get(key)}
