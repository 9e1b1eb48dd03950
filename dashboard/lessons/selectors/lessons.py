"""The memory readings an admin may look at (issue 44): those waiting for a second source, on their node
alone, and those held aside as not plausible; live ones only (not dropped, not older than the limit)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet

from dashboard.models import Observation


def memory_observations_live(*, now: datetime) -> QuerySet[Observation]:
    """The memory observations that still count: not dropped, not older than OBSERVATION_MAX_AGE_DAYS (they
    stay on file after), whatever their standing."""
    return Observation.objects.filter(
        kind=Observation.Kind.MEMORY,
        cleared_at__isnull=True,
        seen_at__gte=now - timedelta(days=settings.OBSERVATION_MAX_AGE_DAYS),
    )


def memory_points_live(build: str, *, now: datetime) -> QuerySet[Observation]:
    """The build's live memory observations that make a point of its line (total, usable and accounted memory
    known), whatever their standing."""
    return memory_observations_live(now=now).filter(
        zos_build=build,
        total_mru__isnull=False,
        usable_mru__isnull=False,
        accounted_mru__isnull=False,
    )


def lessons_waiting(*, now: datetime, limit: int = 200) -> dict[str, list[Observation]]:
    live = memory_observations_live(now=now).select_related("node", "reported_by", "token").order_by("-seen_at", "-pk")
    return {
        "waiting": list(live.filter(standing=Observation.Standing.NODE)[:limit]),
        "held": list(live.filter(standing=Observation.Standing.HELD)[:limit]),
    }
