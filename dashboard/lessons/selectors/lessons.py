"""The memory readings an admin may look at (issue 44): those waiting for a second source, on their node
alone, and those held aside as not plausible; live ones only (not dropped, not older than the limit)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from dashboard.models import Observation


def lessons_waiting(*, now: datetime, limit: int = 200) -> dict[str, list[Observation]]:
    live = (
        Observation.objects.filter(
            kind=Observation.Kind.MEMORY,
            cleared_at__isnull=True,
            seen_at__gte=now - timedelta(days=settings.OBSERVATION_MAX_AGE_DAYS),
        )
        .select_related("node", "reported_by", "token")
        .order_by("-seen_at", "-pk")
    )
    return {
        "waiting": list(live.filter(standing=Observation.Standing.NODE)[:limit]),
        "held": list(live.filter(standing=Observation.Standing.HELD)[:limit]),
    }
