"""A node's timeline: what its readings showed changing (NodeEvent), newest first, with its uptime."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dashboard.models import Node, NodeEvent
from dashboard.nodes.selectors.uptime import UPTIME_DAYS, uptime_percent

TIMELINE_SHOWN = 50


@dataclass(frozen=True)
class NodeTimeline:
    node: Node
    events: list[NodeEvent]
    more: bool  # older events exist beyond those shown
    uptime_percent: float | None  # over UPTIME_DAYS; None: never read
    uptime_days: int = UPTIME_DAYS


def node_timeline(*, node: Node, now: datetime, limit: int = TIMELINE_SHOWN) -> NodeTimeline:
    """Three queries: the events shown (one more, to know there are older ones) and the uptime's two."""
    events = list(NodeEvent.objects.filter(node=node).order_by("-at", "-pk")[: limit + 1])
    return NodeTimeline(
        node=node,
        events=events[:limit],
        more=len(events) > limit,
        uptime_percent=uptime_percent([node.pk], now=now)[node.pk],
    )
