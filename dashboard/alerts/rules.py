"""The alert rules: pure functions of the stored figures. No Django import.

Each rule takes plain rows (read by alerts.selectors.alerts) and the limits (from settings) and returns
the conditions that hold now, one per subject. A subject is what an alert is about ("farm 4242",
"fleet", a failure cause): the service keeps one row per rule and subject, so a rule that holds
for many nodes still sends one message, and a second farm going wrong is told on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from dashboard.capacity import SHORTFALL_REASONS

PHANTOM = "phantom-slices"
STALE = "stale-catalogs"
FAILURES = "failed-deployments"
NO_WORKER = "no-worker"
OLD_READINGS = "old-readings"
NODE_DOWN = "node-down"
WAKE_NOT_WOKEN = "wake-not-woken"
HARDWARE_CHANGED = "hardware-changed"
RUNNING_OUT = "slices-running-out"
RENT_DARK = "rent-dark"
IPS_RUNNING_OUT = "farm-ips-running-out"
UNREADABLE = "nodes-unreadable"
LESSON_REPORTS = "lesson-reports-bounded"

# Phantom reasons that say the node itself cannot place what it offers (capacity.PHANTOM_REASONS);
# a closed node (capacity.closures: down, standby, ...) is told by its closure, not a catalog to fix.
REASONS_ON_UP_NODES = tuple(SHORTFALL_REASONS)
UP = "up"
# How many nodes a message names before it says "and N more".
NAMED_NODES = 10


@dataclass(frozen=True)
class NodeReading:
    node_id: int
    farm_id: int
    status: str
    phantom_reasons: Mapping[str, int] = field(default_factory=dict)
    stale: bool = False
    # Since when the catalog has differed from the effective policy, at the latest (see alerts.selectors.alerts).
    stale_since: datetime | None = None
    seen_at: datetime | None = None  # the last capacity reading; None: never read
    # From the node's events (alerts.selectors.alerts): since when it is down, since when a wake asked for
    # has not happened (None: no wake pending), and when its total capacity last changed.
    down_since: datetime | None = None
    wake_asked_since: datetime | None = None
    total_changed_at: datetime | None = None
    # Why the node offers nothing (capacity.closures key, as stored) and when a rent contract on it last
    # ended (its node event): our rent in grace, or ended on a node the chain keeps for a renter, darkens it.
    closure: str = ""
    closure_detail: str = ""
    rent_ended_at: datetime | None = None


@dataclass(frozen=True)
class SlicesTrend:
    """Free deployable slices of the fleet (subject "fleet") or one farm ("farm 4242"), on the snapshots' trend."""

    subject: str
    free_now: int
    per_day: float | None  # None: not enough history
    days_left: float | None  # None: not falling (or no trend)


@dataclass(frozen=True)
class FarmIpsTrend:
    """One farm's free public IPv4s on the trend of its stored readings (models.FarmIps.free_readings)."""

    farm_id: int
    farm_name: str
    free_now: int
    per_day: float | None  # None: not enough history
    days_left: float | None  # None: not falling (or no trend)
    readings: int = 0  # how many points the trend went through


@dataclass(frozen=True)
class JobActivity:
    oldest_queued_at: datetime | None = None
    oldest_queued_kind: str = ""
    queued: int = 0
    # The freshest heartbeat of a running job: a worker was alive then.
    freshest_heartbeat_at: datetime | None = None


@dataclass(frozen=True)
class FailureCount:
    cause: str
    deployments: int  # failed or refused within the window


@dataclass(frozen=True)
class ReportsRefused:
    """Reports that teach refused past their bound (a token's, or a build's) within the window."""

    subject: str  # "token abcd1234…" or "ZOS v3.14.0"
    refused: int
    last_at: datetime


