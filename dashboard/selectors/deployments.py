"""Reads for the failed deployments page: what failed, why, and what the node reported then."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Exists, OuterRef, QuerySet

from dashboard import capacity
from dashboard.models import Deployment, Job

# A refusal by our own precheck is a failed attempt too: support staff get asked about both.
FAILED_STATES = (Deployment.State.FAILED, Deployment.State.REFUSED)


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
        node=OuterRef("node"), kind=Job.Kind.REREGISTER, state=Job.State.SUCCEEDED, dry_run=False,
        finished_at__gt=OuterRef("started_at"),
    )
    deployments = (
        Deployment.objects.filter(state__in=FAILED_STATES)
        .select_related("node", "requested_by")
        .annotate(reregistered_since=Exists(reregistered))
        .order_by("-started_at", "-pk")
    )
    if node_id is not None:
        deployments = deployments.filter(node__node_id=node_id)
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
            resources.append(
                SeenResource(resource, capacity.RESOURCE_WORDS[resource], total[resource], used[resource])
            )
    if not resources and not seen.get("status"):
        return None
    return CapacitySeen(status=str(seen.get("status") or "unknown"), resources=tuple(resources))
