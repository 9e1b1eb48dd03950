"""The Prometheus collectors: the stored figures, read when Prometheus scrapes (never cached here).

Nothing is counted in process memory, so every web process answers the same, a restart loses
nothing, and the numbers are the ones the pages show. Two registries, two paths:

- `/metrics` (`registry`): slicedash_fleet_* for the whole fleet (slicedash_fleet_public_ipv4_free: the farms' free IPs), the odds' calibration (slicedash_odds_*), slicedash_jobs*,
  slicedash_deployments_failed_total, slicedash_worker_heartbeat_age_seconds and the Grid Proxy
  requests (slicedash_grid_request_duration_seconds, by endpoint and outcome), the waits for the
  shared request budget (slicedash_grid_budget_wait_seconds) and the 429s (slicedash_grid_rate_limited).
  Its size and cost do
  not depend on the fleet: scrape it often, alert on it.
- `/metrics/farms` (`farms_registry`): slicedash_farm_* per farm (label `farm`), 16 series a farm (4 of them deployable by tier),
  so its answer grows with the number of farms: scrape it less often (README, "Metrics").
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from dashboard.figures.selectors.farm_totals import FarmSums
from dashboard.figures.selectors.metrics import AuditFigures, MetricsSnapshot, farms_figures, metrics_snapshot
from dashboard.figures.selectors.tiers import TIER_FIGURES
from dashboard.grid.budget import BUDGET_ENDPOINT
from dashboard.grid.proxy.client import RATE_LIMITED
from dashboard.lessons.selectors.odds import odds_calibration_now
from dashboard.models import Job
from dashboard.nodes.selectors.farm_ips import farm_ips_available

# (attribute of FarmSums, metric suffix, help)
FIGURES = (
    ("nodes", "nodes", "Registered nodes"),
    ("nodes_up", "nodes_up", "Nodes the grid last reported up"),
    ("nominal", "slices_nominal", "Slices in the stored catalogs"),
    ("deployable", "slices_deployable", "Slices the policies in force carve"),
    ("free", "slices_free", "Free slices on offer in the stored catalogs (those held for a buyer left out)"),
    ("held", "slices_held", "Free slices held for a buyer (live holds, POST /api/v1/holds)"),
    ("placeable", "slices_placeable", "Free slices that fit the last live reading (prechecked nodes)"),
    ("phantom", "slices_phantom", "Free slices offered that the last live reading cannot place (prechecked nodes)"),
    ("phantom_on_up_nodes", "slices_phantom_on_up_nodes", "Phantom slices on nodes that are up"),
    ("stale", "nodes_stale", "Nodes whose catalog differs from what their policy carves now"),
    ("unprechecked", "nodes_unprechecked", "Nodes never prechecked (placeable and phantom unknown)"),
    ("never_read", "nodes_never_read", "Nodes whose capacity was never read from the grid"),
)
TIERS_HELP = (
    "Deployable slices by tier (figures.selectors.tiers: now, after-wake, blocked, closed), as the fleet page's tiles "
    "count them; the tiers add up to slices_deployable"
)


class FarmsCollector:
    """/metrics/farms: one query (see figures.selectors.metrics.farms_figures)."""

    def describe(self):
        # Nothing up front: registering must not touch the database.
        return []

    def collect(self):
        now = timezone.now()
        farm_families = {
            attr: GaugeMetricFamily(f"slicedash_farm_{suffix}", f"{text}, per farm", labels=["farm"])
            for attr, suffix, text in FIGURES
        }
        farm_oldest = GaugeMetricFamily(
            "slicedash_farm_oldest_reading_age_seconds",
            "Age of the least recently read node's capacity, per farm",
            labels=["farm"],
        )
        farm_tiers = GaugeMetricFamily(
            "slicedash_farm_slices_deployable_tier", f"{TIERS_HELP}, per farm", labels=["farm", "tier"]
        )
        for farm in farms_figures():
            label = [str(farm.farm_id)]
            for attr, family in farm_families.items():
                family.add_metric(label, getattr(farm, attr))
            for tier, attr in TIER_FIGURES.items():
                farm_tiers.add_metric([*label, tier], getattr(farm, attr))
            if farm.oldest_reading_at is not None:
                farm_oldest.add_metric(label, _age(now, farm.oldest_reading_at))
        yield from farm_families.values()
        yield farm_tiers
        yield farm_oldest


class FiguresCollector:
    """/metrics: six queries whatever the fleet size (see figures.selectors.metrics.metrics_snapshot)."""

    def describe(self):
        return []

    def collect(self):
        now = timezone.now()
        snapshot = metrics_snapshot()
        # Each family group reads only its part of the snapshot; the order is the exposition's.
        yield from _fleet_families(now, snapshot)
        yield from _odds_families()
        yield from _job_families(now, snapshot)
        yield from _failure_families(snapshot)
        if snapshot.audit is not None:
            yield from _audit_families(now, snapshot.audit)
        yield from _grid_request_families(snapshot)


def _fleet_families(now: datetime, snapshot: MetricsSnapshot):
    """The fleet's sums, its tiers, its free IPv4s, its oldest reading and its phantoms by reason."""
    fleet: FarmSums = snapshot.fleet
    for attr, suffix, text in FIGURES:
        yield GaugeMetricFamily(f"slicedash_fleet_{suffix}", f"{text}, whole fleet", value=getattr(fleet, attr))
    tiers = GaugeMetricFamily("slicedash_fleet_slices_deployable_tier", f"{TIERS_HELP}, whole fleet", labels=["tier"])
    for tier, attr in TIER_FIGURES.items():
        tiers.add_metric([tier], getattr(fleet, attr))
    yield tiers
    yield GaugeMetricFamily(
        "slicedash_fleet_public_ipv4_free",
        "Public IPv4s free in the farms whose IPs were read (as last read, less those live holds keep): "
        "the bound on slices sold with an IP, whole fleet",
        value=sum(farm_ips_available(now).values()),
    )
    if fleet.oldest_reading_at is not None:
        yield GaugeMetricFamily(
            "slicedash_fleet_oldest_reading_age_seconds",
            "Age of the least recently read node's capacity, whole fleet",
            value=_age(now, fleet.oldest_reading_at),
        )

    by_reason = GaugeMetricFamily(
        "slicedash_fleet_slices_phantom_by_reason",
        "Phantom slices by reason (capacity.PHANTOM_REASONS: the node's closure, e.g. down, standby, rented, "
        "needs-rent, rent-grace; or the shortfall: memory, disk, pool), whole fleet",
        labels=["reason"],
    )
    for reason, slices in snapshot.phantom_by_reason.items():
        by_reason.add_metric([reason], slices)
    yield by_reason
    yield GaugeMetricFamily(
        "slicedash_grid_nodes_unreadable",
        "Nodes whose answer the last fleet watch (or onboarding, if newer) could not read: refused by the "
        "parser, their stored reading kept (0: every answer read)",
        value=snapshot.unreadable.count if snapshot.unreadable else 0,
    )