@dataclass(frozen=True)
class Limits:
    stale_catalog_after: timedelta = timedelta(hours=24)
    failed_spike: int = 5
    failed_window: timedelta = timedelta(minutes=15)
    queued_without_worker_after: timedelta = timedelta(seconds=90)
    heartbeat_timeout: timedelta = timedelta(seconds=120)
    reading_max_age: timedelta = timedelta(hours=24)
    node_down_after: timedelta = timedelta(minutes=30)
    wake_after: timedelta = timedelta(minutes=10)
    hardware_changed_for: timedelta = timedelta(hours=24)
    run_out_days: float = 14.0
    ips_run_out_days: float = 7.0


@dataclass(frozen=True)
class Figures:
    now: datetime
    nodes: Sequence[NodeReading] = ()
    jobs: JobActivity = JobActivity()
    failures: Sequence[FailureCount] = ()
    trends: Sequence[SlicesTrend] = ()
    farm_ips: Sequence[FarmIpsTrend] = ()
    # The nodes the last fleet-wide reading refused (figures.selectors.unreadable), and its one line.
    unreadable: int = 0
    unreadable_words: str = ""
    reports_refused: Sequence[ReportsRefused] = ()


@dataclass(frozen=True)
class Condition:
    rule: str
    subject: str
    summary: str  # one line: what is wrong, where, how much
    detail: str  # which nodes, since when, what to do


def phantom_slices(figures: Figures, limits: Limits) -> list[Condition]:
    """Per farm: free slices offered by up nodes that the last live reading cannot place."""
    by_farm: dict[int, list[tuple[int, dict[str, int]]]] = {}
    for node in figures.nodes:
        if node.status != UP:
            continue
        reasons = {r: int(node.phantom_reasons.get(r) or 0) for r in REASONS_ON_UP_NODES}
        if sum(reasons.values()) > 0:
            by_farm.setdefault(node.farm_id, []).append((node.node_id, reasons))
    conditions = []
    for farm_id, nodes in sorted(by_farm.items()):
        total = sum(sum(r.values()) for _, r in nodes)
        per_reason = {r: sum(n[1][r] for n in nodes) for r in REASONS_ON_UP_NODES}
        reasons = ", ".join(f"{r} {n}" for r, n in per_reason.items() if n)
        nodes.sort(key=lambda n: (-sum(n[1].values()), n[0]))
        named = ", ".join(f"node {node_id} ({sum(r.values())})" for node_id, r in nodes[:NAMED_NODES])
        conditions.append(
            Condition(
                rule=PHANTOM,
                subject=f"farm {farm_id}",
                summary=f"Farm {farm_id} offers {_count(total, 'phantom slice')} on {_count(len(nodes), 'up node')} ({reasons})",
                detail=f"Offered but not placeable by the last live reading: {named}{_more(nodes)}. "
                "Re-register these nodes so the marketplace stops selling slices ZOS will refuse.",
            )
        )
    return conditions


def stale_catalogs(figures: Figures, limits: Limits) -> list[Condition]:
    """Fleet: catalogs that have differed from their policy for longer than the limit."""
    cutoff = figures.now - limits.stale_catalog_after
    old = sorted(
        (n for n in figures.nodes if n.stale and n.stale_since is not None and n.stale_since <= cutoff),
        key=lambda n: (n.stale_since, n.node_id),
    )
    if not old:
        return []
    named = ", ".join(f"node {n.node_id}" for n in old[:NAMED_NODES])
    return [
        Condition(
            rule=STALE,
            subject="fleet",
            summary=f"{_count(len(old), 'node')} {'has' if len(old) == 1 else 'have'} had a stale catalog for over "
            f"{_duration(limits.stale_catalog_after)}",
            detail=f"Stale since {_when(old[0].stale_since)} at the latest: {named}{_more(old)}. "
            "Re-register them (Fleet → Re-register stale) or change the policy back.",
        )
    ]


