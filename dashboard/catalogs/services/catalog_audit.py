"""The slice audit as a job (kind "catalog-audit"): read (catalogs.selectors.catalog_audit), and with a fix, make the catalog true.

A dry run changes nothing: it reads and stores what it found as its job's result. A fix reads again
and changes only what it finds now, and, when it follows a dry run (`dry_run_job`, the page's
button), only what that dry run listed too: nothing an admin has not seen is changed.

- An **orphan** (a taken slice whose VM's contract is gone) is freed as a release report would
  free it: the outcome rules (dashboard.capacity.outcomes) decide on its live record as on a
  `released` of its id now, and the record goes deployed -> released, the slice back to free.
- A **foreign** VM (a live contract the catalog does not account for) takes the lowest free
  slice: a deployment record naming its workload id marks it deployed, so "free" and
  "placeable now" count it; the next audit matches that slice to that contract.

Each fix is one transaction under the node's lock, checked again against what is stored then (a
slice freed meanwhile, a record that moved, a contract counted already: not fixed, with why), with
its audit event; so a second click, or a second run, fixes nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from dashboard.access.services.audit_trail import actor_of, audit_record
from dashboard.capacity import node_events
from dashboard.capacity.catalog_audit import Finding, FindingKind, contract_of
from dashboard.capacity.outcomes import Holder, Move, Record, Report, outcome_move, report_order
from dashboard.catalogs.selectors.catalog_audit import (
    AuditRead,
    Pace,
    audit_first_seen,
    audit_latest,
    catalog_audit_read,
)
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid import get_grid
from dashboard.grid.deadline import Deadline
from dashboard.jobs.results import AuditFindingItem, CatalogAuditResult
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import JobError, job_beating, job_progress, job_request, job_succeed
from dashboard.models import Deployment, Hold, Job, Node, NodeEvent, Slice
from dashboard.rows import rows_update

log = logging.getLogger(__name__)

# A workload id is stored in 64 characters (Deployment.grid_workload_id).
WORKLOAD_ID_MAX = 64
# Progress is written every this many nodes (and at the last): one write a node is too many at 10,000.
PROGRESS_EVERY = 25


@dataclass
class Fixed:
    fixed: list[str] = field(default_factory=list)  # finding keys
    not_fixed: list[tuple[str, str]] = field(default_factory=list)  # (key, why)


def catalog_audit_run(*, job: Job, stop_on=(), grid=None, pace: Pace | None = None) -> CatalogAuditResult:
    """The job's runner: read the fleet, fix when it is not a dry run, store the result."""
    asked = job.asked
    allowed = _dry_run_keys(asked.dry_run_job) if not job.dry_run and asked.dry_run_job is not None else None
    grid = grid if grid is not None else get_grid()
    first_seen = audit_first_seen()
    job_progress(job=job, step="reading every node's live contracts")

    def on_node(done: int, total: int) -> None:
        if done == total or done % PROGRESS_EVERY == 0:
            job_progress(job=job, step=f"{done} of {total} nodes checked", done=done, total=total)

    with job_beating(job=job):
        read = catalog_audit_read(
            grid=grid,
            deadline=Deadline.within(audit_deadline()),
            pace=pace or Pace(rate=settings.CATALOG_AUDIT_RATE),
            node_ids=asked.node_ids or None,
            on_node=on_node,
        )
    grace_contracts_store(read.grace, at=timezone.now())
    fixed = Fixed()
    if not job.dry_run:
        job_progress(job=job, step="fixing what the audit found")
        chosen = [f for f in read.findings if f.fixable and (allowed is None or f.key in allowed)]
        fixed = catalog_audit_fix(findings=chosen, by=job.requested_by, source=job.source, job=job)
        fixed.not_fixed += [
            (f.key, f"found after dry run #{asked.dry_run_job}: not fixed unseen; run a dry run to see it first")
            for f in read.findings
            if f.fixable and allowed is not None and f.key not in allowed
        ]
        fixed.not_fixed += [(f.key, _why_unfixable(f)) for f in read.findings if not f.fixable]
    result = audit_result(read, first_seen=first_seen, now=timezone.now(), dry_run=job.dry_run, fixed=fixed)
    result.fix_of = asked.dry_run_job
    if asked.node_ids:
        _carry_the_rest(result, scope=set(asked.node_ids))
    with transaction.atomic():
        job_succeed(job=job, result=result)
        transaction.on_commit(partial(_moved_meanwhile, job.started_at))
    return result


