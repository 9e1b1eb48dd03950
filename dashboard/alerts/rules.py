"""The alert rules: pure functions of the stored figures. No Django import.

Each rule takes plain rows (read by selectors.alerts) and the limits (from settings) and returns
the conditions that hold now, one per subject. A subject is what an alert is about ("farm 4242",
"fleet", a failure cause): the service keeps one row per rule and subject, so a rule that holds
for many nodes still sends one message, and a second farm going wrong is told on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

PHANTOM = "phantom-slices"
STALE = "stale-catalogs"
FAILURES = "failed-deployments"
NO_WORKER = "no-worker"
OLD_READINGS = "old-readings"

# Phantom reasons that say the node itself cannot place what it offers (capacity.PHANTOM_REASONS);
# down and standby are the node being away, told by its status, not a catalog to fix.
REASONS_ON_UP_NODES = ("memory", "disk", "pool")
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
    # Since when the catalog has differed from the effective policy, at the latest (see selectors.alerts).
    stale_since: datetime | None = None
    seen_at: datetime | None = None  # the last capacity reading; None: never read


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
class Limits:
    stale_catalog_after: timedelta = timedelta(hours=24)
    failed_spike: int = 5
    failed_window: timedelta = timedelta(minutes=15)
    queued_without_worker_after: timedelta = timedelta(seconds=90)
    heartbeat_timeout: timedelta = timedelta(seconds=120)
    reading_max_age: timedelta = timedelta(hours=24)


@dataclass(frozen=True)
class Figures:
    now: datetime
    nodes: Sequence[NodeReading] = ()
    jobs: JobActivity = JobActivity()
    failures: Sequence[FailureCount] = ()


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
            "broker (celery -A dashboard worker); queued jobs fail after JOB_QUEUED_TIMEOUT.",
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


RULES = {
    PHANTOM: phantom_slices,
    STALE: stale_catalogs,
    FAILURES: failed_deployments,
    NO_WORKER: no_worker,
    OLD_READINGS: old_readings,
}
TITLES = {
    PHANTOM: "Phantom slices on up nodes",
    STALE: "Stale catalogs",
    FAILURES: "Failed deployments",
    NO_WORKER: "No worker is running",
    OLD_READINGS: "Old capacity readings",
}


# Worst first, for the strip and the alerts page: what stops every job, then what refuses the
# marketplace's deploys, then what offers slices ZOS would refuse, then what is merely out of date.
# A rule not listed here sorts after these.
WORST_FIRST = (NO_WORKER, FAILURES, PHANTOM, OLD_READINGS, STALE)


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
