"""What the alert rules read (stored figures into plain rows) and what the banner shows.

alert_figures costs nine queries whatever the fleet size: only the nodes some rule could fire
for are read (phantom on an up node, stale, an old reading, down, a wake pending, a recent change
of hardware, dark with our rent contract, with the times of their latest events), the policies (a handful of rows), the jobs
twice, the recent failures grouped by cause, the snapshots the run-out trend reads (two), and the farms'
stored IP readings (one), and the reports refused past their bound (one).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import BooleanField, Count, ExpressionWrapper, Max, Min, OuterRef, Q, Subquery

from dashboard.alerts import rules
from dashboard.capacity import node_events
from dashboard.deployments.selectors.deployments import ZOS_FAILED_STATES
from dashboard.figures.selectors.history import TREND_DAYS, trend_of
from dashboard.figures.selectors.unreadable import last_unreadable
from dashboard.models import (
    Alert,
    AuditEvent,
    Deployment,
    FarmIps,
    FiguresSnapshot,
    Job,
    Node,
    NodeEvent,
    Policy,
    SnapshotFigures,
)


def _latest_event(kind: str):
    return Subquery(NodeEvent.objects.filter(node=OuterRef("pk"), kind=kind).order_by("-at").values("at")[:1])


def alert_figures(*, now: datetime, limits: rules.Limits) -> rules.Figures:
    policy_changed = dict(Policy.objects.values_list("name", "updated_at"))
    return rules.Figures(
        now=now,
        nodes=[_node_reading(row, policy_changed) for row in _nodes_that_may_alert(now=now, limits=limits)],
        jobs=job_activity(),
        failures=_failures(since=now - limits.failed_window),
        trends=slices_trends(now=now),
        farm_ips=farm_ips_trends(now=now),
        reports_refused=reports_refused(now=now),
        **_unreadable(),
    )


def reports_refused(*, now: datetime) -> list[rules.ReportsRefused]:
    """Reports refused past their bound (lessons.services.lesson_evidence) within LESSON_REPORTS_WINDOW, per subject."""
    since = now - timedelta(seconds=settings.LESSON_REPORTS_WINDOW)
    rows = (
        AuditEvent.objects.filter(action="observation.refused", at__gte=since)
        .values("detail__subject")
        .annotate(n=Count("pk"), last=Max("at"))
    )
    return [rules.ReportsRefused(subject=str(r["detail__subject"]), refused=r["n"], last_at=r["last"]) for r in rows]


def _unreadable() -> dict:
    found = last_unreadable()
    return {"unreadable": found.count, "unreadable_words": found.words()} if found else {}


def _nodes_that_may_alert(*, now: datetime, limits: rules.Limits):
    """The nodes some node rule may fire on, with the dates of their latest events (one query).

    Most of a fleet is quiet: only rows that may be in breach are read, so the cost follows the trouble."""
    wake_pending = Q(power_target="up", power_state="down") & ~Q(status=Node.Status.UP)
    hardware_changed = NodeEvent.objects.filter(
        kind=node_events.TOTAL_CHANGED, at__gte=now - limits.hardware_changed_for
    ).values("node_id")
    return (
        Node.objects.filter(
            Q(status=Node.Status.UP, phantom_slices__gt=0)
            | Q(stale=True)
            | Q(seen_at__lt=now - limits.reading_max_age)
            | Q(status=Node.Status.DOWN)
            | wake_pending
            | Q(closure__in=("rent-grace", "needs-rent"))
            | Q(pk__in=hardware_changed)
        )
        # A withheld node's alerts are muted (maintenance or quarantine: its operator knows).
        .filter(withheld_reason="")
        .order_by()
        .annotate(
            down_at=_latest_event(node_events.WENT_DOWN),
            wake_at=_latest_event(node_events.WAKE_NOT_WOKEN),
            total_changed_at=_latest_event(node_events.TOTAL_CHANGED),
            rent_ended_at=_latest_event(node_events.RENT_ENDED),
            is_waking=ExpressionWrapper(wake_pending, output_field=BooleanField()),
        )
        .values_list(
            "grid_id",
            "farm_id",
            "status",
            "phantom_reasons",
            "stale",
            "registered_at",
            "effective_policy",
            "seen_at",
            "down_at",
            "wake_at",
            "total_changed_at",
            "is_waking",
            "closure",
            "closure_detail",
            "rent_ended_at",
            named=True,
        )
    )


def _node_reading(row, policy_changed: dict[str, datetime]) -> rules.NodeReading:
    return rules.NodeReading(
        node_id=row.grid_id,
        farm_id=row.farm_id,
        status=row.status,
        phantom_reasons=row.phantom_reasons or {},
        stale=row.stale,
        stale_since=_stale_since(row.registered_at, row.effective_policy, policy_changed) if row.stale else None,
        seen_at=row.seen_at,
        # Down with no event: down since it was registered (as far as anything here knows).
        down_since=(row.down_at or row.registered_at) if row.status == Node.Status.DOWN else None,
        wake_asked_since=(row.wake_at or row.seen_at) if row.is_waking else None,
        total_changed_at=row.total_changed_at,
        closure=row.closure,
        closure_detail=row.closure_detail,
        rent_ended_at=row.rent_ended_at,
    )


def farm_ips_trends(*, now: datetime, days: int = TREND_DAYS) -> list[rules.FarmIpsTrend]:
    """Each farm's free public IPv4s on the trend of its stored readings within `days` (one query)."""
    since = now - timedelta(days=days)
    trends = []
    for farm_id, farm_name, readings in FarmIps.objects.order_by("farm_id").values_list(
        "farm_id", "farm_name", "free_readings"
    ):
        points = sorted(
            (at, free) for at, free in ((datetime.fromisoformat(t), n) for t, n in readings or ()) if since <= at <= now
        )
        if not points:
            continue
        trend = trend_of([t for t, _n in points], [n for _t, n in points], days=days)
        trends.append(
            rules.FarmIpsTrend(
                farm_id=farm_id,
                farm_name=farm_name,
                free_now=points[-1][1],
                per_day=trend.per_day,
                days_left=trend.days_left,
                readings=len(points),
            )
        )
    return trends


