"""Withhold windows as read for the node page, the services and the API: which is in force, which come.

A window is open while starts_at <= now < ends_at (ends_at None: until released) and not released
(NodeWithhold.is_open, the same rule as a query here). Reads only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet

from dashboard.models import Deployment, Node, NodeWithhold


def open_at(now: datetime) -> Q:
    """The windows open at `now`, as a filter on NodeWithhold."""
    return Q(released_at__isnull=True, starts_at__lte=now) & (Q(ends_at__isnull=True) | Q(ends_at__gt=now))


def not_over(now: datetime) -> Q:
    """The windows still to come or open at `now` (what a release ends)."""
    return Q(released_at__isnull=True) & (Q(ends_at__isnull=True) | Q(ends_at__gt=now))


@dataclass(frozen=True)
class InForce:
    """What withholds a node now: the open window that ends last (None: until released)."""

    reason: str
    until: datetime | None
    source: str
    window_pk: int


def in_force(*, now: datetime, node_pks: Iterable[int] | None = None) -> dict[int, InForce]:
    """Node pk -> the window in force at `now`, for these nodes (None: every node); one query."""
    windows = NodeWithhold.objects.filter(open_at(now))
    if node_pks is not None:
        windows = windows.filter(node_id__in=list(node_pks))
    found: dict[int, InForce] = {}
    rows = windows.order_by().values_list("node_id", "reason", "ends_at", "source", "pk")
    for node_pk, reason, ends_at, source, pk in rows:
        held = found.get(node_pk)
        # The one that ends last holds the node (an open-ended one, longest); ties: the newest window.
        key = (ends_at is None, ends_at or now, pk)
        if held is None or key > (held.until is None, held.until or now, held.window_pk):
            found[node_pk] = InForce(reason=reason, until=ends_at, source=source, window_pk=pk)
    return found


def nodes_marked_withheld() -> QuerySet[Node]:
    """The nodes whose row says a window holds them (what the figures read)."""
    return Node.objects.exclude(withheld_reason="")


@dataclass(frozen=True)
class WindowRow:
    window: NodeWithhold
    open: bool
    failures: tuple[Deployment, ...]  # a quarantine's failures, oldest first
    current: bool = False  # open or to come (what a release ends)


def node_windows(*, node: Node, now: datetime, recent: int = 5) -> list[WindowRow]:
    """The node's windows open or to come, then the last `recent` others; a quarantine with its failures."""
    current = list(node.withholds.filter(not_over(now)).select_related("created_by", "released_by"))
    past = list(
        node.withholds.exclude(pk__in=[w.pk for w in current]).select_related("created_by", "released_by")[:recent]
    )
    failure_ids = {pk for w in (*current, *past) for pk in w.failures}
    failures = {d.pk: d for d in Deployment.objects.filter(pk__in=failure_ids)} if failure_ids else {}
    return [
        WindowRow(
            window=w,
            open=w.is_open(now),
            failures=tuple(sorted((failures[pk] for pk in w.failures if pk in failures), key=lambda d: d.started_at)),
            current=i < len(current),
        )
        for i, w in enumerate((*current, *past))
    ]