def grace_contracts_store(grace: dict[int, int], *, at) -> None:
    """Each node read: its contracts in their grace period that hold capacity, and when (one statement),
    for the warning that they still hold it (capacity.warnings "grace-contracts")."""
    if grace:
        rows_update(
            Node,
            (("id", "bigint"), ("grace_contracts", "integer"), ("contracts_read_at", "timestamptz")),
            [(pk, n, at) for pk, n in grace.items()],
        )


def _why_unfixable(finding: Finding) -> str:
    if finding.kind == FindingKind.ORPHAN:
        return "taken within CATALOG_AUDIT_ORPHAN_GRACE (the proxy may not list its contract yet); audit again later"
    if finding.kind == FindingKind.FOREIGN:
        return "no free slice that no live hold keeps is left to count it against"
    if finding.kind == FindingKind.NOT_CHECKED:
        return "not read: nothing to fix until the grid answers"
    return "which slice is wrong is not known: report the release, or the workload id, of the one that is"


# One sentence's words for each kind's count (the summary once read "18 count").
_KIND_WORDS = {
    FindingKind.ORPHAN: ("orphan slice (its VM gone)", "orphan slices (their VMs gone)"),
    FindingKind.FOREIGN: ("foreign VM (unknown to the catalog)", "foreign VMs (unknown to the catalog)"),
    FindingKind.COUNT: ("count that disagrees", "counts that disagree"),
    FindingKind.NOT_CHECKED: ("node not checked", "nodes not checked"),
}


def _carry_the_rest(result: CatalogAuditResult, *, scope: set[int]) -> None:
    """An audit of some nodes keeps the newest audit's findings for the others, so the page and /metrics
    still tell the whole fleet (those findings as that audit saw them, with their first sighting)."""
    previous = audit_latest().result
    carried = [f for f in (previous.findings if previous is not None else []) if f.node_id not in scope]
    result.findings = [*result.findings, *carried]
    result.counts = {kind: sum(1 for f in result.findings if f.kind == kind) for kind in result.counts}
    shown = ", ".join(str(n) for n in sorted(scope)[:5]) + (" …" if len(scope) > 5 else "")
    result.words += f" (node{'s' if len(scope) > 1 else ''} {shown}; the other nodes as the audit before found them)"


def audit_deadline() -> float:
    """CATALOG_AUDIT_DEADLINE, but ending a minute before the task's soft time limit: an audit cut off
    there would keep nothing it read, one that ends lists the nodes it did not reach as not checked."""
    return max(min(settings.CATALOG_AUDIT_DEADLINE, settings.CELERY_TASK_SOFT_TIME_LIMIT - 60), 1.0)


def audit_result(
    read: AuditRead, *, first_seen: dict[str, str], now: datetime, dry_run: bool, fixed: Fixed
) -> CatalogAuditResult:
    counts = read.counts()
    found = (
        ", ".join(f"{n} {_KIND_WORDS[FindingKind(kind)][n != 1]}" for kind, n in counts.items() if n)
        or "nothing out of place"
    )
    words = f"checked {read.checked} of {read.nodes} node(s) against the grid ({read.requests} request(s)): {found}"
    if not dry_run:
        words += f"; fixed {len(fixed.fixed)}" + (f", {len(fixed.not_fixed)} not fixed" if fixed.not_fixed else "")
    return CatalogAuditResult(
        dry_run=dry_run,
        nodes=read.nodes,
        checked=read.checked,
        requests=read.requests,
        counts=counts,
        findings=[
            AuditFindingItem(
                key=f.key,
                kind=f.kind.value,
                node_id=f.node_id,
                words=f.words,
                slice_index=f.slice_index,
                contract_id=f.contract_id,
                workload_id=f.workload_id,
                since=f.since.isoformat() if f.since else None,
                first_seen=first_seen.get(f.key, now.isoformat()),
                fixable=f.fixable,
            )
            for f in read.findings
        ],
        fixed=fixed.fixed,
        not_fixed=[[key, why] for key, why in fixed.not_fixed],
        words=words,
    )


def _dry_run_keys(job_id: int) -> set[str]:
    dry = Job.objects.filter(pk=job_id, kind=Job.Kind.CATALOG_AUDIT, dry_run=True, state=Job.State.SUCCEEDED).first()
    result = dry.outcome if dry is not None else None
    if not isinstance(result, CatalogAuditResult):
        raise JobError(f"job #{job_id} is not a finished dry run of the slice audit: there is nothing seen to fix")
    return {item.key for item in result.findings}


# --- the fixes ----------------------------------------------------------------------------------