def failed_deployments(figures: Figures, limits: Limits) -> list[Condition]:
    """Per cause: a spike of failed or refused deployments within the window."""
    conditions = []
    for row in sorted(figures.failures, key=lambda r: r.cause):
        if row.deployments >= limits.failed_spike:
            cause = row.cause or "unknown"
            conditions.append(
                Condition(
                    rule=FAILURES,
                    subject=cause,
                    summary=f"{_count(row.deployments, 'deployment')} failed for {cause} in the last "
                    f"{_duration(limits.failed_window)} (limit {limits.failed_spike})",
                    detail="See Failed deployments for the nodes and ZOS's own words; "
                    + _FAILURE_ADVICE.get(cause, "look for what the failures have in common."),
                )
            )
    return conditions


_FAILURE_ADVICE = {
    "memory": "nodes report more free memory than ZOS lets VMs use: re-register or precheck them.",
    "disk": "no SSD pool had room for the disk: re-register the nodes with their pools.",
    "node-offline": "the nodes went down or to standby after they were offered.",
    "grid-unavailable": "the grid could not be reached: check the Grid Proxy.",
    "validation": "the deployment request itself was refused: check what the marketplace sends.",
    "node-closed": "the chain refused contracts on nodes not available to the marketplace (rented by another twin, "
    "dedicated with no rent contract of ours, or on standby): check MARKETPLACE_TWIN_ID and the nodes' rent.",
    "not-authorized": "the chain says the marketplace's twin does not own those contracts: check the signing account.",
    "contract-grace": "the contracts (or the rent contract) are in grace: the marketplace's twin must be funded.",
    "chain-capacity": "the chain's own count says the nodes are full: precheck them.",
}


def no_worker(figures: Figures, limits: Limits) -> list[Condition]:
    """A job has waited longer than the limit and no running job shows a live heartbeat.

    A live heartbeat is one younger than the reaper's limit (JOB_HEARTBEAT_TIMEOUT): a worker busy
    with a long job is alive, and the queued job simply waits its turn.
    """
    jobs = figures.jobs
    if jobs.oldest_queued_at is None or figures.now - jobs.oldest_queued_at < limits.queued_without_worker_after:
        return []
    beat = jobs.freshest_heartbeat_at
    if beat is not None and figures.now - beat < limits.heartbeat_timeout:
        return []
    waited = figures.now - jobs.oldest_queued_at
    last = f"the last heartbeat was {_when(beat)}" if beat else "no job is running"
    return [
        Condition(
            rule=NO_WORKER,
            subject="worker",
            summary=f"No worker is running: {_count(jobs.queued, 'job')} queued, the oldest "
            f"({jobs.oldest_queued_kind or 'job'}) for {_duration(waited)}",
            detail=f"Queued since {_when(jobs.oldest_queued_at)} and {last}. Start a Celery worker on this "
            "broker (celery -A config worker); queued jobs fail after JOB_QUEUED_TIMEOUT.",
        )
    ]


def old_readings(figures: Figures, limits: Limits) -> list[Condition]:
    """Fleet: nodes whose last capacity reading is older than the limit (never-read nodes are not
    counted: the fleet page already says "never read", and there is no reading to be old)."""
    cutoff = figures.now - limits.reading_max_age
    old = sorted(
        (n for n in figures.nodes if n.seen_at is not None and n.seen_at < cutoff), key=lambda n: (n.seen_at, n.node_id)
    )
    if not old:
        return []
    named = ", ".join(f"node {n.node_id}" for n in old[:NAMED_NODES])
    return [
        Condition(
            rule=OLD_READINGS,
            subject="fleet",
            summary=f"The capacity readings of {_count(len(old), 'node')} are older than {_duration(limits.reading_max_age)}",
            detail=f"The oldest was read {_when(old[0].seen_at)}: {named}{_more(old)}. Placeable and phantom "
            "figures rest on these readings; precheck the nodes to read them again.",
        )
    ]