# The run-out rule's trend reads one snapshot every this often (and the latest): a least-squares
# line over 14 days needs no more, and the beat evaluates every minute.
TREND_SAMPLE_EVERY = timedelta(hours=6)


def slices_trends(*, now: datetime, days: int = TREND_DAYS) -> list[rules.SlicesTrend]:
    """The fleet's and each farm's free deployable slices on their 14-day trend (two queries)."""
    snapshots = list(
        FiguresSnapshot.objects.filter(at__gte=now - timedelta(days=days), at__lte=now)
        .order_by("at")
        .values_list("pk", "at")
    )
    chosen: dict[int, datetime] = {}
    last_kept = None
    for pk, at in snapshots:
        if last_kept is None or at - last_kept >= TREND_SAMPLE_EVERY:
            chosen[pk], last_kept = at, at
    if snapshots:
        chosen[snapshots[-1][0]] = snapshots[-1][1]
    series: dict[str, list[tuple[datetime, int]]] = {}
    for scope, subject, snapshot_pk, free in SnapshotFigures.objects.filter(
        snapshot_id__in=list(chosen), scope__in=[SnapshotFigures.Scope.FLEET, SnapshotFigures.Scope.FARM]
    ).values_list("scope", "subject", "snapshot_id", "free_deployable"):
        name = "fleet" if scope == SnapshotFigures.Scope.FLEET else f"farm {subject}"
        series.setdefault(name, []).append((chosen[snapshot_pk], free))
    trends = []
    for name, points in sorted(series.items()):
        points.sort()
        trend = trend_of([t for t, _v in points], [v for _t, v in points], days=days)
        trends.append(
            rules.SlicesTrend(subject=name, free_now=points[-1][1], per_day=trend.per_day, days_left=trend.days_left)
        )
    return trends


