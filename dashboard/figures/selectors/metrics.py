"""What /metrics and /metrics/farms report, read from the stored figures at scrape time.

/metrics: a fixed number of queries whatever the fleet size (the fleet's figures from the kept farm
totals, one row a farm; jobs grouped by kind and state; failures grouped by cause; the grid request
tally; the newest slice audit's counts; the phantom slices by reason, one aggregate over the nodes'
stored figures, kept while no farm has changed: `phantom_by_reason`). /metrics/farms: the farm totals themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.core.cache import caches
from django.db import connection
from django.db.models import Count, IntegerField, Max, Min, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from dashboard import capacity
from dashboard.capacity.catalog_audit import FindingKind
from dashboard.deployments.selectors.deployments import FAILED_STATES
from dashboard.figures.selectors.farm_totals import FarmSums, farm_totals, fleet_totals
from dashboard.figures.selectors.unreadable import Unreadable, last_unreadable
from dashboard.grid.telemetry import BUCKETS, INF
from dashboard.models import Deployment, FarmTotals, FarmTotalsChanged, GridRequestTally, Job, Node

# Where the phantom slices by reason are kept between scrapes (each process its own), and how long unread.
CACHE = "default"
CACHE_SECONDS = 3600


@dataclass(frozen=True)
class JobFigures:
    kind: str
    state: str
    jobs: int
    oldest_created_at: datetime | None
    freshest_heartbeat_at: datetime | None


@dataclass(frozen=True)
class FailureFigures:
    cause: str
    state: str
    deployments: int


@dataclass(frozen=True)
class GridRequestFigures:
    """Grid Proxy requests of one endpoint and outcome: a histogram (cumulative counts per bound)."""

    endpoint: str
    outcome: str
    buckets: list[tuple[str, int]]  # (upper bound, requests at most that long), "+Inf" last
    seconds: float

    @property
    def requests(self) -> int:
        return self.buckets[-1][1]


@dataclass(frozen=True)
class AuditFigures:
    """What the newest finished slice audit found, by kind (orphan, foreign, count, not-checked)."""

    finished_at: datetime
    findings: dict[str, int]


@dataclass(frozen=True)
class MetricsSnapshot:
    fleet: FarmSums  # farm_id 0: the whole fleet
    jobs: list[JobFigures] = field(default_factory=list)
    failures: list[FailureFigures] = field(default_factory=list)
    grid_requests: list[GridRequestFigures] = field(default_factory=list)
    audit: AuditFigures | None = None  # the newest finished slice audit, if any
    phantom_by_reason: dict[str, int] = field(default_factory=dict)  # capacity.PHANTOM_REASONS key -> slices
    unreadable: Unreadable | None = None  # the nodes the last fleet-wide reading could not read

    @property
    def freshest_heartbeat_at(self) -> datetime | None:
        """The latest heartbeat of any running job: how recently a worker was seen working."""
        beats = [j.freshest_heartbeat_at for j in self.jobs if j.state == Job.State.RUNNING and j.freshest_heartbeat_at]
        return max(beats, default=None)


def farms_figures() -> list[FarmSums]:
    """The figures of every farm, from the kept farm totals (figures.selectors.farm_totals): one row a farm."""
    return farm_totals()


def phantom_by_reason() -> dict[str, int]:
    """The fleet's phantom slices by reason (every key of capacity.PHANTOM_REASONS, closures first).

    Summed over every node's stored figures, and kept (this process's cache) under the farm totals'
    state: a write to any node marks its farm changed (the trigger of figures.selectors.farm_totals) and its
    refresh gives the farm a new `computed_at`, so while no farm is marked the newest `computed_at` and
    the farms' count name one state of every node row. A scrape then costs two small queries, not a
    pass over every node (issue 37: /metrics grew 1.9x from 100 to 10,000 nodes); with a farm marked,
    the sum is made now and not kept, as the fleet map does with its cells.
    """
    # One statement: the newest refresh, the farms kept, and whether any farm is marked changed.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT MAX(computed_at), COUNT(*), EXISTS (SELECT 1 FROM {FarmTotalsChanged._meta.db_table}) "
            f"FROM {FarmTotals._meta.db_table}"
        )
        latest, farms, behind = cursor.fetchone()
    if behind:
        return _phantom_by_reason_summed()
    key = f"metrics:phantom-by-reason:{farms}:{latest.isoformat() if latest else '-'}"
    kept = caches[CACHE].get(key)
    if kept is not None:
        return dict(kept)
    summed = _phantom_by_reason_summed()
    caches[CACHE].set(key, summed, timeout=CACHE_SECONDS)
    return dict(summed)


def _phantom_by_reason_summed() -> dict[str, int]:
    """One aggregate over every node's stored phantom reasons."""
    sums = Node.objects.aggregate(
        **{
            f"r{i}": Coalesce(Sum(Cast(KT(f"phantom_reasons__{reason}"), IntegerField())), 0)
            for i, reason in enumerate(capacity.PHANTOM_REASONS)
        }
    )
    return {reason: int(sums[f"r{i}"]) for i, reason in enumerate(capacity.PHANTOM_REASONS)}


