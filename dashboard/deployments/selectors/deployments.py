"""Reads for the failed deployments page: what failed, why, what the node reported then, and the
words support staff read (deployment_words, deployment_advice: by what is true of the node now)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Exists, OuterRef, QuerySet

from dashboard import capacity
from dashboard.grid.classify import classify
from dashboard.grid.zos_words import cache_full_words
from dashboard.models import Deployment, Job, Node

# Two stories, counted apart everywhere (node page, API, alerts, metrics): a deployment ZOS refused
# (or the grid failed) is a failed deployment; one our precheck stopped was turned away before the
# grid (nothing was sent, nothing went wrong on a node). Support's failed-deployments page lists
# both, because support gets asked about both, and says which each one is.
ZOS_FAILED_STATES = (Deployment.State.FAILED,)
TURNED_AWAY_STATES = (Deployment.State.REFUSED,)
FAILED_STATES = ZOS_FAILED_STATES + TURNED_AWAY_STATES


def failed_deployments(
    *,
    node_id: int | None = None,
    farm_id: int | None = None,
    cause: str | None = None,
    since: dt.date | None = None,
    until: dt.date | None = None,
) -> QuerySet[Deployment]:
    """Failed and refused deployments, newest first; `until` includes that whole day (UTC)."""
    reregistered = Job.objects.filter(
        node=OuterRef("node"),
        kind=Job.Kind.REREGISTER,
        state=Job.State.SUCCEEDED,
        dry_run=False,
        finished_at__gt=OuterRef("started_at"),
    )
    deployments = (
        Deployment.objects.filter(state__in=FAILED_STATES)
        .select_related("node", "requested_by")
        .annotate(reregistered_since=Exists(reregistered))
        .order_by("-started_at", "-pk")
    )
    if node_id is not None:
        deployments = deployments.filter(node__grid_id=node_id)
    if farm_id is not None:
        deployments = deployments.filter(node__farm_id=farm_id)
    if cause:
        deployments = deployments.filter(cause=cause)
    if since is not None:
        deployments = deployments.filter(started_at__date__gte=since)
    if until is not None:
        deployments = deployments.filter(started_at__date__lte=until)
    return deployments


@dataclass(frozen=True)
class SeenResource:
    """One resource as the node reported it when the deployment was tried."""

    resource: str
    words: str
    total: int
    used: int

    @property
    def free(self) -> int:
        return self.total - self.used


@dataclass(frozen=True)
class CapacitySeen:
    status: str
    resources: tuple[SeenResource, ...]


def capacity_seen(deployment: Deployment) -> CapacitySeen | None:
    """The stored grid reading, or None when the node could not be read at that moment."""
    seen = deployment.capacity_seen or {}
    total, used = seen.get("total") or {}, seen.get("used") or {}
    resources = []
    for resource in ("mru", "sru"):
        if isinstance(total.get(resource), int) and isinstance(used.get(resource), int):
            resources.append(SeenResource(resource, capacity.RESOURCE_WORDS[resource], total[resource], used[resource]))
    if not resources and not seen.get("status"):
        return None
    return CapacitySeen(status=str(seen.get("status") or "unknown"), resources=tuple(resources))


# --- words for support -------------------------------------------------------------------


def deployment_words(deployment: Deployment) -> str:
    """One sentence for support staff: what happened to this attempt and what to do."""
    where = f"slice {deployment.slice_index} on node {deployment.node.grid_id}"
    if deployment.state == Deployment.State.DEPLOYED:
        return f"{where} deployed as workload {deployment.grid_workload_id}"
    if deployment.state == Deployment.State.DELETED:
        return f"{where} was deployed and its VM has since been deleted"
    if deployment.state == Deployment.State.DEPLOYING:
        return (
            f"{where}: deploy started {deployment.started_at:%Y-%m-%d %H:%M} UTC and never finished; "
            "if that was more than a few minutes ago the process stopped mid-deploy: check the node before retrying"
        )
    if deployment.state == Deployment.State.PROBED:
        return (
            f"probe of node {deployment.node.grid_id} ({deployment.mru} bytes, more than the node's memory): refused "
            f"by ZOS as it always is; its usable figure, {deployment.usable_bytes} bytes, taught the node's memory"
        )
    if deployment.state == Deployment.State.REFUSED:
        verdict = deployment.capacity_seen.get("verdict") or {}
        return f"{where} refused by the precheck, nothing was sent to the grid: " + verdict.get("words", "does not fit")
    return _failure_words(deployment, where=where)


def _failure_words(deployment: Deployment, *, where: str) -> str:
    """A failed attempt in words, by its cause."""
    if deployment.cause == Deployment.Cause.GRID_UNAVAILABLE:
        return (
            f"{where}: the grid did not answer ({deployment.raw_error}); the VM may or may not exist, "
            "check the node before retrying"
        )
    if deployment.cause == Deployment.Cause.NODE_AWAY:
        return f"{where}: the node is not reachable on the grid ({deployment.raw_error}); retry when it is up"
    if deployment.cause == Deployment.Cause.CACHE_FULL:
        # The node's zos-cache quota, where a pool report bounds it: how far the image is from fitting.
        return f"{where} failed: " + cache_full_words(quota=deployment.node.zos_cache)
    diagnosis = classify(deployment.raw_error)
    if deployment.cause in (Deployment.Cause.MEMORY, Deployment.Cause.DISK):
        fact = diagnosis.words.split("; ", 1)[0]  # what ZOS said, without the generic advice
        return f"{where} failed: {fact}. {deployment_advice(deployment)}"
    words = f"{where} failed: " + diagnosis.words
    if deployment.cause == Deployment.Cause.NODE_CLOSED:
        words += _renter_words(deployment.node)
    return words


def _renter_words(node) -> str:
    """Which of the chain's reasons holds for the node as last read: who rents it, or what closes it."""
    if node.rented_by_twin_id:
        contract = f" (rent contract {node.rent_contract_id})" if node.rent_contract_id else ""
        return f" As last read, node {node.grid_id} is rented by twin {node.rented_by_twin_id}{contract}."
    closed = node.closed
    return f" As last read, node {node.grid_id} {closed.what}." if closed is not None else ""


