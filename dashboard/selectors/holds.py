"""Live holds as every reader takes them off what is on offer: one query a page, never one a row.

The stored figures (Node.slices_free, FarmTotals.free, placement's stored room) count a held slice as
free: a hold changes what is on offer, not what is true, and it ends by itself when `expires_at`
passes, with no write. So each reader asks here, at its own `now`, how many of the free slices it
shows are held, and shows them apart (docs/architecture.md, "Holds"). Only holds of slices still free
count: a slice rented by hand under a hold is counted once, as rented.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Count, QuerySet

from dashboard.models import Hold, Node, Slice


def live_holds(now: datetime) -> QuerySet[Hold]:
    """The holds every reader takes off what is on offer: live at `now`, on a slice still free."""
    return Hold.objects.live(now).filter(slice__state=Slice.State.FREE)


def held_by_node(*, now: datetime, node_pks: Iterable[int] | None = None) -> dict[int, int]:
    """Node pk -> free slices held at `now` (of these nodes, or of every node); one query."""
    holds = live_holds(now)
    if node_pks is not None:
        holds = holds.filter(node_id__in=list(node_pks))
    return dict(holds.order_by().values_list("node_id").annotate(n=Count("pk")))


def held_by_farm(*, now: datetime, farm_id: int | None = None) -> dict[int, int]:
    """Farm id -> free slices held at `now`; one query."""
    holds = live_holds(now)
    if farm_id is not None:
        holds = holds.filter(node__farm_id=farm_id)
    return dict(holds.order_by().values_list("node__farm_id").annotate(n=Count("pk")))


def held_by_grid_id(*, now: datetime, farm_ids: Iterable[int] | None = None, nodes=None) -> dict[int, int]:
    """The grid's node id -> free slices held at `now`, of these farms or nodes (the map's rows); one query."""
    holds = live_holds(now)
    if farm_ids is not None:
        holds = holds.filter(node__farm_id__in=list(farm_ids))
    if nodes is not None:
        holds = holds.filter(node__in=nodes.order_by().values("pk"))
    return dict(holds.order_by().values_list("node__grid_id").annotate(n=Count("pk")))


def held_among(*, now: datetime, nodes: QuerySet[Node] | None = None) -> int:
    """Free slices held at `now` on these nodes (every node when None); one query."""
    holds = live_holds(now)
    if nodes is not None:
        holds = holds.filter(node__in=nodes.order_by().values("pk"))
    return holds.count()