def _per_farm(nodes: Sequence[NodeReading]) -> dict[int, list[NodeReading]]:
    by_farm: dict[int, list[NodeReading]] = {}
    for node in nodes:
        by_farm.setdefault(node.farm_id, []).append(node)
    return dict(sorted(by_farm.items()))


def _farm_conditions(
    rule: str,
    nodes: Sequence[NodeReading],
    *,
    order: Callable[[NodeReading], Any],
    named: Callable[[NodeReading], str],
    summary: Callable[[int, int], str],
    detail: Callable[[str], str],
) -> list[Condition]:
    """One condition per farm of `nodes`: its nodes in `order`, the first NAMED_NODES named (summary takes
    the farm and how many nodes, detail the named list with its "and N more")."""
    conditions = []
    for farm_id, farm_nodes in _per_farm(nodes).items():
        farm_nodes.sort(key=order)
        names = ", ".join(named(n) for n in farm_nodes[:NAMED_NODES]) + _more(farm_nodes)
        conditions.append(
            Condition(
                rule=rule,
                subject=f"farm {farm_id}",
                summary=summary(farm_id, len(farm_nodes)),
                detail=detail(names),
            )
        )
    return conditions


def nodes_down(figures: Figures, limits: Limits) -> list[Condition]:
    """Per farm: nodes down for longer than the limit (standby is the power manager's, not a fault)."""
    cutoff = figures.now - limits.node_down_after
    down = [n for n in figures.nodes if n.status == "down" and n.down_since is not None and n.down_since <= cutoff]
    return _farm_conditions(
        NODE_DOWN,
        down,
        order=lambda n: (n.down_since, n.node_id),
        named=lambda n: f"node {n.node_id} (since {_when(n.down_since)})",
        summary=lambda farm_id, count: (
            f"Farm {farm_id}: {_count(count, 'node')} down for over {_duration(limits.node_down_after)}"
        ),
        detail=lambda named: (
            f"Down: {named}. Their slices cannot be deployed; check the machines, their power and their network."
        ),
    )


def wakes_not_happened(figures: Figures, limits: Limits) -> list[Condition]:
    """Per farm: the power manager asked nodes up (power target up) and they are still off past the limit."""
    cutoff = figures.now - limits.wake_after
    stuck = [n for n in figures.nodes if n.wake_asked_since is not None and n.wake_asked_since <= cutoff]
    return _farm_conditions(
        WAKE_NOT_WOKEN,
        stuck,
        order=lambda n: (n.wake_asked_since, n.node_id),
        named=lambda n: f"node {n.node_id} (asked {_when(n.wake_asked_since)})",
        summary=lambda farm_id, count: (
            f"Farm {farm_id}: {_count(count, 'node')} asked to wake {'has' if count == 1 else 'have'} "
            f"not woken in {_duration(limits.wake_after)}"
        ),
        detail=lambda named: (
            f"Power target up, state still down: {named}. Their after-wake slices are not "
            "coming; check the farm's power manager (farmerbot) and the machines' wake-on-LAN."
        ),
    )


def hardware_changed(figures: Figures, limits: Limits) -> list[Condition]:
    """Per farm: nodes whose total capacity changed recently; their catalogs were carved on the old total."""
    since = figures.now - limits.hardware_changed_for
    changed = [n for n in figures.nodes if n.total_changed_at is not None and n.total_changed_at >= since]
    return _farm_conditions(
        HARDWARE_CHANGED,
        changed,
        order=lambda n: (n.total_changed_at, n.node_id),
        named=lambda n: f"node {n.node_id} ({_when(n.total_changed_at)})",
        summary=lambda farm_id, count: f"Farm {farm_id}: the hardware of {_count(count, 'node')} changed",
        detail=lambda named: (
            f"Total capacity changed: {named}. Their catalogs were carved on the old total: "
            "re-register them (the node page says what changed)."
        ),
    )