def _odds_families():
    """How well the slices' odds have matched the outcomes (scores only once there are outcomes)."""
    outcomes, brier, ece = odds_calibration_now()
    yield GaugeMetricFamily(
        "slicedash_odds_outcomes",
        "Deployments with odds kept and an outcome the odds are of (deployed, or refused for memory)",
        value=outcomes,
    )
    if outcomes:
        yield GaugeMetricFamily(
            "slicedash_odds_brier_score",
            "Brier score of the slices' odds over those outcomes (0 is perfect; 0.25 a coin's)",
            value=brier,
        )
        yield GaugeMetricFamily(
            "slicedash_odds_expected_calibration_error",
            "Expected calibration error of the slices' odds over those outcomes (ten bins of odds)",
            value=ece,
        )


def _job_families(now: datetime, snapshot: MetricsSnapshot):
    """Jobs by kind and state, the oldest active ones' age, and the workers' heartbeat."""
    jobs = GaugeMetricFamily("slicedash_jobs", "Jobs by kind and state", labels=["kind", "state"])
    oldest = GaugeMetricFamily(
        "slicedash_jobs_oldest_age_seconds",
        "Age of the oldest queued or running job, by kind and state",
        labels=["kind", "state"],
    )
    for row in snapshot.jobs:
        jobs.add_metric([row.kind, row.state], row.jobs)
        if row.state in Job.ACTIVE_STATES and row.oldest_created_at is not None:
            oldest.add_metric([row.kind, row.state], _age(now, row.oldest_created_at))
    yield jobs
    yield oldest
    heartbeat = snapshot.freshest_heartbeat_at
    if heartbeat is not None:
        yield GaugeMetricFamily(
            "slicedash_worker_heartbeat_age_seconds",
            "Age of the latest heartbeat written by a worker running a job (absent when no job runs)",
            value=_age(now, heartbeat),
        )


