"""Each farm's figures summed over its nodes, read from FarmTotals: one row a farm, whatever its size.

The fleet's totals (the fleet page, the API's node list, /metrics) were one aggregate over every node,
the one cost that grew with the fleet. FarmTotals is derived data, like an index, kept true this way:

- a PostgreSQL trigger (migration 0013) marks a farm changed (FarmTotalsChanged) in the same
  transaction as any statement that inserts, updates or deletes its nodes, whoever writes them;
- `farm_totals()` first brings the farms marked changed up to date: it locks their FarmTotals rows
  (in farm order), then sums their nodes in a new statement, whose snapshot therefore holds every
  change committed before the lock, and removes exactly the marks it read. A change committed after
  those marks were read keeps its own mark, so the next reader sums that farm again. Uncommitted changes
  are invisible, as they are to any reader.

So a read costs one row a farm plus the nodes of the farms that changed since the last read. The fleet
map's cells are kept in the same rows, stamped with the `computed_at` they were made from
(selectors.fleet_map).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields
from datetime import datetime

from django.db import transaction
from django.db.models import Count, F, Min, Q, Sum

from dashboard.models import FarmTotals, FarmTotalsChanged, Node
from dashboard.rows import rows_update

# The tiers of selectors.fleet: deployable by what a node's status allows today.
NOW, AFTER_WAKE, BLOCKED = ("up",), ("standby",), ("down", "unknown")


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
    phantom: int = 0
    phantom_on_up_nodes: int = 0
    stale: int = 0
    unprechecked: int = 0
    never_read: int = 0
    deployable_now: int = 0
    deployable_after_wake: int = 0
    deployable_blocked: int = 0
    oldest_reading_at: datetime | None = None

    @classmethod
    def total(cls, farms: list[FarmSums]) -> FarmSums:
        """The farms added up (farm_id 0; the oldest reading is the oldest of all)."""
        sums = {f.name: sum(getattr(farm, f.name) for farm in farms) for f in fields(cls) if f.name not in _NOT_SUMMED}
        readings = [farm.oldest_reading_at for farm in farms if farm.oldest_reading_at is not None]
        return cls(farm_id=0, oldest_reading_at=min(readings, default=None), **sums)


_NOT_SUMMED = ("farm_id", "oldest_reading_at")
_COUNTED = [f.name for f in fields(FarmSums) if f.name not in _NOT_SUMMED]

# Every FarmSums figure as an aggregate over one farm's Node rows.
AGGREGATES = dict(
    nodes=Count("pk"),
    nodes_up=Count("pk", filter=Q(status="up")),
    nominal=Sum(F("slices_free") + F("slices_rented") + F("slices_deployed") + F("slices_failed")),
    deployable=Sum("deployable"),
    free=Sum("slices_free"),
    rented=Sum("slices_rented"),
    deployed=Sum("slices_deployed"),
    failed=Sum("slices_failed"),
    placeable=Sum("placeable_now"),
    phantom=Sum("phantom_slices"),
    phantom_on_up_nodes=Sum("phantom_slices", filter=Q(status="up")),
    stale=Count("pk", filter=Q(stale=True)),
    unprechecked=Count("pk", filter=Q(placeable_now__isnull=True)),
    never_read=Count("pk", filter=Q(seen_at__isnull=True)),
    deployable_now=Sum("deployable", filter=Q(status__in=NOW)),
    deployable_after_wake=Sum("deployable", filter=Q(status__in=AFTER_WAKE)),
    deployable_blocked=Sum("deployable", filter=Q(status__in=BLOCKED)),
    oldest_reading_at=Min("seen_at"),
)


def farm_totals(*, farm_id: int | None = None) -> list[FarmSums]:
    """Every farm's sums by farm id (or one farm's), true as of this read."""
    changed_farms_recompute()
    rows = FarmTotals.objects.order_by("farm_id").filter(nodes__gt=0)
    if farm_id is not None:
        rows = rows.filter(farm_id=farm_id)
    names = ["farm_id", *_COUNTED, "oldest_reading_at"]
    return [FarmSums(**dict(zip(names, values, strict=True))) for values in rows.values_list(*names)]


def fleet_totals() -> FarmSums:
    """The whole fleet's sums (farm_id 0), added up in the database: one row, however many farms."""
    changed_farms_recompute()
    sums = FarmTotals.objects.aggregate(**{name: Sum(name) for name in _COUNTED}, oldest=Min("oldest_reading_at"))
    oldest = sums.pop("oldest")
    return FarmSums(farm_id=0, oldest_reading_at=oldest, **{k: int(v or 0) for k, v in sums.items()})


def _summed(nodes) -> list[FarmSums]:
    rows = (
        nodes.order_by().values("farm_id").annotate(**{f"s_{k}": v for k, v in AGGREGATES.items()}).order_by("farm_id")
    )
    return [_sums(row) for row in rows]


def _sums(row: dict) -> FarmSums:
    values = {k.removeprefix("s_"): v for k, v in row.items() if k.startswith("s_")}
    oldest = values.pop("oldest_reading_at")
    return FarmSums(farm_id=row["farm_id"], oldest_reading_at=oldest, **{k: int(v or 0) for k, v in values.items()})


def changed_farms_recompute() -> None:
    """The farms marked changed summed again, each given a new `computed_at`; every reader of FarmTotals
    calls it first (the fleet map's kept cells too: selectors.fleet_map)."""
    marks = list(FarmTotalsChanged.objects.values_list("pk", "farm_id"))
    if not marks:
        return
    farms = sorted({farm for _pk, farm in marks})
    with transaction.atomic():
        # The rows first, locked in farm order (two readers never wait on each other in a circle)...
        FarmTotals.objects.bulk_create([FarmTotals(farm_id=f) for f in farms], ignore_conflicts=True)
        list(FarmTotals.objects.select_for_update().filter(farm_id__in=farms).order_by("farm_id").values_list("pk"))
        # ...then the sums, in a statement that starts after the locks: it sees every committed change.
        summed = {s.farm_id: s for s in _summed(Node.objects.filter(farm_id__in=farms))}
        # One statement for every farm: bulk_update's CASE arm a farm and a field took ~1.5 s at 200 farms.
        rows_update(
            FarmTotals,
            [("farm_id", "integer"), *((name, "bigint") for name in _COUNTED), ("oldest_reading_at", "timestamptz")],
            [astuple(summed.get(f, FarmSums(farm_id=f))) for f in farms],
            stamped=["computed_at"],
        )
        # Exactly the marks read: their changes were committed before they were read, so the sums above
        # hold them. A mark with a smaller id may belong to a change committed only now: it stays.
        FarmTotalsChanged.objects.filter(pk__in=[pk for pk, _farm in marks])._raw_delete(FarmTotalsChanged.objects.db)