def deployment_advice(deployment: Deployment) -> str:
    """What to do now about a memory or disk failure, by what is true of its node now, in plain words
    (the engineer's detail is `deployment_detail`).

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
            node=node,
            kind=Job.Kind.REREGISTER,
            state=Job.State.SUCCEEDED,
            dry_run=False,
            finished_at__gt=deployment.started_at,
        ).exists()
    if node.stale:
        return "The node's catalog still offers slices it cannot host: an admin should re-register the node."
    placeable = node.placeable_now
    room = (
        f"{placeable} free slice{'s' if placeable != 1 else ''} can be placed now"
        if placeable
        else "no free slice can be placed now: the node is full (pick another node or free a VM)"
    )
    done = "The catalog has been re-registered since and is current" if since else "The catalog is current"
    return f"{done}; {room}. Re-registering would change nothing."


def deployment_detail(deployment: Deployment) -> str:
    """The engineer's detail under the plain words: ZOS's own reason, what the node's refusals taught,
    why its catalog is stale, and what the classifier knows of the tools in between ("" when nothing)."""
    parts = []
    if deployment.raw_error:
        diagnosis = classify(deployment.raw_error)
        if diagnosis.reason and diagnosis.reason != deployment.raw_error:
            parts.append(f"ZOS's reason, unwrapped: {diagnosis.reason}.")
        if diagnosis.workload:
            parts.append(f"Workload {diagnosis.workload} in deployment {diagnosis.deployment_id}.")
        if diagnosis.detail:
            parts.append(diagnosis.detail)
    node = deployment.node
    lessons = []
    if node.hidden_mru_per_vm:
        lessons.append(f"{capacity.format_size(node.hidden_mru_per_vm)} of hidden memory per running VM")
    if node.pool_room_below:
        lessons.append(f"no pool had room for a {capacity.format_size(node.pool_room_below)} disk")
    if lessons:
        parts.append(
            f"ZOS's refusals taught the dashboard: {' and '.join(lessons)}; the precheck and the carve count it."
        )
    if node.stale and node.stale_reason:
        parts.append(f"Stale catalog: {node.stale_reason}.")
    return " ".join(parts)