def slices_running_out(figures: Figures, limits: Limits) -> list[Condition]:
    """Fleet and per farm: free deployable slices that run out within the limit on the current trend."""
    conditions = []
    for trend in sorted(figures.trends, key=lambda t: (t.subject != "fleet", t.subject)):
        if trend.days_left is None or trend.per_day is None or trend.days_left > limits.run_out_days:
            continue
        where = "The fleet" if trend.subject == "fleet" else trend.subject.capitalize()
        left = "none are left now" if trend.days_left <= 0 else f"none left in about {trend.days_left:.0f} days"
        conditions.append(
            Condition(
                rule=RUNNING_OUT,
                subject=trend.subject,
                summary=f"{where}: free deployable slices falling by {-trend.per_day:.1f} a day; {left}",
                detail=f"{trend.free_now} free deployable slices now, on a least-squares line through the last 14 days "
                f"of snapshots (limit {limits.run_out_days:g} days). Add nodes, or re-register stale ones.",
            )
        )
    return conditions


def farm_ips_running_out(figures: Figures, limits: Limits) -> list[Condition]:
    """Per farm: free public IPv4s that run out within the limit on the trend of the farm's readings. The
    subject is the farm, so its owner's route (ALERT_FARM_URLS) hears it: only the farmer can add IPs."""
    conditions = []
    for trend in sorted(figures.farm_ips, key=lambda t: t.farm_id):
        if trend.days_left is None or trend.per_day is None or trend.days_left > limits.ips_run_out_days:
            continue
        farm = f"Farm {trend.farm_id}" + (f" ({trend.farm_name})" if trend.farm_name else "")
        if trend.days_left <= 0:
            left = "none are free now"
        elif trend.days_left < 1:
            left = "none free within a day"
        else:
            left = f"none free in about {_count(round(trend.days_left), 'day')}"
        conditions.append(
            Condition(
                rule=IPS_RUNNING_OUT,
                subject=f"farm {trend.farm_id}",
                summary=f"{farm}: free public IPv4s falling by {-trend.per_day:.1f} a day; {left}",
                detail=f"{_count(trend.free_now, 'free public IPv4')} now, on a least-squares line through "
                f"{_count(trend.readings, 'reading')} of the farm's IPs over the last 14 days (limit "
                f"{limits.ips_run_out_days:g} days). Its IPv4 slices stop when they run out: add public IPs to the "
                "farm on the chain, or sell its slices without one.",
            )
        )
    return conditions


def rent_dark(figures: Figures, limits: Limits) -> list[Condition]:
    """Per farm: nodes whose catalog went dark with the marketplace's rent contract: in its grace period
    (unpaid), or ended on a node the chain keeps for a renter (it now needs our rent contract again)."""
    del limits
    dark = [
        n
        for n in figures.nodes
        if n.closure == "rent-grace" or (n.closure == "needs-rent" and n.rent_ended_at is not None)
    ]
    return _farm_conditions(
        RENT_DARK,
        dark,
        order=lambda n: n.node_id,
        named=lambda n: (
            f"node {n.node_id} ({'rent contract ' + n.closure_detail + ' in grace' if n.closure == 'rent-grace' else 'rent ended ' + _when(n.rent_ended_at)})"
        ),
        summary=lambda farm_id, count: (
            f"Farm {farm_id}: {_count(count, 'node')} dark with the marketplace's rent contract"
        ),
        detail=lambda named: (
            f"{named}. Their catalogs offer nothing: fund the marketplace's twin (a rent "
            "contract in grace moves its node's contracts to grace) or rent the nodes again."
        ),
    )


def nodes_unreadable(figures: Figures, limits: Limits) -> list[Condition]:
    """Fleet: the grid's answers for some nodes could not be read at the last fleet-wide reading. Those
    nodes keep their old reading, which ages quietly; this says why before old-readings would."""
    if figures.unreadable <= 0:
        return []
    return [
        Condition(
            rule=UNREADABLE,
            subject="fleet",
            summary=f"{_count(figures.unreadable, 'node')} could not be read at the last reading",
            detail=f"{figures.unreadable_words}. Their stored readings are kept, not overwritten. A Grid Proxy "
            "whose answers changed shape (see docs/contracts.md) or a broken record: check GRID_PROXY_URL and "
            "the proxy's version.",
        )
    ]