def metrics_snapshot() -> MetricsSnapshot:
    fleet = fleet_totals()
    jobs = (
        Job.objects.order_by()
        .values("kind", "state")
        .annotate(n=Count("pk"), oldest=Min("created_at"), heartbeat=Max("heartbeat_at"))
        .order_by("kind", "state")
    )
    failures = (
        Deployment.objects.filter(state__in=FAILED_STATES)
        .order_by()
        .values("cause", "state")
        .annotate(n=Count("pk"))
        .order_by("cause", "state")
    )
    # One row, its counts only (the findings list grows with the fleet and stays in the database).
    audit = (
        Job.objects.filter(kind=Job.Kind.CATALOG_AUDIT, state=Job.State.SUCCEEDED)
        .order_by("-finished_at", "-pk")
        .values("finished_at", "result__counts")
        .first()
    )
    return MetricsSnapshot(
        fleet=fleet,
        audit=_audit(audit),
        jobs=[JobFigures(r["kind"], r["state"], r["n"], r["oldest"], r["heartbeat"]) for r in jobs],
        failures=_failures(failures),
        phantom_by_reason=phantom_by_reason(),
        unreadable=last_unreadable(),
        grid_requests=_grid_requests(
            GridRequestTally.objects.values_list("endpoint", "outcome", "bucket", "count", "seconds")
        ),
    )


def _audit(row) -> AuditFigures | None:
    if row is None or row["finished_at"] is None:
        return None
    counts = row["result__counts"] if isinstance(row["result__counts"], dict) else {}
    findings = {kind.value: 0 for kind in FindingKind}
    findings.update(
        {k: v for k, v in counts.items() if k in findings and isinstance(v, int) and not isinstance(v, bool)}
    )
    return AuditFigures(finished_at=row["finished_at"], findings=findings)


def _grid_requests(rows) -> list[GridRequestFigures]:
    # Stored per bucket, not cumulative (each process adds its own); Prometheus wants cumulative.
    bounds = [repr(b) for b in BUCKETS] + [INF]
    counts: dict[tuple[str, str], dict[str, int]] = {}
    seconds: dict[tuple[str, str], float] = {}
    for endpoint, outcome, bucket, count, total in rows:
        key = (endpoint, outcome)
        counts.setdefault(key, {})[bucket] = counts.get(key, {}).get(bucket, 0) + count
        seconds[key] = seconds.get(key, 0.0) + total
    figures = []
    for key in sorted(counts):
        running, buckets = 0, []
        for bound in bounds:
            running += counts[key].get(bound, 0)
            buckets.append((bound, running))
        figures.append(GridRequestFigures(key[0], key[1], buckets, seconds[key]))
    return figures


def _failures(rows) -> list[FailureFigures]:
    # A failure stored with no cause is an unknown one: one series, not two with the same labels.
    counts: dict[tuple[str, str], int] = {}
    for row in rows:
        key = (row["cause"] or Deployment.Cause.UNKNOWN, row["state"])
        counts[key] = counts.get(key, 0) + row["n"]
    return [FailureFigures(cause, state, n) for (cause, state), n in sorted(counts.items())]
