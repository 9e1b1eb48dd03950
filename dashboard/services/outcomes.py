"""Deployment outcomes the marketplace reports: deployed, failed, released.

In production the marketplace deploys VMs, not this dashboard (the Grid Proxy is read-only), so
its reports are how a failure reaches the failed-deployments page and how a slice's state
follows what really happened. `deployment_outcome_record` is the one door for that write:

- Idempotent on the marketplace's own deployment (contract) id: a unique constraint, and the
  look-up and the insert in one transaction under the node's lock. A report sent twice is one
  record; `deployed` then `released` for the same id is one record moving on.
- A failure is stored exactly as slice_deploy stores one (services.deploy._finish_failed):
  state "failed", ZOS's raw text, the classified cause and numbers; the capacity the node last
  reported is kept beside it (with when it was read), since the marketplace does not send one.
  The slice stays free, as after a failed slice_deploy. `outcome_failed_learn` is the one place
  where what the refusal teaches about the node goes (observations).
- `deployed` marks the slice deployed, `released` frees it; the node's figures are rewritten in
  the same transaction. Both change the node's real used capacity, so a precheck job is queued
  after commit to read it again (the placeable/phantom figures would otherwise be stale).
- Bad input raises OutcomeError naming the field, and nothing is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from dashboard.grid.classify import Diagnosis, classify
from dashboard.models import AuditEvent, Deployment, Job, Node, Slice
from dashboard.services.figures import figures_refresh, nodes_lock
from dashboard.services.observations import deployment_refusal, observations_learn

log = logging.getLogger(__name__)

OUTCOMES = ("deployed", "failed", "released")
# The state each outcome leaves the record in.
_STATE_OF = {
    "deployed": Deployment.State.DEPLOYED,
    "failed": Deployment.State.FAILED,
    "released": Deployment.State.DELETED,
}
# Which recorded state a later report of the same marketplace id may move on from.
_MOVES_FROM = {
    "released": (Deployment.State.DEPLOYED,),
}
# Clocks differ; a report from a little in the future is the marketplace's clock, not a lie.
CLOCK_SKEW = timedelta(minutes=5)
MAX_ERROR_TEXT = 64 * 1024
MARKETPLACE_ID_MAX = Deployment._meta.get_field("marketplace_id").max_length


class OutcomeError(ValueError):
    """A report that cannot be recorded; `field` names the input at fault. Nothing was written."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


class OutcomeConflict(OutcomeError):
    """The report contradicts what is recorded (another node or slice, or an impossible move)."""


@dataclass(frozen=True)
class OutcomeRecorded:
    deployment: Deployment
    created: bool  # False: the same report was recorded before (or this one moved that record on)
    changed: bool  # False: nothing at all was written (a repeat)


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
) -> OutcomeRecorded:
    """Record what the marketplace says happened to one slice's deployment; see the module doc."""
    marketplace_id = _checked(
        node_id=node_id,
        slice_index=slice_index,
        marketplace_id=marketplace_id,
        outcome=outcome,
        error=error,
        at=at,
        workload_id=workload_id,
    )
    node = Node.objects.filter(grid_id=node_id).first()
    if node is None:
        raise OutcomeError(f"node {node_id} is not registered with the dashboard", field="node_id")
    # A race on the same new marketplace id: the loser's insert hits the unique constraint and
    # its transaction is rolled back whole; the second pass then finds the winner's record.
    for attempt in range(2):
        try:
            recorded = _record(
                node,
                slice_index=slice_index,
                marketplace_id=marketplace_id,
                outcome=outcome,
                error=error,
                at=at,
                workload_id=workload_id,
                by=by,
                source=source,
            )
            break
        except IntegrityError:
            if attempt:
                raise
    if recorded.changed and outcome in ("deployed", "released"):
        _recheck_after_commit(node, by=by)
    return recorded