def lesson_reports_bounded(figures: Figures, limits: Limits) -> list[Condition]:
    """Per token or build: reports that teach refused (429) past their bound: a reporter louder than any
    marketplace's refusals, or one build's fleet lesson under a flood (issue 44)."""
    return [
        Condition(
            rule=LESSON_REPORTS,
            subject=row.subject,
            summary=f"{_count(row.refused, 'report')} from {row.subject} refused past the bound on reports that teach",
            detail=f"Last at {_when(row.last_at)}. A memory or disk refusal or a probe moves what the fleet believes, "
            "so they are bounded per token and per build (LESSON_REPORTS_*). See the audit trail "
            "(observation.refused) and Lessons waiting; revoke the token if it is not the marketplace's.",
        )
        for row in sorted(figures.reports_refused, key=lambda r: r.subject)
        if row.refused > 0
    ]


RULES = {
    PHANTOM: phantom_slices,
    STALE: stale_catalogs,
    FAILURES: failed_deployments,
    NO_WORKER: no_worker,
    OLD_READINGS: old_readings,
    NODE_DOWN: nodes_down,
    WAKE_NOT_WOKEN: wakes_not_happened,
    HARDWARE_CHANGED: hardware_changed,
    RUNNING_OUT: slices_running_out,
    RENT_DARK: rent_dark,
    IPS_RUNNING_OUT: farm_ips_running_out,
    UNREADABLE: nodes_unreadable,
    LESSON_REPORTS: lesson_reports_bounded,
}
TITLES = {
    PHANTOM: "Phantom slices on up nodes",
    STALE: "Stale catalogs",
    FAILURES: "Failed deployments",
    NO_WORKER: "No worker is running",
    OLD_READINGS: "Old capacity readings",
    NODE_DOWN: "Nodes down",
    WAKE_NOT_WOKEN: "A wake that did not happen",
    HARDWARE_CHANGED: "Hardware changed",
    RUNNING_OUT: "Free slices running out",
    RENT_DARK: "Dark with our rent contract",
    IPS_RUNNING_OUT: "A farm's public IPv4s running out",
    UNREADABLE: "Nodes whose answer could not be read",
    LESSON_REPORTS: "Reports that teach refused past their bound",
}


# Worst first, for the strip and the alerts page: what stops every job, then what refuses the
# marketplace's deploys, then nodes lost or changed, then what offers slices ZOS would refuse, then
# what runs out or is merely out of date. A rule not listed here sorts after these.
WORST_FIRST = (
    NO_WORKER,
    UNREADABLE,
    FAILURES,
    LESSON_REPORTS,
    NODE_DOWN,
    RENT_DARK,
    WAKE_NOT_WOKEN,
    HARDWARE_CHANGED,
    PHANTOM,
    RUNNING_OUT,
    IPS_RUNNING_OUT,
    OLD_READINGS,
    STALE,
)


def severity_rank(rule: str) -> int:
    return WORST_FIRST.index(rule) if rule in WORST_FIRST else len(WORST_FIRST)


def conditions(figures: Figures, limits: Limits) -> list[Condition]:
    """Every condition that holds now, rule by rule."""
    return [c for rule in RULES.values() for c in rule(figures, limits)]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _more(items: Sequence) -> str:
    return f" and {len(items) - NAMED_NODES} more" if len(items) > NAMED_NODES else ""


def _when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M} UTC" if at else "never"


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 86400 == 0 and seconds:
        return _count(seconds // 86400, "day")
    if seconds % 3600 == 0 and seconds:
        return _count(seconds // 3600, "hour")
    if seconds >= 60:
        return f"{seconds // 60} min"
    return f"{seconds} s"