def _failure_families(snapshot: MetricsSnapshot):
    """Deployments ZOS refused or the precheck turned away, by cause."""
    failed = CounterMetricFamily(
        "slicedash_deployments_failed",
        "Deployments by cause: state=failed ZOS refused them (or the grid failed), state=refused the precheck turned them away before the grid",
        labels=["cause", "state"],
    )
    for row in snapshot.failures:
        failed.add_metric([row.cause, row.state], row.deployments)
    yield failed


def _audit_families(now: datetime, audit: AuditFigures):
    """What the newest slice audit found, and how old it is."""
    found = GaugeMetricFamily(
        "slicedash_audit_findings",
        "What the newest slice audit found, by kind: orphan (slice taken, VM gone), foreign (VM unknown to "
        "the catalog), count (counts that disagree), not-checked (the grid did not answer)",
        labels=["kind"],
    )
    for kind, n in sorted(audit.findings.items()):
        found.add_metric([kind], n)
    yield found
    yield GaugeMetricFamily(
        "slicedash_audit_age_seconds",
        "Age of the newest finished slice audit",
        value=_age(now, audit.finished_at),
    )


def _grid_request_families(snapshot: MetricsSnapshot):
    """Grid Proxy requests, the waits for the shared budget (stored under their own endpoint) and the 429s."""
    grid = HistogramMetricFamily(
        "slicedash_grid_request_duration_seconds",
        "Grid Proxy requests (retries included) by endpoint and outcome (ok, unavailable, not_found, offline, "
        "malformed, refused; rate_limited: a try answered 429), from every web process and worker",
        labels=["endpoint", "outcome"],
    )
    budget = HistogramMetricFamily(
        "slicedash_grid_budget_wait_seconds",
        "Time Grid Proxy requests waited for the shared request budget (GRID_RATE_LIMIT), by priority "
        "(interactive, background); only requests that waited are counted; priority fallback: requests a "
        "process's own window admitted while the shared store could not answer (the limit is then per process)",
        labels=["priority"],
    )
    limited = CounterMetricFamily(
        "slicedash_grid_rate_limited",
        "Tries the Grid Proxy refused for rate (429), waited for and retried, by endpoint",
        labels=["endpoint"],
    )
    for row in snapshot.grid_requests:
        if row.endpoint == BUDGET_ENDPOINT:
            budget.add_metric([row.outcome], buckets=row.buckets, sum_value=row.seconds)
            continue
        grid.add_metric([row.endpoint, row.outcome], buckets=row.buckets, sum_value=row.seconds)
        if row.outcome == RATE_LIMITED:
            limited.add_metric([row.endpoint], row.requests)
    yield grid
    yield budget
    yield limited


def _age(now: datetime, at: datetime) -> float:
    return max((now - at).total_seconds(), 0.0)


registry = CollectorRegistry(auto_describe=False)
registry.register(FiguresCollector())
farms_registry = CollectorRegistry(auto_describe=False)
farms_registry.register(FarmsCollector())
