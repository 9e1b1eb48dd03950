"""Recording a reported outcome: the rules' move (dashboard.capacity.outcomes) applied under the node's lock.

The record of the id, the slice's live deployment and the slice row are read after the node is locked, and
every write of the move (the record, the slice, the figures, the audit event) is in the same transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from dashboard.access.services.audit_trail import actor_of, audit_record
from dashboard.capacity.lessons import zos_build_key
from dashboard.capacity.outcomes import (
    DEPLOY_IN_FLIGHT,
    REFUSAL_FIELDS,
    Holder,
    Move,
    Record,
    Refusal,
    Report,
    outcome_move,
    report_order,
)
from dashboard.deployments.services.holds import hold_turned_deployed, hold_words
from dashboard.deployments.services.outcomes.checks import OutcomeConflict, OutcomeError, outcome_checked, outcome_node
from dashboard.deployments.services.outcomes.counted import counted_move
from dashboard.deployments.services.outcomes.seen import capacity_last_read
from dashboard.deployments.services.outcomes.words import STATE_OF, holder_words, refusal_words, repeat_words, when
from dashboard.figures.services.node_writes import figures_follow, node_writes
from dashboard.grid.classify import Diagnosis, classify
from dashboard.lessons.selectors.odds import vm_odds_now
from dashboard.lessons.services.group_steps import group_step_after, group_steps_after, lock_conflicts_retried
from dashboard.lessons.services.lesson_evidence import report_teaches, vouched_by
from dashboard.lessons.services.memory_model import (
    accepted_seen,
    memory_group_turn,
    memory_model_accepted,
)
from dashboard.lessons.services.observations import deployment_refusal, observations_learn
from dashboard.models import Deployment, Hold, Job, Node, Slice
from dashboard.nodes.services.withholds import quarantine_consider
from dashboard.nodes.services.zos_cache import OUTCOME_REPORTED, zos_cache_refused

log = logging.getLogger(__name__)

_RECORD_OF = {
    Deployment.State.DEPLOYED: Record.DEPLOYED,
    Deployment.State.FAILED: Record.FAILED,
    Deployment.State.DELETED: Record.RELEASED,
}


@dataclass(frozen=True)
class OutcomeRecorded:
    deployment: Deployment
    created: bool  # False: the same report was recorded before (or this one moved that record on)
    changed: bool  # False: nothing at all was written (a repeat)
    move: Move = Move.RECORD
    words: str = ""  # what was done and why, for the caller


@dataclass(frozen=True)
class _Slice:
    """What the rules need to know about the reported slice, read under the node's lock."""

    row: Slice | None
    holder: Holder
    holder_words: str  # who holds it, e.g. "deployment 'A' (deployed 2026-05-01 12:00 UTC)"
    last_move: datetime | None  # the slice's last deploy or release a new report must follow


def deployment_outcome_record(
    *,
    node_id: int,
    slice_index: int,
    marketplace_id: str,
    outcome: str,
    error: str = "",
    at: datetime,
    workload_id: str = "",
    by=None,
    source: str = "api",
    now: datetime | None = None,
    token=None,
) -> OutcomeRecorded:
    """Record what the marketplace says happened to one slice's deployment (`token`: the API's, named)."""
    marketplace_id, at = outcome_checked(
        node_id=node_id,
        slice_index=slice_index,
        marketplace_id=marketplace_id,
        outcome=outcome,
        error=error,
        at=at,
        workload_id=workload_id,
        now=now or timezone.now(),
    )
    node = outcome_node(node_id=node_id, outcome=outcome)  # the chain's rule: checks.CHAIN_REFUSES_OUR_CONTRACT

    fields = {"slice_index": slice_index, "marketplace_id": marketplace_id, "report": Report(outcome), "error": error}
    fields |= {"at": at, "workload_id": workload_id, "by": by, "source": source, "token": token}

    def recorded_once() -> OutcomeRecorded:
        # A race on the same new marketplace id: the loser's insert hits the unique constraint and
        # its savepoint is rolled back whole; the second pass then finds the winner's record.
        try:
            return _record(node, **fields)
        except IntegrityError:
            return _record(node, **fields)

    # What the report teaches the node's build runs after its transaction (lessons.services.group_steps).
    with group_steps_after():
        if report_teaches(outcome=outcome, error=error, probe=False):
            memory_group_turn(zos_build_key(node.zos_version))  # before its node: reports of a build take turns
        recorded = lock_conflicts_retried(recorded_once, what=f"the report of {marketplace_id!r}")
        if recorded.move in (Move.TAKE, Move.RELEASE):
            _recheck_after_commit(node, by=by)
    return recorded