def _record(node: Node, *, slice_index, marketplace_id, outcome, error, at, workload_id, by, source) -> OutcomeRecorded:
    with transaction.atomic():
        nodes_lock([node.pk])  # before the slice: see nodes_lock
        existing = Deployment.objects.select_for_update().filter(marketplace_id=marketplace_id).first()
        if existing is not None:
            return _again(existing, node=node, slice_index=slice_index, outcome=outcome, at=at, by=by, source=source)
        slice_ = Slice.objects.select_for_update().filter(node=node, index=slice_index).first()
        if slice_ is None:
            indices = list(node.slices.order_by("index").values_list("index", flat=True))
            listed = ", ".join(map(str, indices)) or "none"
            raise OutcomeError(
                f"node {node.grid_id} has no slice {slice_index} (its slices: {listed})", field="slice_index"
            )
        if outcome == "deployed":
            _slice_take(slice_, marketplace_id=marketplace_id)
        deployment = Deployment.objects.create(
            node=node,
            slice=slice_,
            slice_index=slice_.index,
            cru=slice_.cru,
            mru=slice_.mru,
            sru=slice_.sru,
            state=_STATE_OF[outcome],
            marketplace_id=marketplace_id,
            grid_workload_id=workload_id,
            capacity_seen=_capacity_last_read(node),
            requested_by=by if getattr(by, "pk", None) else None,
            finished_at=at,
        )
        # started_at is auto_now_add; the record says when it happened, not when we heard of it.
        Deployment.objects.filter(pk=deployment.pk).update(started_at=at)
        deployment.started_at = at
        if outcome == "failed":
            outcome_failed_record(deployment, raw=error)
        elif outcome == "released":
            _slice_release(deployment)
        if outcome != "failed":
            figures_refresh([node.pk])
        _audit(deployment, by=by, source=source, created=True)
    return OutcomeRecorded(deployment=deployment, created=True, changed=True)


def outcome_failed_record(deployment: Deployment, *, raw: str) -> Diagnosis:
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
    outcome_failed_learn(deployment, diagnosis)
    return diagnosis


def outcome_failed_learn(deployment: Deployment, diagnosis: Diagnosis) -> None:
    """What a reported refusal teaches about its node (the observations), same transaction.

    It counts exactly like one slice_deploy saw, with one difference: the marketplace sends no
    reading, so the node's last one stands for the accounted use at the refusal (an older reading
    with fewer VMs makes the hidden use look larger: the precheck then errs on the safe side).
    The node's figures (deployable, placeable now, phantom) are recomputed at once.
    """
    node = deployment.node
    used = node.used
    if used is None or deployment.cause not in (Deployment.Cause.MEMORY, Deployment.Cause.DISK):
        return
    refusal = deployment_refusal(deployment, total=node.total, used=used)
    observations_learn(node=node, refusal=refusal, deployment=deployment, source="reported")


def _again(existing: Deployment, *, node: Node, slice_index: int, outcome: str, at, by, source) -> OutcomeRecorded:
    if existing.node_id != node.pk or existing.slice_index != slice_index:
        raise OutcomeConflict(
            f"marketplace id {existing.marketplace_id!r} was reported for slice {existing.slice_index} of node "
            f"{existing.node.grid_id}, not slice {slice_index} of node {node.grid_id}",
            field="marketplace_id",
        )
    if existing.state == _STATE_OF[outcome]:
        return OutcomeRecorded(deployment=existing, created=False, changed=False)
    if existing.state not in _MOVES_FROM.get(outcome, ()):
        raise OutcomeConflict(
            f"marketplace id {existing.marketplace_id!r} is recorded as {existing.state}; it cannot become "
            f"{outcome} (a deployment goes deployed -> released, a failure stays failed)",
            field="outcome",
        )
    # deployed -> released: the VM is gone, the slice goes back to the catalog.
    existing.state = Deployment.State.DELETED
    existing.finished_at = at
    existing.save(update_fields=["state", "finished_at"])
    _slice_release(existing)
    figures_refresh([node.pk])
    _audit(existing, by=by, source=source, created=False)
    return OutcomeRecorded(deployment=existing, created=False, changed=True)


