"""Live holds as every reader takes them off what is on offer: one query a page, never one a row.

The stored figures (Node.slices_free, FarmTotals.free, placement's stored room) count a held slice as
free: a hold changes what is on offer, not what is true, and it ends by itself when `expires_at`
passes, with no write. So each reader asks here, at its own `now`, how many of the free slices it
shows are held, and shows them apart (docs/architecture.md, "Holds"). Only holds of slices still free
count: a slice rented by hand under a hold is counted once, as rented.

A held slice is not placeable either: a node's free slices are of one size and the precheck places
them one after another, so of h held slices on a node whose stored figures say p placeable, min(h, p)
were among the placeable (the held VMs take the room of as many) and the rest among the phantom. Every
reader takes them off with `Held.offered`, so that free = placeable + phantom still holds on every page.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from django.db.models import Count, QuerySet

from dashboard.models import Hold, Node, Slice


def live_holds(now: datetime) -> QuerySet[Hold]:
    """The holds every reader takes off what is on offer: live at `now`, on a slice still free."""
    return Hold.objects.live(now).filter(slice__state=Slice.State.FREE)


@dataclass(frozen=True)
class Held:
    """Live holds on some nodes, as the stored figures counted their slices."""

    slices: int = 0  # free slices held for a buyer
    placeable: int = 0  # of them, counted placeable now by the stored figures
    phantom: int = 0  # of them, counted phantom
    phantom_on_up_nodes: int = 0  # of those, on nodes up and open

    def __bool__(self) -> bool:
        return self.slices > 0

    def __add__(self, other: Held) -> Held:
        return Held(
            self.slices + other.slices,
            self.placeable + other.placeable,
            self.phantom + other.phantom,
            self.phantom_on_up_nodes + other.phantom_on_up_nodes,
        )

    @classmethod
    def on_node(cls, held: int, *, placeable: int | None, phantom: int | None, up_and_open: bool) -> Held:
        taken = min(held, placeable or 0)
        phantom_taken = min(held - taken, phantom or 0)
        return cls(held, taken, phantom_taken, phantom_taken if up_and_open else 0)

    def offered(self, figures, *, placeable: str = "placeable", phantom: str = "phantom", up: str = ""):
        """`figures` (a dataclass with free, held and these fields) with the held slices taken off."""
        if not self:
            return figures
        changes = {
            "free": max(figures.free - self.slices, 0),
            "held": self.slices,
            placeable: max((getattr(figures, placeable) or 0) - self.placeable, 0)
            if getattr(figures, placeable) is not None
            else None,
            phantom: max((getattr(figures, phantom) or 0) - self.phantom, 0)
            if getattr(figures, phantom) is not None
            else None,
        }
        if up:
            changes[up] = max(getattr(figures, up) - self.phantom_on_up_nodes, 0)
        return replace(figures, **changes)


_NODE_COLUMNS = ("node__placeable_now", "node__phantom_slices", "node__status", "node__closure")


def _held_by(holds: QuerySet[Hold], key: str) -> dict[int, Held]:
    """key value -> Held, from one query grouped by node (as many rows as held nodes, not the fleet)."""
    found: dict[int, Held] = {}
    # Grouped by node first: min(h, p) is a node's, not a farm's.
    rows = holds.order_by().values_list("node_id", key, *_NODE_COLUMNS).annotate(n=Count("pk"))
    for _node, value, placeable, phantom, status, closure, n in rows:
        held = Held.on_node(n, placeable=placeable, phantom=phantom, up_and_open=status == "up" and not closure)
        found[value] = found.get(value, Held()) + held
    return found


def held_by_node(*, now: datetime, node_pks: Iterable[int] | None = None) -> dict[int, Held]:
    """Node pk -> its live holds at `now` (of these nodes, or of every node); one query."""
    holds = live_holds(now)
    if node_pks is not None:
        holds = holds.filter(node_id__in=list(node_pks))
    return _held_by(holds, "node_id")


def held_by_farm(*, now: datetime, farm_id: int | None = None) -> dict[int, Held]:
    """Farm id -> its live holds at `now`; one query."""
    holds = live_holds(now)
    if farm_id is not None:
        holds = holds.filter(node__farm_id=farm_id)
    return _held_by(holds, "node__farm_id")


def held_by_grid_id(*, now: datetime, farm_ids: Iterable[int] | None = None, nodes=None) -> dict[int, int]:
    """The grid's node id -> free slices held at `now`, of these farms or nodes (the map's rows); one query."""
    holds = live_holds(now)
    if farm_ids is not None:
        holds = holds.filter(node__farm_id__in=list(farm_ids))
    if nodes is not None:
        holds = holds.filter(node__in=nodes.order_by().values("pk"))
    return dict(holds.order_by().values_list("node__grid_id").annotate(n=Count("pk")))


def holds_signature(*, now: datetime, farm_ids: Iterable[int] | None = None) -> dict[int, str]:
    """Farm id -> the ids of its live holds, as text: a kept map cell is keyed on it, so a hold made,
    released or ended by time gives the farm a new key with no write (one query, as many rows as holds)."""
    holds = live_holds(now)
    if farm_ids is not None:
        holds = holds.filter(node__farm_id__in=list(farm_ids))
    ids: dict[int, list[int]] = {}
    for farm, pk in holds.order_by("node__farm_id", "pk").values_list("node__farm_id", "pk"):
        ids.setdefault(farm, []).append(pk)
    return {farm: ".".join(map(str, pks)) for farm, pks in ids.items()}


def held_among(*, now: datetime, nodes: QuerySet[Node] | None = None) -> Held:
    """The live holds at `now` on these nodes (every node when None); one query."""
    holds = live_holds(now)
    if nodes is not None:
        holds = holds.filter(node__in=nodes.order_by().values("pk"))
    return sum(_held_by(holds, "node_id").values(), Held())
