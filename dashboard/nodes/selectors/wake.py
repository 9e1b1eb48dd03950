"""How long a wake takes, per farm, measured from the fleet watch's readings; and whether to wait for one.

A wake shows in a node's events (capacity.node_events) as `wake-not-woken` at the first reading where the
farm's power manager has asked the node up (power target up, state still down) and `woken` at the reading
where it is up again: the time between them is the wake, to the watch's interval (FLEET_WATCH_EVERY). A
wake that finished between two readings leaves no `wake-not-woken` and is not counted (it took less than
one interval). Farmerbot gives a wake 30 minutes (docs/domain.md "Standby and waking").
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from dashboard.capacity import node_events
from dashboard.models import Node, NodeEvent

WAKE_DAYS = 30
# Farmerbot's deadline for a wake (findnode claims a node for 30 min; a measured one took 13.8).
FARMERBOT_WAKE = timedelta(minutes=30)
# Events read at most (a fleet of thousands waking daily for a month stays far below).
EVENTS_READ = 20_000


@dataclass(frozen=True)
class FarmWake:
    farm_id: int | None  # None: pooled over the farms of the nodes on standby
    wakes: int  # wakes measured
    median_seconds: float | None
    longest_seconds: float | None

    @property
    def words(self) -> str:
        where = f"farm {self.farm_id}" if self.farm_id is not None else "their farms"
        if not self.wakes:
            return (
                f"no wake in {where} was measured in the last {WAKE_DAYS} days (the watch sees one that "
                f"takes longer than its interval); farmerbot allows {FARMERBOT_WAKE.seconds // 60} minutes"
            )
        return (
            f"a wake in {where} took about {self.median_seconds / 60:.0f} minutes (the median of "
            f"{self.wakes} the watch measured in the last {WAKE_DAYS} days; the longest {self.longest_seconds / 60:.0f})"
        )


def farm_wakes(farm_ids: Iterable[int], *, now: datetime) -> dict[int, FarmWake]:
    """Each farm's wakes over the last WAKE_DAYS, from its nodes' events; one query."""
    return {farm: _wake(farm, seconds) for farm, seconds in _durations(farm_ids, now=now).items()}


def standby_wake(*, now: datetime) -> FarmWake:
    """The wakes of every farm with a node on standby now, pooled: what placement says of its standby nodes."""
    farms = Node.objects.filter(status=Node.Status.STANDBY).values_list("farm_id", flat=True).distinct()
    return _wake(None, [s for seconds in _durations(farms, now=now).values() for s in seconds])


def _wake(farm_id: int | None, seconds: list[float]) -> FarmWake:
    return FarmWake(
        farm_id=farm_id,
        wakes=len(seconds),
        median_seconds=statistics.median(seconds) if seconds else None,
        longest_seconds=max(seconds) if seconds else None,
    )


def _durations(farm_ids: Iterable[int], *, now: datetime) -> dict[int, list[float]]:
    farms = sorted(set(farm_ids))
    events = (
        NodeEvent.objects.filter(
            node__farm_id__in=farms,
            kind__in=(node_events.WAKE_NOT_WOKEN, *node_events.STATUS_KINDS),
            at__gte=now - timedelta(days=WAKE_DAYS),
        )
        .order_by("node_id", "at", "pk")
        .values_list("node__farm_id", "node_id", "kind", "at")[:EVENTS_READ]
    )
    durations: dict[int, list[float]] = {farm: [] for farm in farms}
    asked: dict[int, datetime] = {}
    for farm, node, kind, at in events:
        if kind == node_events.WAKE_NOT_WOKEN:
            asked.setdefault(node, at)
        elif kind == node_events.WOKEN and node in asked:
            durations[farm].append((at - asked.pop(node)).total_seconds())
        else:
            asked.pop(node, None)  # down, standby again, back up: that episode's wake is not a wake measured
    return durations


@dataclass(frozen=True)
class WakeAdvice:
    wake: FarmWake
    elsewhere: int  # nodes up and open that could host a slice of this node's size now

    @property
    def words(self) -> str:
        if self.elsewhere:
            return (
                f"Go elsewhere: {self.elsewhere} node{'s' if self.elsewhere != 1 else ''} up now could host a slice "
                f"of this size at once, while {self.wake.words}."
            )
        return f"Wait for the wake: no node up now could host a slice of this size, and {self.wake.words}."
