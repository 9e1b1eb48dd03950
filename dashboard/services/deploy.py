"""Deploying slices and checking live capacity: slice_deploy, slices_deploy_all_free, precheck_run.

Every attempt to deploy leaves a Deployment row, whatever happens:

- The row is written (state "deploying") before the grid is asked to deploy and finished
  after, so a process that dies in between leaves an honest "deploying" record, never a
  lost attempt.
- A refusal by the precheck is state "refused". `raw_error` stays empty: it only ever holds
  what the grid itself said. The precheck's own verdict (with its words and numbers) is kept
  in `capacity_seen["verdict"]`, and `deployment_words()` gives the sentence support staff read.
- A grid failure is state "failed" with ZOS's raw message in `raw_error` and the classified
  cause and numbers beside it.
- A failed deploy does not consume the slice: it stays "free" (the catalog slot is still
  there, and the precheck will call it phantom if it cannot be placed). Marking it "failed"
  would hide a slice the catalog still offers, which is exactly what the dashboard must
  never do; the failure itself lives on the Deployment row.

Grid errors while reading capacity (before any row is written) propagate as the typed
GridError, and nothing is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Callable

from django.db import transaction
from django.utils import timezone

from dashboard import capacity
from dashboard.capacity import Resources, SliceSize
from dashboard.grid import get_grid
from dashboard.grid.classify import classify
from dashboard.grid.types import (
    DeploymentFailed,
    DeployNotSupported,
    Grid,
    GridError,
    GridUnavailable,
    MalformedPayload,
    NodeCapacity,
    NodeNotFound,
    NodeOffline,
)
from dashboard.models import AuditEvent, CapacitySample, Deployment, Job, Node, Slice
from dashboard.services.catalog import policy_for_node
from dashboard.services.figures import figures_refresh, nodes_lock
from dashboard.services.observations import deployment_refusal, observations_learn

log = logging.getLogger(__name__)

OFFLINE_STATUSES = ("down", "standby")
# A "deploying" row younger than this is taken to be a deploy still in flight; an older one is
# a process that died mid-deploy, and the slice may be tried again (the old row stays as it is).
IN_FLIGHT = timedelta(minutes=15)


class DeployError(Exception):
    """A deploy that cannot even be attempted; the message says why. Nothing was written."""


class SliceNotFound(DeployError):
    pass


class SliceNotFree(DeployError):
    pass


class SliceBusy(DeployError):
    """Another deploy of this slice is in flight."""


class SliceChanged(DeployError):
    """The slice was re-carved (removed or resized) while the grid was being read."""


# --- precheck ----------------------------------------------------------------------------


@dataclass(frozen=True)
class OfflineVerdict(capacity.Verdict):
    """A slice cannot be placed on a node that is down or on standby, whatever the numbers say."""

    status: str = "down"

    @property
    def words(self) -> str:
        return f"does not fit: the node is {self.status}; nothing can be placed until it is up again"


@dataclass(frozen=True)
class PrecheckReport:
    node_id: int
    capacity: NodeCapacity
    precheck: capacity.Precheck
    policy: capacity.Policy
    checked_at: datetime

    @property
    def offline(self) -> bool:
        return self.capacity.status in OFFLINE_STATUSES

    @property
    def cause(self) -> str:
        return "node-offline" if self.offline else ""

    @property
    def words(self) -> str:
        p = self.precheck
        if not p.free_slices:
            return f"node {self.node_id} ({self.capacity.status}) has no free slice to place"
        if self.offline:
            return (
                f"node {self.node_id} is {self.capacity.status} on the grid: none of its "
                f"{p.free_slices} free slices can be placed until it is up again"
            )
        if not p.phantom_slices:
            return f"node {self.node_id}: all {p.free_slices} free slices can be placed now"
        phantom = ", ".join(str(i) for i in p.phantom_slices)
        return (
            f"node {self.node_id}: {p.placeable_now} of {p.free_slices} free slices can be placed now; "
            f"phantom: slice {phantom}"
        )

    def as_dict(self) -> dict:
        return {
            "node_id": self.node_id,
            "status": self.capacity.status,
            "cause": self.cause,
            "policy": {"name": self.policy.name, "version": self.policy.version},
            "checked_at": self.checked_at.isoformat(),
            "total": self.capacity.total.as_dict(),
            "used": self.capacity.used.as_dict(),
            **self.precheck.as_dict(),
            "words": self.words,
        }


def precheck_run(*, node: Node, grid: Grid | None = None) -> PrecheckReport:
    """Read the node's live capacity and say which of its free slices can really be placed now.

    Stores the live used capacity and the verdict's figures on the node in one UPDATE; the
    catalog itself is never touched. A grid error propagates and nothing is written.
    """
    grid = grid or get_grid()
    live = grid.node(node.node_id)
    policy = policy_for_node(node)
    result = precheck_store(node=node, live=live, policy=policy, seen=True)
    return PrecheckReport(
        node_id=node.node_id, capacity=live, precheck=result, policy=policy, checked_at=node.prechecked_at
    )


def precheck_store(*, node: Node, live: NodeCapacity, policy: capacity.Policy, seen: bool) -> capacity.Precheck:
    """Precheck the node's free slices on the reading `live` and store the figures on its row.

    `seen`: `live` was just read from the grid (its status and used capacity are stored too);
    otherwise it is the last reading with what happened since (a deploy, a lesson learnt).
    """
    free = [(s.index, s.size) for s in node.slices.filter(state=Slice.State.FREE).order_by("index")]
    result = _precheck(free, live, policy, node_live_facts(node, policy, used_sru=live.used.sru))
    now = timezone.now()
    figures = {
        "used_cru": live.used.cru,
        "used_mru": live.used.mru,
        "used_sru": live.used.sru,
        "used_hru": live.used.hru,
        "placeable_now": result.placeable_now,
        "phantom_slices": len(result.phantom_slices),
        "phantom_reasons": result.phantom_by_reason,
        "prechecked_at": now,
        "updated_at": now,
    }
    if seen:
        figures.update(status=live.status, seen_at=now)
    Node.objects.filter(pk=node.pk).update(**figures)
    for name, value in figures.items():
        setattr(node, name, value)
    return result


def node_live_facts(node: Node, policy: capacity.Policy, *, used_sru: int | None) -> capacity.LiveNode:
    """Its pools, the VMs it holds (by the catalog, in slice order) and what refusals taught."""
    occupied = [s.size.resources for s in node.slices.filter(state__in=Slice.OCCUPIED_STATES).order_by("index")]
    observed = capacity.observed_now(
        hidden_mru_per_vm=node.hidden_mru_per_vm,
        pool_room_below=node.pool_room_below,
        bound_used_sru=node.pool_room_below_used_sru,
        used_sru=used_sru,
    )
    return capacity.live_node(policy=policy, pools=node.pools, occupied=occupied, observed=observed)


def _precheck(
    free: list[tuple[int, SliceSize]], live: NodeCapacity, policy: capacity.Policy, facts: capacity.LiveNode
) -> capacity.Precheck:
    if live.status not in OFFLINE_STATUSES:
        return capacity.precheck(free, live.total, live.used, policy, live=facts)
    verdicts = tuple(
        capacity.SliceVerdict(index=index, verdict=_offline_verdict(size, live, policy))
        for index, size in sorted(free, key=lambda item: item[0])
    )
    return capacity.Precheck(
        free_slices=len(verdicts),
        placeable_now=0,
        phantom_slices=tuple(v.index for v in verdicts),
        verdicts=verdicts,
    )


def _offline_verdict(size: SliceSize, live: NodeCapacity, policy: capacity.Policy) -> OfflineVerdict:
    numbers = capacity.fits(size, live.total, live.used, policy)
    return OfflineVerdict(fits=False, needed=numbers.needed, available=numbers.available, status=live.status)


# --- deploy ------------------------------------------------------------------------------


def slice_deploy(
    *,
    node: Node,
    slice_index: int,
    precheck: bool = True,
    by=None,
    grid: Grid | None = None,
    source: str = "web",
) -> Deployment:
    """Deploy one free slice's VM and record the attempt, whatever its outcome.

    Raises SliceNotFound / SliceNotFree / SliceBusy (nothing written) when the slice cannot
    be attempted, DeployNotSupported when the grid backend is read-only, and the typed
    GridError when the node's capacity cannot be read (nothing written either).
    Refusals and grid failures of the deploy itself are returned as recorded Deployments.
    """
    grid = grid or get_grid()
    slice_ = _free_slice(node, slice_index)
    # Read capacity first: the record keeps what the grid said at that moment, with or without precheck.
    live = grid.node(node.node_id)
    if not grid.can_deploy:
        raise DeployNotSupported(
            f"the {grid.name} grid backend is read-only and cannot deploy; use the simulator (GRID_BACKEND=simulator)"
        )
    policy = policy_for_node(node)
    verdict = _deploy_verdict(slice_, live, policy, node_live_facts(node, policy, used_sru=live.used.sru)) if precheck else None
    seen = _capacity_seen(live, verdict)

    with transaction.atomic():
        locked = Slice.objects.select_for_update().filter(pk=slice_.pk).first()
        if locked is None or (locked.index, locked.cru, locked.mru, locked.sru) != (
            slice_.index, slice_.cru, slice_.mru, slice_.sru
        ):
            raise SliceChanged(
                f"slice {slice_index} of node {node.node_id} was re-carved while its capacity was read; "
                "look at the catalog again and retry"
            )
        _check_attemptable(node, locked)
        deployment = Deployment.objects.create(
            node=node,
            slice=locked,
            slice_index=locked.index,
            cru=locked.cru,
            mru=locked.mru,
            sru=locked.sru,
            state=Deployment.State.DEPLOYING,
            capacity_seen=seen,
            requested_by=by if getattr(by, "pk", None) else None,
        )

    if verdict is not None and not verdict.fits:
        return _finish_refused(deployment, verdict, by=by, source=source)

    size = SliceSize(cru=slice_.cru, mru=slice_.mru, sru=slice_.sru, rootfs=capacity.zos_rootfs(slice_.cru, slice_.mru))
    try:
        vm = grid.deploy_vm(node.node_id, size, name=f"s{node.node_id}_{slice_.index}_{deployment.pk}")
    except DeploymentFailed as exc:
        diagnosis = classify(exc.raw)
        failed = _finish_failed(
            deployment,
            raw=exc.raw,
            cause=diagnosis.cause,
            needed=diagnosis.needed_bytes,
            usable=diagnosis.usable_bytes,
            by=by,
            source=source,
        )
        refusal_learn(deployment=failed, live=live, policy=policy, source=source)
        return failed
    except (NodeOffline, NodeNotFound) as exc:
        return _finish_failed(deployment, raw=str(exc), cause=Deployment.Cause.NODE_OFFLINE, by=by, source=source)
    except (GridUnavailable, MalformedPayload) as exc:
        # The grid may have deployed the VM before the answer got lost; the words say to check.
        return _finish_failed(deployment, raw=str(exc), cause=Deployment.Cause.GRID_UNAVAILABLE, by=by, source=source)
    except GridError as exc:
        cause = exc.cause if exc.cause in Deployment.Cause.values else Deployment.Cause.UNKNOWN
        return _finish_failed(deployment, raw=str(exc), cause=cause, by=by, source=source)
    return _finish_deployed(deployment, live=live, policy=policy, workload_id=vm.workload_id, grid=grid, by=by, source=source)


def slices_deploy_all_free(
    *,
    node: Node,
    precheck: bool = True,
    by=None,
    grid: Grid | None = None,
    source: str = "web",
    on_each: Callable[[Deployment], None] | None = None,
) -> list[Deployment]:
    """Deploy every free slice in index order, each attempt recorded; `on_each` sees each as it ends.

    A failed or refused slice does not stop the others (the next may be smaller or the failure
    local). A grid error reading capacity stops the run and propagates; what was done stays recorded.
    """
    grid = grid or get_grid()
    indices = list(node.slices.filter(state=Slice.State.FREE).order_by("index").values_list("index", flat=True))
    deployments = []
    for index in indices:
        try:
            deployment = slice_deploy(node=node, slice_index=index, precheck=precheck, by=by, grid=grid, source=source)
        except (SliceNotFree, SliceNotFound, SliceBusy, SliceChanged):
            continue  # taken or re-carved since the list was read: not ours to deploy any more
        deployments.append(deployment)
        if on_each is not None:
            on_each(deployment)
    return deployments


def deployment_delete(*, deployment: Deployment, by=None, grid: Grid | None = None, source: str = "web") -> Deployment:
    """Remove a deployed slice's VM from the grid and give the slice back to the catalog.

    A grid error deleting the VM propagates and nothing changes here.
    """
    if deployment.state != Deployment.State.DEPLOYED:
        raise DeployError(f"deployment {deployment.pk} is {deployment.state}, not deployed; there is no VM to delete")
    grid = grid or get_grid()
    grid.delete_vm(deployment.node.node_id, deployment.grid_workload_id)
    with transaction.atomic():
        nodes_lock([deployment.node_id])  # before the slice: see nodes_lock
        Deployment.objects.filter(pk=deployment.pk).update(state=Deployment.State.DELETED, finished_at=timezone.now())
        if deployment.slice_id:
            Slice.objects.filter(pk=deployment.slice_id, state=Slice.State.DEPLOYED).update(
                state=Slice.State.FREE, updated_at=timezone.now()
            )
            figures_refresh([deployment.node_id])
        deployment.state = Deployment.State.DELETED
        _audit(
            deployment,
            message=f"deleted the VM of slice {deployment.slice_index} on node {deployment.node.node_id} "
            f"(workload {deployment.grid_workload_id}); the slice is free again",
            by=by,
            source=source,
        )
    deployment.refresh_from_db()
    try:
        precheck_run(node=deployment.node, grid=grid)  # the freed room changes placeable/phantom
    except GridError as exc:
        log.warning("node %s figures not refreshed after deleting a VM: %s", deployment.node.node_id, exc)
    return deployment


def deployment_words(deployment: Deployment) -> str:
    """One sentence for support staff: what happened to this attempt and what to do."""
    where = f"slice {deployment.slice_index} on node {deployment.node.node_id}"
    if deployment.state == Deployment.State.DEPLOYED:
        return f"{where} deployed as workload {deployment.grid_workload_id}"
    if deployment.state == Deployment.State.DELETED:
        return f"{where} was deployed and its VM has since been deleted"
    if deployment.state == Deployment.State.DEPLOYING:
        return (
            f"{where}: deploy started {deployment.started_at:%Y-%m-%d %H:%M} UTC and never finished; "
            "if that was more than a few minutes ago the process stopped mid-deploy: check the node before retrying"
        )
    if deployment.state == Deployment.State.REFUSED:
        verdict = deployment.capacity_seen.get("verdict") or {}
        return f"{where} refused by the precheck, nothing was sent to the grid: " + verdict.get("words", "does not fit")
    if deployment.cause == Deployment.Cause.GRID_UNAVAILABLE:
        return (
            f"{where}: the grid did not answer ({deployment.raw_error}); the VM may or may not exist, "
            "check the node before retrying"
        )
    if deployment.cause == Deployment.Cause.NODE_OFFLINE:
        return f"{where}: the node is not reachable on the grid ({deployment.raw_error}); retry when it is up"
    diagnosis = classify(deployment.raw_error)
    if deployment.cause in (Deployment.Cause.MEMORY, Deployment.Cause.DISK):
        fact = diagnosis.words.split("; ", 1)[0]  # what ZOS said, without the generic advice
        return f"{where} failed: {fact}. {deployment_advice(deployment)}"
    return f"{where} failed: " + diagnosis.words


def deployment_advice(deployment: Deployment) -> str:
    """What to do now about a memory or disk failure, by what is true of its node now.

    Re-registering is advised only where it would change the catalog (the node is stale);
    `reregistered_since` may be annotated by the selector (failed_deployments) to save a query.
    """
    node = deployment.node
    if node.status == Node.Status.STANDBY:
        return (
            "The node is on standby now (switched off by its farm's power manager): it can be woken; "
            "deploy again once it is up."
        )
    if node.status == Node.Status.DOWN:
        return "The node is down now: nothing can be placed on it until it reports again; pick another node."
    since = getattr(deployment, "reregistered_since", None)
    if since is None:
        since = Job.objects.filter(
            node=node, kind=Job.Kind.REREGISTER, state=Job.State.SUCCEEDED, dry_run=False,
            finished_at__gt=deployment.started_at,
        ).exists()
    lessons = []
    if node.hidden_mru_per_vm:
        lessons.append(f"{capacity.format_size(node.hidden_mru_per_vm)} of hidden memory per running VM")
    if node.pool_room_below:
        lessons.append(f"no pool had room for a {capacity.format_size(node.pool_room_below)} disk")
    learnt = f"ZOS's refusals taught the dashboard: {' and '.join(lessons)}; the precheck counts it. " if lessons else ""
    if node.stale:
        return (
            f"{learnt}The catalog still offers slices that do not deploy ({node.stale_reason}): re-register the "
            "node to re-carve them."
        )
    placeable = node.placeable_now
    room = (
        f"{placeable} free slice{'s' if placeable != 1 else ''} can be placed now"
        if placeable
        else "no free slice can be placed now: the node is full (pick another node or free a VM)"
    )
    done = "The catalog has been re-registered since and is current" if since else "The catalog is current"
    return f"{learnt}{done}; {room}. Re-registering would change nothing."


# --- internals ---------------------------------------------------------------------------


def _free_slice(node: Node, slice_index: int) -> Slice:
    try:
        slice_ = node.slices.get(index=slice_index)
    except Slice.DoesNotExist:
        indices = list(node.slices.order_by("index").values_list("index", flat=True))
        listed = ", ".join(str(i) for i in indices) if indices else "none"
        raise SliceNotFound(f"node {node.node_id} has no slice {slice_index} (its slices: {listed})") from None
    _check_attemptable(node, slice_)
    return slice_


def _check_attemptable(node: Node, slice_: Slice) -> None:
    if slice_.state != Slice.State.FREE:
        raise SliceNotFree(
            f"slice {slice_.index} of node {node.node_id} is {slice_.state}, not free; only free slices can be deployed"
        )
    in_flight = (
        Deployment.objects.filter(
            slice=slice_, state=Deployment.State.DEPLOYING, started_at__gte=timezone.now() - IN_FLIGHT
        )
        .order_by("-started_at")
        .first()
    )
    if in_flight is not None:
        raise SliceBusy(
            f"slice {slice_.index} of node {node.node_id} is being deployed already "
            f"(deployment {in_flight.pk}, started {in_flight.started_at:%H:%M:%S} UTC)"
        )


def _deploy_verdict(
    slice_: Slice, live: NodeCapacity, policy: capacity.Policy, facts: capacity.LiveNode
) -> capacity.Verdict:
    if live.status in OFFLINE_STATUSES:
        return _offline_verdict(slice_.size, live, policy)
    return capacity.fits(slice_.size, live.total, live.used, policy, live=facts)


def refusal_learn(*, deployment: Deployment, live: NodeCapacity, policy: capacity.Policy, source: str) -> None:
    """Learn from a ZOS refusal of this deployment, seen on the reading `live` taken just before.

    The node's figures change at once: deployable (the carve counts the lesson), and
    placeable now and phantom, recomputed on that reading with the lesson.
    """
    node = deployment.node
    refusal = deployment_refusal(deployment, total=live.total, used=live.used)
    if observations_learn(node=node, refusal=refusal, deployment=deployment, source=source) is not None:
        node.refresh_from_db()
        precheck_store(node=node, live=live, policy=policy, seen=False)


def _capacity_seen(live: NodeCapacity, verdict: capacity.Verdict | None) -> dict:
    seen = {"total": live.total.as_dict(), "used": live.used.as_dict(), "status": live.status}
    if verdict is not None:
        seen["verdict"] = verdict.as_dict()
    return seen


def _refusal_cause(verdict: capacity.Verdict, deployment: Deployment) -> tuple[str, int | None, int | None]:
    if isinstance(verdict, OfflineVerdict):
        return Deployment.Cause.NODE_OFFLINE, None, None
    if deployment.mru < capacity.MIN_VM_MRU:
        return Deployment.Cause.VALIDATION, capacity.MIN_VM_MRU, deployment.mru
    first = verdict.shortfalls[0]
    cause = Deployment.Cause.MEMORY if first.resource == "mru" else Deployment.Cause.DISK
    return cause, first.needed, max(first.available, 0)


def _finish_refused(deployment: Deployment, verdict: capacity.Verdict, *, by, source: str) -> Deployment:
    cause, needed, usable = _refusal_cause(verdict, deployment)
    deployment.state = Deployment.State.REFUSED
    deployment.cause = cause
    deployment.needed_bytes = needed
    deployment.usable_bytes = usable
    deployment.finished_at = timezone.now()
    with transaction.atomic():
        deployment.save(update_fields=["state", "cause", "needed_bytes", "usable_bytes", "finished_at"])
        _audit(deployment, message=deployment_words(deployment), by=by, source=source)
    return deployment


def _finish_failed(
    deployment: Deployment,
    *,
    raw: str,
    cause: str,
    needed: int | None = None,
    usable: int | None = None,
    by,
    source: str,
) -> Deployment:
    deployment.state = Deployment.State.FAILED
    deployment.raw_error = raw
    deployment.cause = cause
    deployment.needed_bytes = needed
    deployment.usable_bytes = usable
    deployment.finished_at = timezone.now()
    with transaction.atomic():
        deployment.save(update_fields=["state", "raw_error", "cause", "needed_bytes", "usable_bytes", "finished_at"])
        _audit(deployment, message=deployment_words(deployment), by=by, source=source)
    return deployment


def _finish_deployed(
    deployment: Deployment,
    *,
    live: NodeCapacity,
    policy: capacity.Policy,
    workload_id: str,
    grid: Grid,
    by,
    source: str,
) -> Deployment:
    node = deployment.node
    now = timezone.now()
    deployment.state = Deployment.State.DEPLOYED
    deployment.grid_workload_id = workload_id
    deployment.finished_at = now
    notes = ""
    with transaction.atomic():
        nodes_lock([node.pk])  # before the slice: see nodes_lock
        deployment.save(update_fields=["state", "grid_workload_id", "finished_at"])
        taken = Slice.objects.filter(pk=deployment.slice_id, state=Slice.State.FREE).update(
            state=Slice.State.DEPLOYED, updated_at=now
        )
        figures_refresh([node.pk])
        if not taken:
            # Rented (or re-carved) while the grid was deploying: the VM exists, the record says so.
            notes = "; note: the slice was no longer free when the deploy finished"
        _precheck_after_deploy(node, live=live, policy=policy, charge=_vm_charge(deployment), now=now)
        _audit(deployment, message=deployment_words(deployment) + notes, by=by, source=source)
    _sample_capacity(node, grid)
    return deployment


def _vm_charge(deployment: Deployment) -> Resources:
    # What the grid will count for this VM: its memory, its data disk and the ZOS rootfs.
    return Resources(
        cru=deployment.cru,
        mru=deployment.mru,
        sru=deployment.sru + capacity.zos_rootfs(deployment.cru, deployment.mru),
    )


def _precheck_after_deploy(node: Node, *, live: NodeCapacity, policy: capacity.Policy, charge: Resources, now) -> None:
    """Keep the fleet table honest after a deploy without another grid read.

    The capacity read just before the deploy plus the VM's own charge is what the grid will
    report next; placeable/phantom are recomputed from it over the remaining free slices.
    """
    precheck_store(node=node, live=replace(live, used=live.used + charge), policy=policy, seen=False)


def _sample_capacity(node: Node, grid: Grid) -> CapacitySample | None:
    """Record the node's own statistics beside the VMs it now hosts, for calibration.

    A failed statistics read only costs one sample; the deploy itself succeeded.
    """
    try:
        stats = grid.statistics(node.node_id)
    except GridError as exc:
        log.warning("no capacity sample for node %s after deploy: %s", node.node_id, exc)
        return None
    deployed = node.slices.filter(state=Slice.State.DEPLOYED)
    count = 0
    vm_mru = 0
    vm_sru = 0
    for cru, mru, sru in deployed.values_list("cru", "mru", "sru"):
        count += 1
        vm_mru += mru
        vm_sru += sru + capacity.zos_rootfs(cru, mru)
    return CapacitySample.objects.create(
        node=node,
        source="statistics",
        vm_count=count,
        vm_mru=vm_mru,
        vm_sru=vm_sru,
        total_mru=stats.total.mru,
        total_sru=stats.total.sru,
        used_mru=max(stats.used.mru, 0),
        used_sru=max(stats.used.sru, 0),
    )


def _audit(deployment: Deployment, *, message: str, by, source: str) -> None:
    AuditEvent.objects.create(
        actor=by if getattr(by, "pk", None) else None,
        source=source,
        action=f"deployment.{deployment.state}",
        node=deployment.node,
        message=message,
        detail={
            "deployment": deployment.pk,
            "slice": deployment.slice_index,
            "state": deployment.state,
            "cause": deployment.cause,
            "needed_bytes": deployment.needed_bytes,
            "usable_bytes": deployment.usable_bytes,
            "workload_id": deployment.grid_workload_id,
        },
    )