def _record(
    node: Node, *, slice_index, marketplace_id, report, error, at, workload_id, by, source, token=None
) -> OutcomeRecorded:
    # The node before the slice (figures.services.figures.nodes_lock); a move's figures are stored where it is made.
    with node_writes([node.pk], refresh=False):
        existing = _existing_read(node, slice_index=slice_index, marketplace_id=marketplace_id)
        if report == Report.DEPLOYED and existing is None and workload_id:
            counted_move(node, slice_index=slice_index, workload_id=workload_id, by=by, source=source)
        target = _slice_read(node, slice_index, existing, marketplace_id=marketplace_id)
        decided, last_move = _move_decided(
            node, target, existing, slice_index=slice_index, marketplace_id=marketplace_id, report=report, at=at
        )
        if decided == Move.REPEAT:
            return OutcomeRecorded(
                deployment=existing, created=False, changed=False, move=decided, words=repeat_words(existing, report)
            )
        if decided == Move.RELEASE:
            return _release(existing, node=node, at=at, by=by, source=source)
        return _create(
            node,
            target,
            marketplace_id=marketplace_id,
            move=decided,
            error=error,
            at=at,
            workload_id=workload_id,
            by=by,
            source=source,
            token=token,
        )


def _existing_read(node: Node, *, slice_index: int, marketplace_id: str) -> Deployment | None:
    """The record of this marketplace id (locked), refused when it names another node or slice, or is the
    dashboard's own deploy's row; the node is locked already."""
    existing = Deployment.objects.select_for_update().filter(marketplace_id=marketplace_id).first()
    if existing is None:
        return None
    if existing.node_id != node.pk or existing.slice_index != slice_index:
        raise OutcomeConflict(
            f"marketplace id {existing.marketplace_id!r} was reported for slice {existing.slice_index} of node "
            f"{existing.node.grid_id}, not slice {slice_index} of node {node.grid_id}",
            field="marketplace_id",
        )
    return existing


def _move_decided(
    node: Node, target: _Slice, existing: Deployment | None, *, slice_index, marketplace_id, report, at
) -> tuple[Move, datetime | None]:
    """The rules' move for this report (dashboard.capacity.outcomes) and the move it follows; a refusal raises
    OutcomeConflict (or OutcomeError for a slice the node does not have), naming why."""
    if target.row is None and existing is None:
        indices = list(node.slices.order_by("index").values_list("index", flat=True))
        listed = ", ".join(map(str, indices)) or "none"
        raise OutcomeError(
            f"node {node.grid_id} has no slice {slice_index} (its slices: {listed})", field="slice_index"
        )
    if existing is not None and existing.state not in _RECORD_OF:  # the dashboard's own deploy's row
        raise OutcomeConflict(
            f"marketplace id {marketplace_id!r} names deployment {existing.pk}, which is {existing.state}",
            field="marketplace_id",
        )
    record = _RECORD_OF[existing.state] if existing is not None else Record.NONE
    last_move = _record_last_move(existing) if existing is not None else target.last_move
    slice_created = target.row.created_at if target.row is not None else None
    order = report_order(at=at, last_move=last_move, slice_created=slice_created)
    decided = outcome_move(record=record, holder=target.holder, report=report, order=order)
    if isinstance(decided, Refusal):
        words = refusal_words(
            decided,
            node=node,
            slice_index=slice_index,
            marketplace_id=marketplace_id,
            report=report,
            at=at,
            existing=existing,
            holder_words=target.holder_words,
            slice_created=slice_created,
            last_move=last_move,
        )
        raise OutcomeConflict(words, field=REFUSAL_FIELDS[decided])
    return decided, last_move