def _slice_take(slice_: Slice, *, marketplace_id: str) -> None:
    if slice_.state == Slice.State.DEPLOYED:
        holder = (
            Deployment.objects.filter(slice=slice_, state=Deployment.State.DEPLOYED).order_by("-started_at").first()
        )
        by_whom = f" (deployment {holder.marketplace_id or holder.pk})" if holder else ""
        raise OutcomeConflict(
            f"slice {slice_.index} of node {slice_.node.grid_id} is deployed already{by_whom}; report that one "
            f"released before deploying {marketplace_id!r} on it",
            field="slice_index",
        )
    Slice.objects.filter(pk=slice_.pk).update(state=Slice.State.DEPLOYED, updated_at=timezone.now())


def _slice_release(deployment: Deployment) -> None:
    if deployment.slice_id:
        Slice.objects.filter(pk=deployment.slice_id, state=Slice.State.DEPLOYED).update(
            state=Slice.State.FREE, updated_at=timezone.now()
        )


def _capacity_last_read(node: Node) -> dict:
    """The node's last grid reading, in the shape slice_deploy stores, marked as not read live."""
    seen = {
        "status": node.status,
        "source": "last reading",
        "seen_at": node.seen_at.isoformat() if node.seen_at else None,
    }
    used = node.used
    if used is not None:
        seen["total"] = node.total.as_dict()
        seen["used"] = used.as_dict()
    return seen


def _recheck_after_commit(node: Node, *, by) -> None:
    """Queue a precheck so placeable/phantom follow the VM that came or went (one per node at a time)."""
    from dashboard.services.jobs import JobError, job_request

    def queue():
        try:
            job_request(
                kind=Job.Kind.PRECHECK, node=node, by=by if getattr(by, "pk", None) else None, source=Job.Source.API
            )
        except JobError as exc:
            log.warning("node %s: no precheck queued after a reported outcome: %s", node.grid_id, exc)

    transaction.on_commit(queue)


def _checked(*, node_id, slice_index, marketplace_id, outcome, error, at, workload_id) -> str:
    if isinstance(node_id, bool) or not isinstance(node_id, int) or node_id < 0:
        raise OutcomeError(f"node_id must be a whole number of zero or more, not {node_id!r}", field="node_id")
    if isinstance(slice_index, bool) or not isinstance(slice_index, int) or slice_index < 0:
        raise OutcomeError(
            f"slice_index must be a whole number of zero or more, not {slice_index!r}", field="slice_index"
        )
    marketplace_id = (marketplace_id or "").strip() if isinstance(marketplace_id, str) else ""
    if not marketplace_id or len(marketplace_id) > MARKETPLACE_ID_MAX:
        raise OutcomeError(
            f"marketplace_id must be the marketplace's deployment or contract id, 1 to {MARKETPLACE_ID_MAX} characters",
            field="marketplace_id",
        )
    if outcome not in OUTCOMES:
        raise OutcomeError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}", field="outcome")
    if not isinstance(error, str) or len(error) > MAX_ERROR_TEXT:
        raise OutcomeError(f"error must be text of at most {MAX_ERROR_TEXT} characters", field="error")
    if "\x00" in error:
        raise OutcomeError("error must not contain NUL characters", field="error")
    if len(workload_id or "") > Deployment._meta.get_field("grid_workload_id").max_length:
        raise OutcomeError("workload_id is longer than 64 characters", field="workload_id")
    if not isinstance(at, datetime) or timezone.is_naive(at):
        raise OutcomeError("at must be a date and time with its UTC offset, e.g. 2026-05-01T12:00:00Z", field="at")
    if at > timezone.now() + CLOCK_SKEW:
        raise OutcomeError(f"at ({at.isoformat()}) is in the future", field="at")
    return marketplace_id


def _audit(deployment: Deployment, *, by, source: str, created: bool) -> None:
    where = f"slice {deployment.slice_index} on node {deployment.node.grid_id}"
    outcome = {value: key for key, value in _STATE_OF.items()}[deployment.state]
    what = f"failed ({deployment.cause or 'unknown'})" if outcome == "failed" else outcome
    AuditEvent.objects.create(
        actor=by if getattr(by, "pk", None) else None,
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
        },
    )
