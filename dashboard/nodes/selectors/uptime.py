"""Uptime over the last 30 days: the share of the time each node was up, from its status events.

The status a node had at any moment is the `status_after` of its last status event before it
(NodeEvent: went-down, standby, woken, back-up), or, before its first event, that event's
`status_before`; with no event at all, the status it has now. Time before the node was registered
is not counted (it was not watched), so a node registered yesterday and up since is 100 %, not 3 %.
Two queries for any number of nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django.db.models import OuterRef, Subquery

from dashboard.capacity import node_events
from dashboard.models import Node, NodeEvent

UPTIME_DAYS = 30


def uptime_share(
    *, status_at_start: str, changes: Sequence[tuple[datetime, str]], start: datetime, end: datetime
) -> float | None:
    """The share (0-1) of [start, end) spent "up", from the status at `start` and the (time, new status)
    changes after it, in time order; None for an empty span. Pure."""
    if end <= start:
        return None
    up, status, since = 0.0, status_at_start, start
    for at, after in changes:
        at = min(max(at, start), end)
        if status == "up":
            up += (at - since).total_seconds()
        status, since = after, at
    if status == "up":
        up += (end - since).total_seconds()
    return up / (end - start).total_seconds()


def uptime_percent(node_pks: Iterable[int], *, now: datetime, days: int = UPTIME_DAYS) -> dict[int, float | None]:
    """Node pk -> percent of the last `days` it was up (one decimal); None for a node never read."""
    pks = list(node_pks)
    if not pks:
        return {}
    start = now - timedelta(days=days)
    status_events = NodeEvent.objects.filter(kind__in=node_events.STATUS_KINDS)
    before = status_events.filter(node=OuterRef("pk"), at__lte=start).order_by("-at", "-pk").values("status_after")[:1]
    nodes = Node.objects.filter(pk__in=pks).annotate(status_at_start=Subquery(before))
    rows = {
        pk: (registered_at, status, seen_at, at_start)
        for pk, registered_at, status, seen_at, at_start in nodes.values_list(
            "pk", "registered_at", "status", "seen_at", "status_at_start"
        )
    }
    changes: dict[int, list[tuple[datetime, str, str]]] = {}
    for node_pk, at, status_before, status_after in (
        status_events.filter(node_id__in=pks, at__gt=start, at__lte=now)
        .order_by("node_id", "at", "pk")
        .values_list("node_id", "at", "status_before", "status_after")
    ):
        changes.setdefault(node_pk, []).append((at, status_before, status_after))
    shares: dict[int, float | None] = {}
    for pk, (registered_at, status, seen_at, at_start) in rows.items():
        if seen_at is None:
            shares[pk] = None
            continue
        mine = changes.get(pk, [])
        first = at_start or (mine[0][1] if mine else status)
        share = uptime_share(
            status_at_start=first,
            changes=[(at, after) for at, _before, after in mine],
            start=max(start, registered_at),
            end=now,
        )
        shares[pk] = None if share is None else round(share * 100, 1)
    return shares


__all__ = ["UPTIME_DAYS", "uptime_percent", "uptime_share"]