def _slice_read(node: Node, slice_index: int, existing: Deployment | None, *, marketplace_id: str) -> _Slice:
    """The slice row (locked), who holds it and its last move; the node is locked already.

    A live hold of the slice for another marketplace id holds it as another id's deployment would:
    the rules refuse that id's deploy, naming the hold (deployments.services.holds)."""
    row = Slice.objects.select_for_update().filter(node=node, index=slice_index).first()
    live = Deployment.objects.filter(node=node, slice_index=slice_index, state=Deployment.State.DEPLOYED).first()
    if live is not None:
        if existing is not None and live.pk == existing.pk:
            return _Slice(row, Holder.THIS, holder_words(live), live.started_at)
        return _Slice(row, Holder.OTHER, holder_words(live), live.started_at)
    own = (
        Deployment.objects.filter(
            node=node,
            slice_index=slice_index,
            state=Deployment.State.DEPLOYING,
            started_at__gte=timezone.now() - DEPLOY_IN_FLIGHT,
        )
        .order_by("-started_at")
        .first()
    )
    if own is not None:
        return _Slice(row, Holder.OTHER, f"the dashboard's own deploy #{own.pk} (started {when(own.started_at)})", None)
    if row is not None and row.state == Slice.State.RENTED:
        # Someone's slice: a report cannot take it (and its release then free it); only an admin's
        # act gives a rented slice back to the catalog.
        renter = f"twin {row.rented_by_twin_id}" if row.rented_by_twin_id else "a renter the catalog does not name"
        return _Slice(row, Holder.OTHER, f"{renter}, who rents it (only an admin can give it back)", None)
    now = timezone.now()
    held = Hold.objects.live(now).filter(node=node, slice_index=slice_index).exclude(marketplace_id=marketplace_id)
    hold = held.select_related("node").first()
    if hold is not None and (existing is None or existing.state != Deployment.State.DEPLOYED):
        return _Slice(row, Holder.OTHER, hold_words(hold, now), None)
    if row is not None and row.state == Slice.State.DEPLOYED:
        return _Slice(row, Holder.UNNAMED, "nobody named: the catalog says deployed, with no deployment record", None)
    released = Deployment.objects.filter(node=node, slice_index=slice_index, state=Deployment.State.DELETED).aggregate(
        last=Max("finished_at")
    )["last"]
    return _Slice(row, Holder.NOBODY, "", released)


def _record_last_move(existing: Deployment) -> datetime | None:
    """The move a report of this id would follow: its deploy (deployed), its release (released)."""
    if existing.state == Deployment.State.DELETED:
        return existing.finished_at
    if existing.state == Deployment.State.DEPLOYED:
        return existing.started_at
    return None


def _create(
    node, target: _Slice, *, marketplace_id, move: Move, error, at, workload_id, by, source, token=None
) -> OutcomeRecorded:
    slice_ = target.row
    taken = move == Move.TAKE
    # What ZOS taking it tells of its build's line (lessons.services.memory_model), beside the last reading.
    told = (
        accepted_seen(node, slice_pk=slice_.pk, mru=slice_.mru, vouched_by=vouched_by(source=source, by=by))
        if taken
        else {}
    )
    seen = capacity_last_read(node) | told
    if taken and target.holder == Holder.NOBODY:
        Slice.objects.filter(pk=slice_.pk).update(state=Slice.State.DEPLOYED, updated_at=timezone.now())
    if taken:  # the buyer's hold, if any, has become this deployment
        hold_turned_deployed(
            node=node, slice_index=slice_.index, marketplace_id=marketplace_id, now=timezone.now(), by=by, source=source
        )
    deployment = Deployment.objects.create(
        node=node,
        **Deployment.of_slice(slice_),
        state=Deployment.State.DEPLOYED if taken else Deployment.State.FAILED,
        marketplace_id=marketplace_id,
        grid_workload_id=workload_id,
        capacity_seen=seen,
        requested_by=actor_of(by),
        finished_at=at,
        odds=vm_odds_now(node, mru=slice_.mru),
    )
    # started_at is auto_now_add; the record says when it happened, not when we heard of it.
    Deployment.objects.filter(pk=deployment.pk).update(started_at=at)
    deployment.started_at = at
    where = f"slice {slice_.index} of node {node.grid_id}"
    if taken:
        figures_follow([node.pk])
        # The build's other nodes after this transaction, locked in pk order (lessons.services.group_steps).
        group_step_after(
            ("memory accepted", deployment.pk),
            lambda: memory_model_accepted(node=Node.objects.get(pk=node.pk), deployment_pk=deployment.pk, seen=seen),
        )
        words = (
            f"{marketplace_id!r} recorded as the holder of {where}, which the catalog already said was deployed"
            if target.holder == Holder.UNNAMED
            else f"{where} is deployed by {marketplace_id!r}"
        )
    else:
        outcome_failed_record(deployment, raw=error, token=token)
        words = (
            f"failure of {marketplace_id!r} on {where} recorded as history: it is older than the slice's last move "
            f"({when(target.last_move)}); the slice's state is unchanged"
            if move == Move.HISTORY
            else f"failure of {marketplace_id!r} on {where} recorded; the slice stays free"
        )
    _audit(deployment, by=by, source=source, created=True, move=move)
    return OutcomeRecorded(deployment=deployment, created=True, changed=True, move=move, words=words)