def catalog_audit_fix(
    *, findings: Sequence[Finding], by=None, source: str = "command", job: Job | None = None
) -> Fixed:
    """Fix each orphan and foreign finding in its own transaction; see the module doc."""
    done = Fixed()
    nodes = {n.grid_id: n for n in Node.objects.filter(grid_id__in={f.node_id for f in findings})}
    # Foreign VMs first: each takes a slice that was free before the audit, not one an orphan just left
    # (which the marketplace may still name in its own books).
    for finding in sorted(findings, key=lambda f: f.kind == FindingKind.ORPHAN):
        node = nodes.get(finding.node_id)
        if node is None:
            done.not_fixed.append((finding.key, f"node {finding.node_id} is no longer registered"))
            continue
        fix = {FindingKind.ORPHAN: _orphan_free, FindingKind.FOREIGN: _foreign_count}.get(finding.kind)
        if fix is None:
            done.not_fixed.append((finding.key, "only orphans and foreign VMs are fixed"))
            continue
        with node_writes([node.pk]) as writes:
            why = fix(node, finding, by=by, source=source, job=job)
            if why:
                writes.refresh_only(())  # not fixed: nothing written
        (done.not_fixed.append((finding.key, why)) if why else done.fixed.append(finding.key))
    return done


def _orphan_free(node: Node, finding: Finding, *, by, source: str, job: Job | None) -> str:
    slice_ = Slice.objects.select_for_update().filter(node=node, index=finding.slice_index).first()
    if slice_ is None or not slice_.is_occupied:
        return f"slice {finding.slice_index} is no longer taken"
    record = Deployment.objects.filter(node=node, slice_index=slice_.index, state=Deployment.State.DEPLOYED).first()
    if record is None or contract_of(record.grid_workload_id) != finding.contract_id:
        return f"slice {slice_.index}'s live record changed since it was read; run the audit again"
    now = timezone.now()
    grace = timedelta(seconds=settings.CATALOG_AUDIT_ORPHAN_GRACE)
    if record.started_at and record.started_at > now - grace:
        return f"slice {slice_.index} was taken {record.started_at:%H:%M:%S} UTC, within CATALOG_AUDIT_ORPHAN_GRACE"
    order = report_order(at=now, last_move=record.started_at, slice_created=slice_.created_at)
    move = outcome_move(record=Record.DEPLOYED, holder=Holder.THIS, report=Report.RELEASED, order=order)
    if move != Move.RELEASE:
        return f"the outcome rules refuse its release ({move})"
    record.state, record.finished_at = Deployment.State.DELETED, now
    record.save(update_fields=["state", "finished_at"])
    Slice.objects.filter(pk=slice_.pk).update(state=Slice.State.FREE, rented_by_twin_id=None, updated_at=now)
    audit_record(
        actor=by,
        source=source,
        action="audit.orphan-freed",
        node=node,
        job=job,
        message=f"slice {slice_.index} of node {node.grid_id} freed: contract {finding.contract_id} of its record "
        f"{record.marketplace_id or record.grid_workload_id!r} is not live on the grid",
        detail={"finding": finding.key, "slice": slice_.index, "deployment": record.pk, "was": slice_.state},
    )
    return ""


def _foreign_count(node: Node, finding: Finding, *, by, source: str, job: Job | None) -> str:
    live = Deployment.objects.filter(node=node, state=Deployment.State.DEPLOYED).values_list(
        "grid_workload_id", flat=True
    )
    if any(contract_of(w) == finding.contract_id for w in live):
        return f"contract {finding.contract_id} is counted already"
    now = timezone.now()
    kept = Hold.objects.live(now).filter(node=node).values_list("slice_index", flat=True)
    free = Slice.objects.select_for_update().filter(node=node, state=Slice.State.FREE).exclude(index__in=list(kept))
    slice_ = free.order_by("index").first()
    if slice_ is None:
        return f"node {node.grid_id} has no free slice left that no live hold keeps to count it against"
    workload_id = (finding.workload_id or f"0-{finding.contract_id}-unnamed")[:WORKLOAD_ID_MAX]
    try:
        with transaction.atomic():
            record = Deployment.objects.create(
                node=node,
                **Deployment.of_slice(slice_),
                state=Deployment.State.DEPLOYED,
                grid_workload_id=workload_id,
                requested_by=actor_of(by),
                finished_at=now,
            )
    except IntegrityError:  # a live record on that slice number after all (one live deployment a slice)
        return f"slice {slice_.index} already has a live record; run the audit again"
    Slice.objects.filter(pk=slice_.pk).update(state=Slice.State.DEPLOYED, updated_at=now)
    audit_record(
        actor=by,
        source=source,
        action="audit.foreign-counted",
        node=node,
        job=job,
        message=f"slice {slice_.index} of node {node.grid_id} counted as occupied by contract {finding.contract_id} "
        f"({workload_id}), a VM the catalog did not know",
        detail={
            "finding": finding.key,
            "slice": slice_.index,
            "deployment": record.pk,
            "contract": finding.contract_id,
        },
    )
    return ""


