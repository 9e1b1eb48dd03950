"""Each farm's figures summed over its nodes, read from FarmTotals: one row a farm, whatever its size.

The fleet's totals (the fleet page, the API's node list, /metrics) were one aggregate over every node,
the one cost that grew with the fleet. FarmTotals is derived data, like an index, kept by
figures.services.farm_totals after every write to a farm's nodes (and by the beat). A farm whose nodes changed
since (marked by the farm totals trigger, figures/services/farm_totals_trigger.py) is summed live from its
nodes here instead: a read
never writes, and never shows figures older than the last committed write.

So a read costs one row a farm plus the nodes of the farms written since the last refresh.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime

from django.db.models import Count, F, Min, Q, Sum
from django.utils import timezone

from dashboard.deployments.selectors.holds import Held, held_among, held_by_farm
from dashboard.figures.selectors.tiers import tier_sums
from dashboard.models import FarmTotals, FarmTotalsChanged, Node


@dataclass(frozen=True)
class FarmSums:
    farm_id: int
    nodes: int = 0
    nodes_up: int = 0
    nominal: int = 0
    deployable: int = 0
    free: int = 0
    rented: int = 0
    deployed: int = 0
    failed: int = 0
    placeable: int = 0  # over the prechecked nodes
    phantom: int = 0  # over the prechecked nodes
    # The one split of `phantom` every page, the API, /metrics and the alerts use: on nodes that are
    # up it is something to fix (a re-register, a precheck); on nodes on standby or down it waits on a
    # wake or a repair, which no catalog change fixes.
    phantom_on_up_nodes: int = 0
    stale: int = 0
    unprechecked: int = 0
    never_read: int = 0
    # `deployable` split into its tiers (figures.selectors.tiers), which add up to it: up and open, standby,
    # down or unknown, and closed for a reason of its own (withheld, rented away, ...).
    deployable_now: int = 0
    deployable_after_wake: int = 0
    deployable_blocked: int = 0
    deployable_closed: int = 0
    oldest_reading_at: datetime | None = None
    # Free slices held for a buyer now (live holds): read at each read, never kept; `free` is then the
    # free slices on offer, those held left out (deployments.selectors.holds).
    held: int = 0

    @classmethod
    def total(cls, farms: list[FarmSums]) -> FarmSums:
        """The farms added up (farm_id 0; the oldest reading is the oldest of all)."""
        sums = {f.name: sum(getattr(farm, f.name) for farm in farms) for f in fields(cls) if f.name not in _NOT_SUMMED}
        sums["held"] = sum(farm.held for farm in farms)
        readings = [farm.oldest_reading_at for farm in farms if farm.oldest_reading_at is not None]
        return cls(farm_id=0, oldest_reading_at=min(readings, default=None), **sums)


_NOT_SUMMED = ("farm_id", "oldest_reading_at")
COUNTED = [f.name for f in fields(FarmSums) if f.name not in (*_NOT_SUMMED, "held")]

# Slices in a node's stored catalog.
NOMINAL = F("slices_free") + F("slices_rented") + F("slices_deployed") + F("slices_failed")

# Every FarmSums figure as an aggregate over one farm's Node rows.
AGGREGATES = dict(
    nodes=Count("pk"),
    nodes_up=Count("pk", filter=Q(status="up")),
    nominal=Sum(NOMINAL),
    deployable=Sum("deployable"),
    free=Sum("slices_free"),
    rented=Sum("slices_rented"),
    deployed=Sum("slices_deployed"),
    failed=Sum("slices_failed"),
    placeable=Sum("placeable_now"),
    phantom=Sum("phantom_slices"),
    phantom_on_up_nodes=Sum("phantom_slices", filter=Q(status="up", closure="")),
    stale=Count("pk", filter=Q(stale=True)),
    unprechecked=Count("pk", filter=Q(placeable_now__isnull=True)),
    never_read=Count("pk", filter=Q(seen_at__isnull=True)),
    **tier_sums(),
    oldest_reading_at=Min("seen_at"),
)


def farms_behind(*, farm_id: int | None = None) -> set[int]:
    """The farms whose nodes changed since their FarmTotals were summed (marked, not refreshed yet)."""
    marks = FarmTotalsChanged.objects.all() if farm_id is None else FarmTotalsChanged.objects.filter(farm_id=farm_id)
    return set(marks.values_list("farm_id", flat=True).distinct())


def farm_totals(*, farm_id: int | None = None) -> list[FarmSums]:
    """Every farm's sums by farm id (or one farm's), true as of this read."""
    behind = farms_behind(farm_id=farm_id)
    rows = FarmTotals.objects.order_by("farm_id").filter(nodes__gt=0).exclude(farm_id__in=behind)
    if farm_id is not None:
        rows = rows.filter(farm_id=farm_id)
    names = ["farm_id", *COUNTED, "oldest_reading_at"]
    kept = [FarmSums(**dict(zip(names, values, strict=True))) for values in rows.values_list(*names)]
    live = summed(Node.objects.filter(farm_id__in=behind)) if behind else []
    held = held_by_farm(now=timezone.now(), farm_id=farm_id)
    return sorted([_offered(s, held.get(s.farm_id, Held())) for s in (*kept, *live)], key=lambda s: s.farm_id)


def _offered(sums: FarmSums, held: Held) -> FarmSums:
    return held.offered(sums, up="phantom_on_up_nodes")


def fleet_totals() -> FarmSums:
    """The whole fleet's sums (farm_id 0), added up in the database: one row, however many farms."""
    behind = farms_behind()
    sums = FarmTotals.objects.exclude(farm_id__in=behind).aggregate(
        **{name: Sum(name) for name in COUNTED}, oldest=Min("oldest_reading_at")
    )
    oldest = sums.pop("oldest")
    kept = FarmSums(farm_id=0, oldest_reading_at=oldest, **{k: int(v or 0) for k, v in sums.items()})
    held = held_among(now=timezone.now())
    if not behind:
        return _offered(kept, held)
    return _offered(FarmSums.total([kept, *summed(Node.objects.filter(farm_id__in=behind))]), held)


def nodes_totals(nodes) -> FarmSums:
    """Any set of nodes' sums (farm_id 0) in one aggregate, each figure counted as a farm's is, their
    live holds taken off: the fleet page's totals when its filters keep no whole farms."""
    row = nodes.aggregate(**{f"s_{k}": v for k, v in AGGREGATES.items()})
    return _offered(_sums({"farm_id": 0, **row}), held_among(now=timezone.now(), nodes=nodes))


def summed(nodes) -> list[FarmSums]:
    """The nodes' sums by farm, made now (the live answer the kept rows must equal)."""
    rows = (
        nodes.order_by().values("farm_id").annotate(**{f"s_{k}": v for k, v in AGGREGATES.items()}).order_by("farm_id")
    )
    return [_sums(row) for row in rows]


def _sums(row: dict) -> FarmSums:
    values = {k.removeprefix("s_"): v for k, v in row.items() if k.startswith("s_")}
    oldest = values.pop("oldest_reading_at")
    return FarmSums(farm_id=row["farm_id"], oldest_reading_at=oldest, **{k: int(v or 0) for k, v in values.items()})
