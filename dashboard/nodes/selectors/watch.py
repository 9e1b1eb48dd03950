"""What the fleet page says about the watch: the oldest reading, the last run, and the nodes the grid did not answer for."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Min, Q

from dashboard.jobs.results import WatchResult
from dashboard.models import Job, Node

# Nodes the fleet page names; the rest are on the watch job's page.
MISSED_SHOWN = 10


@dataclass(frozen=True)
class WatchStatus:
    every: int  # FLEET_WATCH_EVERY seconds; 0: off
    oldest_reading_at: datetime | None
    never_read: int
    last: Job | None  # the last watch that ran to the end (not a skipped one)
    result: WatchResult | None
    missed: list[list] = field(default_factory=list)
    rmb_on: bool = False  # RMB_REDIS_URL set: the nodes are asked their pools through rmb-peer
    simulated: bool = False  # GRID_BACKEND=simulator: its nodes answer pools and build in process

    @property
    def rmb_words(self) -> str:
        """Whether the nodes are asked over RMB, and what the last watch heard."""
        if not self.rmb_on:
            if self.simulated:
                return (
                    "RMB through rmb-peer is off (RMB_REDIS_URL unset): the simulated grid's nodes answer their pools "
                    "and build in process, over its RMB loopback (SIMULATED_RMB, read by the same parser as rmb-peer's "
                    "answers); on the Grid Proxy pools would come from reports only."
                )
            return "RMB is off (RMB_REDIS_URL unset): pools come from reports only."
        result = self.result
        if result is None or not result.pools_asked:
            return "RMB is on: the last watch had no node to ask its pools (none unknown or older than POOLS_MAX_AGE)."
        return (
            f"RMB is on: the last watch asked {result.pools_asked} node{'s' if result.pools_asked != 1 else ''} "
            f"their pools, {result.pools_heard} answered."
        )

    @property
    def behind(self) -> bool:
        """With the watch on, no reading should be older than two intervals (the grid's misses aside)."""
        if not self.every or self.oldest_reading_at is None or self.last is None or self.last.finished_at is None:
            return False
        return (self.last.finished_at - self.oldest_reading_at).total_seconds() > 2 * self.every


def watch_status() -> WatchStatus:
    """Two queries: the oldest reading (and the nodes never read), and the last finished watch."""
    readings = Node.objects.aggregate(oldest=Min("seen_at"), never_read=Count("pk", filter=Q(seen_at__isnull=True)))
    last = (
        Job.objects.filter(kind=Job.Kind.FLEET_WATCH, state__in=[Job.State.SUCCEEDED, Job.State.FAILED])
        .exclude(step="skipped")
        .order_by("-finished_at")
        .first()
    )
    result = last.outcome if last is not None else None
    missed = list(result.missed[:MISSED_SHOWN]) if isinstance(result, WatchResult) else []
    return WatchStatus(
        every=settings.FLEET_WATCH_EVERY,
        oldest_reading_at=readings["oldest"],
        never_read=readings["never_read"],
        last=last,
        result=result if isinstance(result, WatchResult) else None,
        missed=missed,
        rmb_on=bool(settings.RMB_REDIS_URL),
        simulated=settings.GRID_BACKEND == "simulator",
    )