# --- doors: the command line, the beat -------------------------------------------------------------


def catalog_audit_here(*, fix: bool, grid=None, pace: Pace | None = None) -> Job:
    """Run a slice audit in this process (the command line), as a job row like any other: on the
    Jobs and audit pages, one at a time with the worker's. JobError when one is running already."""
    now = timezone.now()
    try:
        with transaction.atomic():
            job = Job.objects.create(
                kind=Job.Kind.CATALOG_AUDIT,
                source=Job.Source.COMMAND,
                dry_run=not fix,
                state=Job.State.RUNNING,
                attempts=1,
                started_at=now,
                heartbeat_at=now,
                step="starting",
            )
            audit_record(
                source=Job.Source.COMMAND,
                action="job.requested",
                job=job,
                message=f"{job.described} run from the command line",
            )
    except IntegrityError:
        active = Job.objects.filter(kind=Job.Kind.CATALOG_AUDIT, state__in=Job.ACTIVE_STATES).first()
        raise JobError(
            f"a slice audit is already {active.state if active else 'active'}: job #{active.pk if active else '?'}"
        ) from None
    job_execute(job=job, grid=grid, pace=pace)
    return Job.objects.get(pk=job.pk)


def audit_on_used_moved(events) -> Job | None:
    """node_events' "used-moved" subscriber: audit those nodes now (a dry run, or a fix with
    CATALOG_AUDIT_AUTOFIX), so an orphan or a foreign VM is found within a watch interval.

    Called after the readings committed. While an audit is active, its nodes widen a queued one; a
    running one looks, when it ends, for such events since it started (`_moved_meanwhile`).
    """
    if not settings.CATALOG_AUDIT_ON_USED_MOVED:
        return None
    grid_ids = sorted(set(Node.objects.filter(pk__in={e.node_id for e in events}).values_list("grid_id", flat=True)))
    return _audit_nodes(grid_ids) if grid_ids else None


def _audit_nodes(grid_ids: list[int]) -> Job | None:
    try:
        requested = job_request(
            kind=Job.Kind.CATALOG_AUDIT,
            source=Job.Source.BEAT,
            dry_run=not settings.CATALOG_AUDIT_AUTOFIX,
            parameters={"node_ids": grid_ids},
        )
    except JobError as exc:
        log.warning("no slice audit of nodes %s after their used capacity moved: %s", grid_ids, exc)
        return None
    active = requested.job
    scoped = (active.parameters or {}).get("node_ids")
    if not requested.created and active.state == Job.State.QUEUED and scoped:
        # Conditional: only while it is still queued (a worker that took it meanwhile reads what it had).
        widened = sorted(set(scoped) | set(grid_ids))
        Job.objects.filter(pk=active.pk, state=Job.State.QUEUED).update(
            parameters={**active.parameters, "node_ids": widened}
        )
    return active


def _moved_meanwhile(started_at: datetime | None) -> None:
    """After an audit ends: nodes whose used capacity moved while it ran are audited again (their
    events' request found this one running, and it may have read them before they moved)."""
    if started_at is None or not settings.CATALOG_AUDIT_ON_USED_MOVED:
        return
    moved = NodeEvent.objects.filter(kind=node_events.USED_MOVED, at__gte=started_at).values_list(
        "node__grid_id", flat=True
    )
    grid_ids = sorted(set(moved))
    if grid_ids:
        _audit_nodes(grid_ids)


def catalog_audit_scheduled() -> Job | None:
    """The beat's nightly audit (CATALOG_AUDIT_EVERY): a dry run, or a fix with CATALOG_AUDIT_AUTOFIX."""
    try:
        return job_request(
            kind=Job.Kind.CATALOG_AUDIT, source=Job.Source.BEAT, dry_run=not settings.CATALOG_AUDIT_AUTOFIX
        ).job
    except JobError as exc:
        log.warning("the scheduled slice audit was not queued: %s", exc)
        return None


__all__ = [
    "audit_on_used_moved",
    "catalog_audit_fix",
    "catalog_audit_here",
    "catalog_audit_run",
    "catalog_audit_scheduled",
]
