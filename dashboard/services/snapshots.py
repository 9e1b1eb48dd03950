"""Capacity over time: snapshots of the fleet's, each farm's and each node's stored figures, thinned.

`snapshot_take` copies the Node figure columns (services.figures owns them; this only reads them)
into SnapshotFigures rows in a fixed number of statements whatever the fleet size: one INSERT for
the snapshot, then one INSERT ... SELECT each for the nodes, the farms (grouped) and the fleet.
The beat takes one every SNAPSHOT_EVERY seconds and the job task one after every job.

`snapshots_thin` bounds the storage: every snapshot of the last THIN_RECENT is kept at most one per
THIN_RECENT_EVERY, then one an hour up to THIN_HOURLY, then one a day up to THIN_DAILY, older ones
are deleted. A series (the fleet, a farm, a node) therefore holds at most
2 * 24 * 12 + 28 * 24 + 335 = 1,583 rows (README "Capacity over time").
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from dashboard.capacity import CLOSURE_REASONS
from dashboard.models import FiguresSnapshot, Node, SnapshotFigures

THIN_RECENT = timedelta(days=2)
THIN_RECENT_EVERY = timedelta(minutes=5)
THIN_HOURLY = timedelta(days=30)
THIN_DAILY = timedelta(days=365)

# SnapshotFigures column -> its SQL over the node table (summed for a farm and the fleet).
_FIGURES = {
    "nominal": "n.slices_free + n.slices_rented + n.slices_deployed + n.slices_failed",
    "deployable": "n.deployable",
    "free_deployable": "CASE WHEN n.deployable > n.slices_rented + n.slices_deployed "
    "THEN n.deployable - n.slices_rented - n.slices_deployed ELSE 0 END",
    "free": "n.slices_free",
    "placeable": "COALESCE(n.placeable_now, 0)",
    "phantom": "COALESCE(n.phantom_slices, 0)",
}
# The reasons with a column of their own; phantom_closed sums every closure (capacity.CLOSURE_REASONS),
# so a new closure reason is counted with no new column.
PHANTOM_REASONS = ("down", "standby", "memory", "disk", "pool")


def _reason_sql(reason: str) -> str:
    # The keys are our own identifiers (capacity's), never input: checked, then inlined.
    assert reason.replace("-", "").replace("_", "").isalnum(), reason
    return f"COALESCE((n.phantom_reasons ->> '{reason}')::integer, 0)"


def _closed_sql() -> str:
    return " + ".join(_reason_sql(key) for key in CLOSURE_REASONS)


def snapshot_take(*, trigger: str = "beat", now: datetime | None = None) -> FiguresSnapshot:
    """Record the figures of the fleet, each farm and each node now: four statements in one transaction."""
    figures = {
        **_FIGURES,
        **{f"phantom_{reason}": _reason_sql(reason) for reason in PHANTOM_REASONS},
        "phantom_closed": _closed_sql(),
    }
    columns = ", ".join(["snapshot_id", "scope", "subject", "nodes", *figures])
    table = connection.ops.quote_name(SnapshotFigures._meta.db_table)
    nodes = connection.ops.quote_name(Node._meta.db_table)
    summed = ", ".join(f"SUM({sql})" for sql in figures.values())
    with transaction.atomic():
        snapshot = FiguresSnapshot.objects.create(at=now or timezone.now(), trigger=trigger[:40])
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT %s, 'node', n.grid_id, 1, {', '.join(figures.values())} FROM {nodes} n",
                [snapshot.pk],
            )
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT %s, 'farm', n.farm_id, COUNT(*), {summed} FROM {nodes} n GROUP BY n.farm_id",
                [snapshot.pk],
            )
            # COALESCE: an empty fleet still gets its row of zeros.
            fleet = ", ".join(f"COALESCE(SUM({sql}), 0)" for sql in figures.values())
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT %s, 'fleet', 0, COUNT(*), {fleet} FROM {nodes} n",
                [snapshot.pk],
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
