"""The slice audit's read: every registered node's catalog against its live contracts (a read, never a write).

The catalog side is three queries whatever the fleet size (the nodes, their taken slices, their
live deployment records); the grid side is `Grid.contracts(node_id)`, one node at a time:

- paced: at most `rate` requests a second (CATALOG_AUDIT_RATE), well under the proxy's 20 a second
  per client IP, so prechecks and the pages keep their share;
- bounded: every read inside the audit's own deadline (CATALOG_AUDIT_DEADLINE) and each node's
  inside GRID_STEP_DEADLINE. A node the grid fails to answer for, or one the deadline left unread,
  is listed **not checked**, with why: never as clean.

The rules of the match are dashboard.capacity.catalog_audit (pure). What the last audit found, for the page
and /metrics, is its job's stored result (`audit_latest`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings

from dashboard.capacity.catalog_audit import Finding, FindingKind, GridVm, TakenSlice, contract_of, node_match
from dashboard.grid.deadline import Deadline, grid_step_deadline
from dashboard.grid.types import Grid, GridError
from dashboard.jobs.results import CatalogAuditResult
from dashboard.models import Deployment, Hold, Job, Node, Slice


@dataclass
class AuditRead:
    """What one read of the fleet found; `findings` in node order, not-checked nodes among them."""

    nodes: int = 0
    checked: int = 0
    requests: int = 0
    findings: list[Finding] = field(default_factory=list)
    # Node pk -> its contracts in GracePeriod that hold capacity, for every node read (capacity.warnings).
    grace: dict[int, int] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        found = {kind.value: 0 for kind in FindingKind}
        for finding in self.findings:
            found[finding.kind.value] += 1
        return found


@dataclass(frozen=True)
class Pace:
    """At most `rate` grid requests a second, over the whole audit; `clock` and `sleep` are seams."""

    rate: float
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def catalog_audit_read(
    *,
    grid: Grid,
    deadline: Deadline,
    pace: Pace,
    node_ids: Iterable[int] | None = None,
    on_node: Callable[[int, int], None] | None = None,
) -> AuditRead:
    """Match every registered node (or these grid ids) against the grid; see the module doc.

    `on_node(done, total)` is told after each node (the job's progress).
    """
    nodes = Node.objects.order_by("grid_id")
    if node_ids is not None:
        nodes = nodes.filter(grid_id__in=list(node_ids))
    rows = list(nodes.values_list("pk", "grid_id", "slices_free"))
    taken, records = _catalog(pk for pk, _grid_id, _free in rows)
    now = datetime.now(tz=UTC)
    held = _live_holds_by_node([pk for pk, _g, _f in rows], now=now)
    fixable_before = now - timedelta(seconds=settings.CATALOG_AUDIT_ORPHAN_GRACE)
    read = AuditRead(nodes=len(rows))
    started = pace.clock()
    for done, (pk, grid_id, free) in enumerate(rows, start=1):
        # Paced from the start of the audit: request n goes no earlier than n / rate seconds in.
        wait = read.requests / pace.rate - (pace.clock() - started)
        why = _why_not_read(deadline, wait)
        if why is None:
            if wait > 0:
                pace.sleep(wait)
            try:
                with grid_step_deadline(min(settings.GRID_STEP_DEADLINE, max(deadline.remaining(), 0.001))):
                    contracts = grid.contracts(grid_id)
            except GridError as exc:
                read.requests += 1
                why = f"the grid did not answer for its contracts: {exc or type(exc).__name__}"
            else:
                read.requests += contracts.requests
                match = node_match(
                    node_id=grid_id,
                    taken=taken.get(pk, []),
                    records=records.get(pk, 0),
                    vms=_vms_holding_capacity(contracts.contracts),
                    free_slices=max((free or 0) - held[pk], 0),
                    fixable_before=fixable_before,
                )
                read.checked += 1
                read.findings.extend(match.findings)
                read.grace[pk] = sum(1 for c in contracts.contracts if c.holds_capacity and c.state == "GracePeriod")
        if why is not None:
            read.findings.append(
                Finding(kind=FindingKind.NOT_CHECKED, node_id=grid_id, words=f"node {grid_id} not checked: {why}")
            )
        if on_node is not None:
            on_node(done, len(rows))
    return read


def _live_holds_by_node(node_pks: list[int], *, now: datetime) -> dict[int, int]:
    """Node pk -> its live holds: a foreign VM is counted against a free slice no live hold keeps (the hold is
    its buyer's)."""
    held: dict[int, int] = defaultdict(int)
    for node_pk in Hold.objects.live(now).filter(node_id__in=node_pks).values_list("node_id", flat=True):
        held[node_pk] += 1
    return held


def _vms_holding_capacity(contracts) -> list[GridVm]:
    """The node's contracts that hold capacity, as the audit matches them against its catalog."""
    return [
        GridVm(
            contract_id=c.contract_id,
            workload_id=c.workload_id or f"{c.twin_id}-{c.contract_id}-unnamed",
            created_at=_moment(c.created_at),
        )
        for c in contracts
        if c.holds_capacity
    ]


def _why_not_read(deadline: Deadline, wait: float) -> str | None:
    if deadline.passed() or wait >= deadline.remaining():
        return (
            f"the audit's deadline (CATALOG_AUDIT_DEADLINE, {deadline.seconds:g} s) passes before its turn at "
            "CATALOG_AUDIT_RATE requests a second"
        )
    return None


def _catalog(pks: Iterable[int]) -> tuple[dict[int, list[TakenSlice]], dict[int, int]]:
    """Node pk -> its taken slices (with the contract their live record names), and -> its live records."""
    pks = list(pks)
    live = defaultdict(dict)
    records: dict[int, int] = defaultdict(int)
    for node_pk, index, workload_id, started in Deployment.objects.filter(
        node_id__in=pks, state=Deployment.State.DEPLOYED
    ).values_list("node_id", "slice_index", "grid_workload_id", "started_at"):
        live[node_pk][index] = (contract_of(workload_id), started)
        records[node_pk] += 1
    taken: dict[int, list[TakenSlice]] = defaultdict(list)
    for node_pk, index, state, updated in Slice.objects.filter(
        node_id__in=pks, state__in=Slice.OCCUPIED_STATES
    ).values_list("node_id", "index", "state", "updated_at"):
        contract, started = live[node_pk].get(index, (None, None))
        taken[node_pk].append(
            TakenSlice(index=index, state=state, taken_since=started or updated, contract_id=contract)
        )
    return taken, records


def _moment(unix: int | None) -> datetime | None:
    return datetime.fromtimestamp(unix, tz=UTC) if unix else None


# --- what the last audit found --------------------------------------------------------------


@dataclass(frozen=True)
class AuditLatest:
    """The newest finished slice audit (and the one running, if any), as the page and /metrics read them."""

    job: Job | None
    result: CatalogAuditResult | None
    active: Job | None


def audit_latest() -> AuditLatest:
    audits = Job.objects.filter(kind=Job.Kind.CATALOG_AUDIT).select_related("requested_by")
    finished = audits.filter(state=Job.State.SUCCEEDED).order_by("-finished_at", "-pk").first()
    active = audits.filter(state__in=Job.ACTIVE_STATES).order_by("-pk").first()
    result = finished.outcome if finished is not None else None
    return AuditLatest(job=finished, result=result if isinstance(result, CatalogAuditResult) else None, active=active)


def audit_first_seen() -> dict[str, str]:
    """Finding key -> when an audit first saw it, from the newest finished audit (its findings carry it on)."""
    latest = audit_latest().result
    if latest is None:
        return {}
    return {item.key: item.first_seen for item in latest.findings if item.first_seen}


__all__ = ["AuditLatest", "AuditRead", "Pace", "audit_first_seen", "audit_latest", "catalog_audit_read"]
