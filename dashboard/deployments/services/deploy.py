"""Deploying slices: slice_deploy, slices_deploy_all_free, and the words for support (deployment_delete
gives a VM's slice back: deployments.services.deploy_delete).

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

Grid errors while reading capacity (before any row is written) propagate as typed GridErrors; nothing is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from dashboard import capacity
from dashboard.access.services.audit_trail import actor_of, audit_record
from dashboard.capacity import Resources, SliceSize
from dashboard.catalogs.services.precheck import node_live_facts, precheck_store
from dashboard.deployments.selectors.deployments import deployment_words
from dashboard.deployments.services.deploy_attemptable import slice_attemptable, slice_check_attemptable
from dashboard.deployments.services.deploy_carries import (
    carried_asked,
    carries_verdict,
    deploy_carried,
    farm_ips_read_again,
)
from dashboard.deployments.services.deploy_errors import SliceBusy, SliceChanged, SliceNotFound, SliceNotFree
from dashboard.figures.closure import closure_of
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid import get_grid
from dashboard.grid.classify import classify
from dashboard.grid.types import (
    DeploymentFailed,
    DeployNotSupported,
    Grid,
    GridError,
    GridUnavailable,
    MalformedPayload,
    NodeAway,
    NodeCapacity,
    NodeNotFound,
)
from dashboard.lessons.selectors.odds import vm_odds_now
from dashboard.lessons.services.observations import deployment_refusal, observations_learn
from dashboard.models import Deployment, Node, Slice
from dashboard.nodes.services.readings import LiveReading, readings_store
from dashboard.nodes.services.withholds import quarantine_consider
from dashboard.nodes.services.zos_cache import DEPLOY_REFUSED, zos_cache_heard
from dashboard.policies.selectors.policy_book import policy_for_node
from dashboard.policies.services.calibration import capacity_sample_record

log = logging.getLogger(__name__)

# --- deploy ------------------------------------------------------------------------------


def slice_deploy(
    *,
    node: Node,
    slice_index: int,
    precheck: bool = True,
    by=None,
    grid: Grid | None = None,
    source: str = "web",
    public_ipv4: int | None = None,
    gpus: int = 0,
) -> Deployment:
    """Deploy one free slice's VM and record the attempt, whatever its outcome.

    `public_ipv4` (None: as the policy's slices carry) and `gpus`: what it carries (deployments.services.deploy_carries).

    Raises SliceNotFound / SliceNotFree / SliceBusy (nothing written) when the slice cannot
    be attempted, DeployNotSupported when the grid backend is read-only, and the typed
    GridError when the node's capacity cannot be read (nothing written either).
    Refusals and grid failures of the deploy itself are returned as recorded Deployments.
    """
    grid = grid or get_grid()
    slice_ = slice_attemptable(node, slice_index)
    # Read capacity first: the record keeps what the grid said at that moment, with or without precheck.
    live = grid.node(node.grid_id)
    read_at = timezone.now()
    if not grid.can_deploy:
        raise DeployNotSupported(
            f"the {grid.name} grid backend is read-only and cannot deploy; use the simulator (GRID_BACKEND=simulator)"
        )
    policy = policy_for_node(node)
    ips, gpus = deploy_carried(policy.name, public_ipv4, gpus)
    verdict = _precheck_verdict(node, slice_, live, grid, policy, ips=ips, gpus=gpus) if precheck else None
    deployment = _attempt_record(node, slice_, live=live, seen=_capacity_seen(live, verdict), ips=ips, gpus=gpus, by=by)
    if verdict is not None and not verdict.fits:
        return _finish_refused(deployment, verdict, by=by, source=source)
    return _vm_deploy(
        deployment,
        node=node,
        slice_=slice_,
        grid=grid,
        live=live,
        read_at=read_at,
        policy=policy,
        ips=ips,
        gpus=gpus,
        by=by,
        source=source,
    )


def _precheck_verdict(
    node: Node, slice_: Slice, live: NodeCapacity, grid: Grid, policy: capacity.Policy, *, ips: int, gpus: int
) -> capacity.Verdict:
    """The precheck's verdict on the reading: the slice's size first, then what it carries."""
    verdict = _deploy_verdict(slice_, live, policy, node_live_facts(node, policy, used_sru=live.used.sru))
    if verdict.fits:
        verdict = carries_verdict(node, slice_, live, grid, ips=ips, gpus=gpus) or verdict
    return verdict


def _attempt_record(
    node: Node, slice_: Slice, *, live: NodeCapacity, seen: dict, ips: int, gpus: int, by
) -> Deployment:
    """The attempt's row, "deploying", written under the slice's lock before the grid is asked to deploy."""
    with transaction.atomic():
        locked = Slice.objects.select_for_update().filter(pk=slice_.pk).first()
        if locked is None or (locked.index, locked.cru, locked.mru, locked.sru) != (
            slice_.index,
            slice_.cru,
            slice_.mru,
            slice_.sru,
        ):
            raise SliceChanged(
                f"slice {slice_.index} of node {node.grid_id} was re-carved while its capacity was read; "
                "look at the catalog again and retry"
            )
        slice_check_attemptable(node, locked)
        return Deployment.objects.create(
            node=node,
            **Deployment.of_slice(locked),
            public_ipv4=ips,
            gpus=gpus,
            state=Deployment.State.DEPLOYING,
            capacity_seen=seen,
            requested_by=actor_of(by),
            odds=vm_odds_now(node, mru=locked.mru, used_mru=live.used.mru),
        )


def _vm_deploy(
    deployment: Deployment,
    *,
    node: Node,
    slice_: Slice,
    grid: Grid,
    live: NodeCapacity,
    read_at: datetime,
    policy: capacity.Policy,
    ips: int,
    gpus: int,
    by,
    source: str,
) -> Deployment:
    """Ask the grid for the attempt's VM and finish its row with the outcome, whatever it is."""
    size = SliceSize(cru=slice_.cru, mru=slice_.mru, sru=slice_.sru, rootfs=capacity.zos_rootfs(slice_.cru, slice_.mru))
    try:
        name = f"s{node.grid_id}_{slice_.index}_{deployment.pk}"
        vm = grid.deploy_vm(node.grid_id, size, name=name, **carried_asked(ips, gpus))
    except DeploymentFailed as exc:
        diagnosis = classify(exc.raw)
        if diagnosis.cause == Deployment.Cause.PUBLIC_IP:
            farm_ips_read_again(node, grid)  # the lesson: the farm's IPs as they are now
        if diagnosis.cause == Deployment.Cause.CACHE_MISSING:  # ZOS refuses everything there: closed
            zos_cache_heard(node=node, said=exc.raw, source=DEPLOY_REFUSED)
        failed = _finish_failed(
            deployment,
            raw=exc.raw,
            cause=diagnosis.cause,
            needed=diagnosis.needed_bytes,
            usable=diagnosis.usable_bytes,
            by=by,
            source=source,
        )
        refusal_learn(deployment=failed, live=live, read_at=read_at, policy=policy, source=source)
        return failed
    except (NodeAway, NodeNotFound) as exc:
        return _finish_failed(deployment, raw=str(exc), cause=Deployment.Cause.NODE_AWAY, by=by, source=source)
    except (GridUnavailable, MalformedPayload) as exc:
        # The grid may have deployed the VM before the answer got lost; the words say to check.
        return _finish_failed(deployment, raw=str(exc), cause=Deployment.Cause.GRID_UNAVAILABLE, by=by, source=source)
    except GridError as exc:
        cause = exc.cause if exc.cause in Deployment.Cause.values else Deployment.Cause.UNKNOWN
        return _finish_failed(deployment, raw=str(exc), cause=cause, by=by, source=source)
    if ips:
        farm_ips_read_again(node, grid)  # one IP fewer free in the farm: every node of it sees it
    return _finish_deployed(
        deployment, live=live, read_at=read_at, workload_id=vm.workload_id, grid=grid, by=by, source=source
    )


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


# --- internals ---------------------------------------------------------------------------


def _deploy_verdict(
    slice_: Slice, live: NodeCapacity, policy: capacity.Policy, facts: capacity.LiveNode
) -> capacity.Verdict:
    return capacity.fits(
        slice_.size, live.total, live.used, policy, live=facts, closure=closure_of(slice_.node, live=live)
    )


def refusal_learn(
    *, deployment: Deployment, live: NodeCapacity, read_at: datetime, policy: capacity.Policy, source: str
) -> None:
    """Learn from a ZOS refusal of this deployment, seen on the reading `live` taken just before.

    The node's figures change at once: deployable (the carve counts the lesson), and
    placeable now and phantom, recomputed on that reading with the lesson.
    """
    node = deployment.node
    refusal = deployment_refusal(deployment, total=live.total, used=live.used)
    if observations_learn(node=node, refusal=refusal, deployment=deployment, source=source) is not None:
        node.refresh_from_db()
        precheck_store(node=node, reading=LiveReading.of(node, live, read_at=read_at), policy=policy)


def _capacity_seen(live: NodeCapacity, verdict: capacity.Verdict | None) -> dict:
    seen = {"total": live.total.as_dict(), "used": live.used.as_dict(), "status": live.status}
    if verdict is not None:
        seen["verdict"] = verdict.as_dict()
    return seen


def _refusal_cause(verdict: capacity.Verdict, deployment: Deployment) -> tuple[str, int | None, int | None]:
    if isinstance(verdict, capacity.CarriesVerdict):
        return verdict.cause, None, None
    if isinstance(verdict, capacity.ClosedVerdict):
        if capacity.node_is_away(verdict.closure.key):
            return Deployment.Cause.NODE_AWAY, None, None
        return Deployment.Cause.NODE_CLOSED, None, None  # rented by another twin, needs our rent, ...
    if deployment.mru < capacity.MIN_VM_MRU:
        return Deployment.Cause.VALIDATION, capacity.MIN_VM_MRU, deployment.mru
    first = verdict.shortfalls[0]
    if first.resource == "cru":  # vmd would refuse it: more vCPUs than the node's threads (capacity.vcpus)
        return Deployment.Cause.VALIDATION, None, None
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
        deployment_audit(deployment, message=deployment_words(deployment), by=by, source=source)
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
        deployment_audit(deployment, message=deployment_words(deployment), by=by, source=source)
        quarantine_consider(node=deployment.node)
    return deployment


def _finish_deployed(
    deployment: Deployment,
    *,
    live: NodeCapacity,
    read_at: datetime,
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
    with node_writes([node.pk]):  # the node before the slice: see figures.services.figures.nodes_lock
        deployment.save(update_fields=["state", "grid_workload_id", "finished_at"])
        taken = Slice.objects.filter(pk=deployment.slice_id, state=Slice.State.FREE).update(
            state=Slice.State.DEPLOYED, updated_at=now
        )
        # The fleet table stays honest without another grid read: the reading taken just before the
        # deploy plus the VM's own charge is what the grid will report next.
        readings_store([LiveReading(node.pk, replace(live, used=live.used + _vm_charge(deployment)), read_at)])
        if not taken:
            # Rented (or re-carved) while the grid was deploying: the VM exists, the record says so.
            notes = "; note: the slice was no longer free when the deploy finished"
        deployment_audit(deployment, message=deployment_words(deployment) + notes, by=by, source=source)
    capacity_sample_record(node, grid)
    return deployment


def _vm_charge(deployment: Deployment) -> Resources:
    # What the grid will count for this VM: its memory, its data disk and the ZOS rootfs.
    return Resources(
        cru=deployment.cru,
        mru=deployment.mru,
        sru=deployment.sru + capacity.zos_rootfs(deployment.cru, deployment.mru),
    )


def deployment_audit(deployment: Deployment, *, message: str, by, source: str) -> None:
    # The four ends of a deploy write one shape of row; access.services.audit_trail stores it.
    audit_record(
        actor=by,
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