def job_activity() -> rules.JobActivity:
    """The oldest queued job and the freshest heartbeat of a running one (two queries)."""
    totals = Job.objects.aggregate(
        queued=Count("pk", filter=Q(state=Job.State.QUEUED)),
        beat=Max("heartbeat_at", filter=Q(state=Job.State.RUNNING)),
        oldest=Min("created_at", filter=Q(state=Job.State.QUEUED)),
    )
    kind = ""
    if totals["oldest"] is not None:
        kind = (
            Job.objects.filter(state=Job.State.QUEUED).order_by("created_at").values_list("kind", flat=True).first()
            or ""
        )
    return rules.JobActivity(
        oldest_queued_at=totals["oldest"],
        oldest_queued_kind=kind,
        queued=totals["queued"],
        freshest_heartbeat_at=totals["beat"],
    )


def _failures(*, since: datetime) -> list[rules.FailureCount]:
    counts: dict[str, int] = {}
    for row in (
        Deployment.objects.filter(state__in=ZOS_FAILED_STATES, started_at__gte=since)
        .exclude(node__withheld_reason__gt="")  # muted with the node's other alerts
        .order_by()
        .values("cause")
        .annotate(n=Count("pk"))
    ):
        cause = row["cause"] or Deployment.Cause.UNKNOWN
        counts[cause] = counts.get(cause, 0) + row["n"]
    return [rules.FailureCount(cause=cause, deployments=n) for cause, n in sorted(counts.items())]


def _stale_since(registered_at: datetime, effective: str, policy_changed: dict[str, datetime]) -> datetime:
    """The latest moment the catalog can have become stale: its node's registration, or the last
    change of the policy now in force (effective_policy is "name vN"), whichever is later.
    Not stored anywhere exactly; this errs towards later, so the alert never fires early."""
    name = effective.rsplit(" v", 1)[0] if effective else ""
    changed = policy_changed.get(name)
    return max(registered_at, changed) if changed else registered_at


@dataclass(frozen=True)
class BannerAlert:
    """A firing alert as the banner shows it; `pk` is None for the live "no worker" condition."""

    pk: int | None
    rule: str
    title: str
    summary: str
    detail: str
    since: datetime
    acknowledged_by: str
    acknowledged_at: datetime | None


def alerts_firing(*, now: datetime, limits: rules.Limits) -> list[BannerAlert]:
    """The firing alerts, worst first (then newest), and "no worker is running" judged now.

    The worker rule is judged again here because the beat that records alerts often runs inside
    the worker (`celery worker --beat`): when the worker is gone, nothing records that it is.
    """
    firing = [
        BannerAlert(
            a.pk,
            a.rule,
            a.title,
            a.summary,
            a.detail,
            a.since,
            a.acknowledged_by.get_username() if a.acknowledged_by else "",
            a.acknowledged_at,
        )
        for a in Alert.objects.filter(state=Alert.State.FIRING)
        .select_related("acknowledged_by")
        .order_by("-since", "pk")
    ]
    if not any(a.rule == rules.NO_WORKER for a in firing):
        for condition in rules.no_worker(rules.Figures(now=now, jobs=job_activity()), limits):
            firing.append(
                BannerAlert(
                    None,
                    condition.rule,
                    rules.TITLES[condition.rule],
                    condition.summary,
                    condition.detail,
                    now,
                    "",
                    None,
                )
            )
    # sorted() is stable: within a rule, the newest stays first.
    return sorted(firing, key=lambda a: rules.severity_rank(a.rule))


def alerts_banner(*, now: datetime, limits: rules.Limits) -> list[BannerAlert]:
    """What the strip on every page shows: the firing alerts nobody has acknowledged, worst first.
    An acknowledged alert leaves the strip and stays on the alerts page until it resolves."""
    return [a for a in alerts_firing(now=now, limits=limits) if a.acknowledged_at is None]


def alerts_resolved(*, limit: int = 20) -> list[Alert]:
    """The most recently resolved alerts, for the alerts page's history."""
    return list(
        Alert.objects.filter(state=Alert.State.RESOLVED).select_related("acknowledged_by").order_by("-since")[:limit]
    )