def _release(existing: Deployment, *, node: Node, at, by, source) -> OutcomeRecorded:
    """deployed -> released: the VM is gone, the slice goes back to the catalog."""
    existing.state = Deployment.State.DELETED
    existing.finished_at = at
    existing.save(update_fields=["state", "finished_at"])
    if existing.slice_id:
        Slice.objects.filter(pk=existing.slice_id, state=Slice.State.DEPLOYED).update(
            state=Slice.State.FREE, updated_at=timezone.now()
        )
    figures_follow([node.pk])
    _audit(existing, by=by, source=source, created=False, move=Move.RELEASE)
    words = f"slice {existing.slice_index} of node {node.grid_id} is free again: {existing.marketplace_id!r} released"
    return OutcomeRecorded(deployment=existing, created=False, changed=True, move=Move.RELEASE, words=words)


def outcome_failed_record(deployment: Deployment, *, raw: str, token=None) -> Diagnosis:
    """A reported failure, stored as slice_deploy stores one: raw text, cause, numbers.

    Called inside the recording transaction with the node locked. The slice stays free (a
    failed deploy does not consume it). What the refusal teaches about the node is learnt in
    outcome_failed_learn, in the same transaction.
    """
    diagnosis = classify(raw)
    deployment.state = Deployment.State.FAILED
    deployment.raw_error = raw
    deployment.cause = diagnosis.cause if diagnosis.cause in Deployment.Cause.values else Deployment.Cause.UNKNOWN
    deployment.needed_bytes = diagnosis.needed_bytes
    deployment.usable_bytes = diagnosis.usable_bytes
    deployment.save(update_fields=["state", "raw_error", "cause", "needed_bytes", "usable_bytes"])
    outcome_failed_learn(deployment, diagnosis, token=token)
    # A failure nobody can explain counts towards a quarantine; a memory or disk refusal taught a lesson above.
    quarantine_consider(node=deployment.node)
    return diagnosis


def outcome_failed_learn(deployment: Deployment, diagnosis: Diagnosis, *, token=None) -> None:
    """What a reported refusal teaches about its node (the observations), same transaction.

    It counts exactly like one slice_deploy saw, with two differences: the marketplace sends no reading, so
    the node's last one stands for the accounted use at the refusal (an older reading with fewer VMs makes
    the hidden use look larger: the precheck errs on the safe side); and the lesson is dated by the refusal
    itself (the report's `at`). The node's figures (deployable, placeable now, phantom) follow at once.
    """
    node = deployment.node
    zos_cache_refused(deployment, source=OUTCOME_REPORTED)  # a node without its zos-cache refuses all: closed
    used = node.used
    if used is None or deployment.cause not in (Deployment.Cause.MEMORY, Deployment.Cause.DISK):
        return
    refusal = deployment_refusal(deployment, total=node.total, used=used)
    observations_learn(
        node=node,
        refusal=refusal,
        deployment=deployment,
        source="reported",
        at=deployment.started_at,
        by=deployment.requested_by,
        token=token,
    )


def _recheck_after_commit(node: Node, *, by) -> None:
    """Queue a precheck so placeable/phantom follow the VM that came or went (one per node at a time)."""
    from dashboard.jobs.services.jobs import JobError, job_request

    def queue():
        try:
            job_request(kind=Job.Kind.PRECHECK, node=node, by=actor_of(by), source=Job.Source.API)
        except JobError as exc:
            log.warning("node %s: no precheck queued after a reported outcome: %s", node.grid_id, exc)

    transaction.on_commit(queue)


def _audit(deployment: Deployment, *, by, source: str, created: bool, move: Move) -> None:
    where = f"slice {deployment.slice_index} on node {deployment.node.grid_id}"
    outcome = {value: key for key, value in STATE_OF.items()}[deployment.state]
    what = f"failed ({deployment.cause or 'unknown'})" if outcome == "failed" else outcome
    if move == Move.HISTORY:
        what += ", recorded as history (older than the slice's last move)"
    audit_record(
        actor=by,
        source=source,
        action=f"deployment.reported-{outcome}",
        node=deployment.node,
        message=f"the marketplace reported {where} {what}: deployment {deployment.marketplace_id!r}",
        detail={
            "deployment": deployment.pk,
            "marketplace_id": deployment.marketplace_id,
            "slice": deployment.slice_index,
            "state": deployment.state,
            "cause": deployment.cause,
            "needed_bytes": deployment.needed_bytes,
            "usable_bytes": deployment.usable_bytes,
            "first_report": created,
            "move": str(move),
            "at": deployment.finished_at.isoformat() if deployment.finished_at else None,
        },
    )
