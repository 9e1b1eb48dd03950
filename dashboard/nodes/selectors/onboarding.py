"""Reads for the "Add nodes from the grid" pages: recent onboarding jobs, the nodes a run added."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from dashboard.models import Job, Node, reading_is_uncertain

RECENT = 10


@dataclass(frozen=True)
class NewNode:
    """A node an onboarding registered, as it is now, with the ages of its reading."""

    node_id: int
    farm_id: int
    status: str
    deployable: int
    free: int
    seen_at: datetime | None
    reported_at: datetime | None
    uncertain: bool


def onboard_jobs_recent(limit: int = RECENT) -> QuerySet[Job]:
    return Job.objects.filter(kind=Job.Kind.ONBOARD).select_related("requested_by").order_by("-created_at")[:limit]


def onboard_new_nodes(node_ids: list[int]) -> list[NewNode]:
    """These nodes (a run's result lists the first few hundred it added), in one query."""
    ids = list(node_ids)
    now = timezone.now()
    rows = (
        Node.objects.filter(grid_id__in=ids)
        .order_by("grid_id")
        .values_list("grid_id", "farm_id", "status", "deployable", "slices_free", "seen_at", "reported_at")
    )
    return [
        NewNode(
            node_id=node_id,
            farm_id=farm_id,
            status=status,
            deployable=deployable,
            free=free,
            seen_at=seen_at,
            reported_at=reported_at,
            uncertain=reading_is_uncertain(seen_at, now),
        )
        for node_id, farm_id, status, deployable, free, seen_at, reported_at in rows
    ]
