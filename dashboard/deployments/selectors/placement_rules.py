"""The asker's placement rules, as the placement page and GET /api/v1/placement take them.

Exclusions (nodes, farms), the per-node and per-farm limits of a buyer's cluster, and the order of the
best nodes (spread or pack). Pure: deployments.selectors.placement applies them.
"""

from __future__ import annotations

from dataclasses import dataclass

# The best nodes' order: spread (most room left first) or pack (busy nodes first, the tightest fit
# first), so a farm's idle nodes can stay asleep.
STRATEGIES = ("spread", "pack")
# What the per_node / per_farm limits did to the best nodes.
LIMITS = {
    "per_node": "best nodes offered fewer slices than they could take (per_node)",
    "per_farm": "nodes left out of the best because their farm had its share (per_farm)",
    "farm_ips": "best nodes offered fewer slices, or left out, because their farm's free public IPv4s ran out (ipv4)",
    "min_odds": "nodes left out of the best because the slice's odds there are below min_odds",
}


@dataclass(frozen=True)
class Rules:
    """The asker's placement rules (a buyer's cluster spread over nodes or farms)."""

    exclude_nodes: frozenset[int] = frozenset()  # grid node ids
    exclude_farms: frozenset[int] = frozenset()
    per_node: int | None = None  # at most this many slices of the size on one node
    per_farm: int | None = None  # at most this many slices of the size in one farm, over the best nodes
    strategy: str = "spread"
    # The slice asks a public IPv4 (ipv4=1): only nodes that take one, in farms with one free. `farm_ips_free`
    # is what placement read of the farms ((farm id, free IPs) pairs), not the asker's.
    ipv4: bool = False
    farm_ips_free: tuple[tuple[int, int], ...] = ()
    # The best nodes only where the slice's odds of deploying at the first try (capacity.odds) reach this.
    min_odds: float = 0.0

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, not {self.strategy!r}")
        for name in ("per_node", "per_farm"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")


NO_RULES = Rules()
# Ids in one exclude list, at most (a typo'd paste is not a rule).
EXCLUDE_MAX = 1000


class RulesError(ValueError):
    """Placement rules that cannot be taken; `field` names the input at fault."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


def ids_parsed(text: str | None, *, field: str) -> frozenset[int]:
    """ "1774, 2310" -> {1774, 2310}: the page's and the API's comma lists of node or farm ids."""
    parts = [p.strip() for p in (text or "").replace(" ", ",").split(",") if p.strip()]
    if len(parts) > EXCLUDE_MAX:
        raise RulesError(f"{field} lists {len(parts)} ids; at most {EXCLUDE_MAX}", field=field)
    bad = [p for p in parts if not p.isascii() or not p.isdigit() or len(p) > 10]
    if bad:
        raise RulesError(f"{field} must be whole ids separated by commas; {bad[0]!r} is not one", field=field)
    return frozenset(int(p) for p in parts)


def rules_parsed(
    *, exclude_nodes=None, exclude_farms=None, per_node=None, per_farm=None, strategy=None, ipv4=False, min_odds=None
) -> Rules:
    """The rules as a page or the API sends them; RulesError names the input at fault."""
    if min_odds is not None and (
        isinstance(min_odds, bool) or not isinstance(min_odds, int | float) or not 0 <= min_odds <= 1
    ):
        raise RulesError(f"min_odds must be a probability from 0 to 1, not {min_odds!r}", field="min_odds")
    for name, value in (("per_node", per_node), ("per_farm", per_farm)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000):
            raise RulesError(f"{name} must be a whole number from 1 to 10000, not {value!r}", field=name)
    strategy = strategy or "spread"
    if strategy not in STRATEGIES:
        raise RulesError(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}", field="strategy")
    return Rules(
        exclude_nodes=ids_parsed(exclude_nodes, field="exclude_nodes"),
        exclude_farms=ids_parsed(exclude_farms, field="exclude_farms"),
        per_node=per_node,
        per_farm=per_farm,
        strategy=strategy,
        ipv4=bool(ipv4),
        min_odds=float(min_odds or 0.0),
    )
