"""Capacity over time: snapshots of the fleet's, each farm's and each node's stored figures, thinned.

`snapshot_take` copies the Node figure columns (figures.services.figures owns them; this only reads them)
into SnapshotFigures rows in a fixed number of statements whatever the fleet size: one INSERT for
the snapshot, then one INSERT ... SELECT each for the nodes, the farms (grouped) and the fleet.
Each figure is summed as the fleet page sums it (the farm totals' aggregates, figures.selectors.tiers' tiers).
The beat takes one every SNAPSHOT_EVERY seconds and the job task one after every job.

`snapshots_thin` bounds the storage: every snapshot of the last THIN_RECENT is kept at most one per
THIN_RECENT_EVERY, then one an hour up to THIN_HOURLY, then one a day up to THIN_DAILY, older ones
are deleted. A series (the fleet, a farm, a node) therefore holds at most
2 * 24 * 12 + 28 * 24 + 335 = 1,583 rows (README "Capacity over time").
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Case, F, IntegerField, Sum, When
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from dashboard.capacity import CLOSURE_REASONS
from dashboard.figures.selectors.farm_totals import AGGREGATES
from dashboard.figures.selectors.tiers import tier_sums
from dashboard.models import FiguresSnapshot, Node, SnapshotFigures

THIN_RECENT = timedelta(days=2)
THIN_RECENT_EVERY = timedelta(minutes=5)
THIN_HOURLY = timedelta(days=30)
THIN_DAILY = timedelta(days=365)

# The reasons with a column of their own; phantom_closed sums every closure (capacity.CLOSURE_REASONS),
# so a new closure reason is counted with no new column.
PHANTOM_REASONS = ("down", "standby", "memory", "disk", "pool")


def _reason(reason: str):
    return Coalesce(Cast(KT(f"phantom_reasons__{reason}"), IntegerField()), 0)


def _free_deployable():
    occupied = F("slices_rented") + F("slices_deployed")
    return Case(When(deployable__gt=occupied, then=F("deployable") - occupied), default=0, output_field=IntegerField())


def _sums() -> dict:
    """SnapshotFigures column -> its sum over the node rows. The figures the fleet page shows are the farm
    totals' own aggregates (figures.selectors.farm_totals.AGGREGATES) and deployable's tiers the one definition
    (figures.selectors.tiers): a snapshot cannot count a figure another way than the page (issue 34, finding 2)."""
    first, *others = CLOSURE_REASONS
    closed = _reason(first)
    for key in others:
        closed = closed + _reason(key)
    return {
        **{name: AGGREGATES[name] for name in ("nodes", "nominal", "deployable", "free", "placeable", "phantom")},
        "free_deployable": Sum(_free_deployable()),
        **{f"phantom_{reason}": Sum(_reason(reason)) for reason in PHANTOM_REASONS},
        "phantom_closed": Sum(closed),
        **tier_sums(),
    }


def _grouped(column: str) -> tuple[str, tuple]:
    """The node rows' sums grouped by `column` (each sum aliased s_<figure>, the group s_subject), as SQL."""
    rows = (
        Node.objects.order_by()
        .values(s_subject=F(column))
        .annotate(**{f"s_{name}": value for name, value in _sums().items()})
    )
    return rows.query.sql_with_params()


def snapshot_take(*, trigger: str = "beat", now: datetime | None = None) -> FiguresSnapshot:
    """Record the figures of the fleet, each farm and each node now: four statements in one transaction."""
    figures = list(_sums())
    columns = ", ".join(["snapshot_id", "scope", "subject", *figures])
    table = connection.ops.quote_name(SnapshotFigures._meta.db_table)
    # A null sum (no node prechecked, an empty fleet) is stored as 0.
    picked = ", ".join(f"COALESCE(q.s_{name}, 0)" for name in figures)
    summed = ", ".join(f"COALESCE(SUM(q.s_{name}), 0)" for name in figures)
    with transaction.atomic():
        snapshot = FiguresSnapshot.objects.create(at=now or timezone.now(), trigger=trigger[:40])
        nodes_sql, nodes_params = _grouped("grid_id")
        farms_sql, farms_params = _grouped("farm_id")
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT %s, 'node', q.s_subject, {picked} FROM ({nodes_sql}) q",
                [snapshot.pk, *nodes_params],
            )
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT %s, 'farm', q.s_subject, {picked} FROM ({farms_sql}) q",
                [snapshot.pk, *farms_params],
            )
            # The fleet is its farms added up, as the fleet page's totals are; an empty fleet a row of zeros.
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT %s, 'fleet', 0, {summed} FROM ({farms_sql}) q",
                [snapshot.pk, *farms_params],
            )
    return snapshot


def snapshots_thin(*, now: datetime | None = None) -> int:
    """Delete the snapshots the retention no longer keeps (module doc); how many were deleted.

    Reads the snapshots' times (a bounded list: at most what retention keeps plus what was taken
    since the last thinning), then deletes the others and their rows in two statements.
    """
    now = now or timezone.now()
    keep: dict[tuple, int] = {}
    doomed: list[int] = []
    for pk, at in FiguresSnapshot.objects.order_by("-at", "-pk").values_list("pk", "at"):
        bucket = _bucket(at, now)
        if bucket is None or bucket in keep:
            doomed.append(pk)
        else:
            keep[bucket] = pk  # newest first: the latest snapshot of each bucket stays
    if doomed:
        SnapshotFigures.objects.filter(snapshot_id__in=doomed).delete()
        FiguresSnapshot.objects.filter(pk__in=doomed).delete()
    return len(doomed)


def _bucket(at: datetime, now: datetime) -> tuple | None:
    """The retention bucket a snapshot taken at `at` falls in; None when it is too old to keep."""
    age = now - at
    if age <= THIN_RECENT:
        step = int(THIN_RECENT_EVERY.total_seconds())
        return ("recent", int(at.timestamp()) // step)
    if age <= THIN_HOURLY:
        return ("hour", at.strftime("%Y-%m-%d %H"))
    if age <= THIN_DAILY:
        return ("day", at.strftime("%Y-%m-%d"))
    return None


def snapshot_take_and_thin(*, trigger: str = "beat") -> FiguresSnapshot:
    """What the beat runs: a snapshot, then the thinning."""
    snapshot = snapshot_take(trigger=trigger)
    snapshots_thin(now=snapshot.at)
    return snapshot
