"""Live holds as every reader takes them off what is on offer: one query a page at most, never one a row.

The stored figures (Node.slices_free, FarmTotals.free, placement's stored room) count a held slice as
free: a hold changes what is on offer, not what is true, and it ends by itself when `expires_at`
passes, with no write. So each reader asks here, at its own `now`, how many of the free slices it
shows are held, and shows them apart (docs/architecture.md, "Holds"): from the sums each node row keeps
of its live holds with their first and last expiry (figures.services.held_figures), exact while every one of
them is live, and from the live holds themselves for a node some of whose holds ended by time since.
Only holds of slices still free count: a slice rented by hand under a hold is counted once, as rented.

A held slice is not placeable either: a node's free slices are of one size and the precheck places
them one after another, so of h held slices on a node whose stored figures say p placeable, min(h, p)
were among the placeable (the held VMs take the room of as many) and the rest among the phantom. Every
reader takes them off with `Held.offered`, so that free = placeable + phantom still holds on every page.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from django.db.models import Count, ExpressionWrapper, F, IntegerField, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, Least

from dashboard.models import Hold, Node, Slice

# Who may see every hold's buyer (a marketplace id): the admins, who may deploy a slice themselves.
BUYERS_SHOWN_TO = "dashboard.deploy_slice"


def buyer_shown(user) -> bool:
    """Who holds a slice is the buyer's business: to the API, a token whose user may deploy (admins, and so
    every token that may report or hold) sees each hold's buyer; a support token sees that a slice is held,
    not for whom. GET /nodes/{id} and GET /holds follow this one rule (the node page, for people signed in,
    shows the buyer to support staff diagnosing a refused deploy)."""
    return user is not None and user.has_perm(BUYERS_SHOWN_TO)


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


def _summed(nodes: QuerySet[Node], key: str | None, now: datetime) -> dict:
    """key value (None: one for all) -> Held of these nodes at `now`, from the live holds summed on each
    node row (figures.services.held_figures) while every one of a node's holds is live: one query over the node
    rows with a live hold, grouped by `key`, Held.on_node's arithmetic in SQL. The nodes whose holds
    partly ended by time since the row was written are read from their live holds, one query more."""
    all_live = Q(held_first_expiry__gt=now)
    whole = IntegerField()
    taken = Least(F("held_slices"), Coalesce(F("placeable_now"), 0), output_field=whole)
    phantom_taken = Least(
        ExpressionWrapper(F("held_slices") - taken, output_field=whole),
        Coalesce(F("phantom_slices"), 0),
        output_field=whole,
    )
    sums = {
        "h_slices": Sum("held_slices", filter=all_live),
        "h_placeable": Sum(taken, filter=all_live),
        "h_phantom": Sum(phantom_taken, filter=all_live),
        "h_up": Sum(phantom_taken, filter=all_live & Q(status="up", closure="")),
        "h_partly": Count("pk", filter=~all_live),
    }
    held_nodes = nodes.order_by().filter(held_last_expiry__gt=now)
    rows = held_nodes.values(key).annotate(**sums) if key else [held_nodes.aggregate(**sums)]
    found: dict = {}
    partly = False
    for row in rows:
        held = Held(*(int(row[name] or 0) for name in ("h_slices", "h_placeable", "h_phantom", "h_up")))
        if held:
            found[row.get(key)] = held
        partly = partly or bool(row["h_partly"])
    if partly:
        some = held_nodes.filter(~all_live).values("pk")
        by = {"pk": "node_id", "farm_id": "node__farm_id", None: "node_id"}[key]
        for value, held in _held_by(live_holds(now).filter(node__in=some), by).items():
            value = value if key else None
            found[value] = found.get(value, Held()) + held
    return found


def held_by_node(*, now: datetime, node_pks: Iterable[int] | None = None) -> dict[int, Held]:
    """Node pk -> its live holds at `now` (of these nodes, or of every node); one query (two while a
    node's holds have partly ended by time)."""
    nodes = Node.objects.all() if node_pks is None else Node.objects.filter(pk__in=list(node_pks))
    return _summed(nodes, "pk", now)


def held_by_farm(*, now: datetime, farm_id: int | None = None) -> dict[int, Held]:
    """Farm id -> its live holds at `now`; one query (two while a node's holds have partly ended)."""
    nodes = Node.objects.all() if farm_id is None else Node.objects.filter(farm_id=farm_id)
    return _summed(nodes, "farm_id", now)


def _held_counts(nodes: QuerySet[Node], now: datetime) -> dict[tuple[int, int], int]:
    """(farm id, grid id) -> free slices held at `now`, of these nodes with a live hold: the counts summed
    on the node rows while all of a node's holds are live, else its live holds (one query more)."""
    rows = (
        nodes.order_by()
        .filter(held_last_expiry__gt=now)
        .values_list("farm_id", "grid_id", "held_slices", "held_first_expiry")
    )
    counts, partly = {}, []
    for farm, grid, n, first in rows:
        if first > now:
            counts[farm, grid] = n
        else:
            partly.append(grid)
    if partly:
        live = live_holds(now).filter(node__grid_id__in=partly).order_by()
        counts.update(
            {
                (farm, grid): n
                for farm, grid, n in live.values_list("node__farm_id", "node__grid_id").annotate(Count("pk"))
            }
        )
    return counts


def _nodes_of(*, farm_ids: Iterable[int] | None, nodes: QuerySet[Node] | None) -> QuerySet[Node]:
    scope = Node.objects.all() if nodes is None else nodes
    return scope if farm_ids is None else scope.filter(farm_id__in=list(farm_ids))


def held_by_grid_id(*, now: datetime, farm_ids: Iterable[int] | None = None, nodes=None) -> dict[int, int]:
    """The grid's node id -> free slices held at `now`, of these farms or nodes (the map's rows); one query."""
    return {grid: n for (_farm, grid), n in _held_counts(_nodes_of(farm_ids=farm_ids, nodes=nodes), now).items()}


def holds_signature(*, now: datetime, farm_ids: Iterable[int] | None = None) -> dict[int, str]:
    """Farm id -> its nodes' held counts at `now`, as text ("grid:n" by grid id): a kept map cell is keyed
    on it, so a hold made, released or ended by time gives the farm a new key with no write, and the key
    changes exactly when what the cells show of the holds does (one query, two while holds partly ended)."""
    counts = sorted(_held_counts(_nodes_of(farm_ids=farm_ids, nodes=None), now).items())
    signatures: dict[int, list[str]] = {}
    for (farm, grid), n in counts:
        signatures.setdefault(farm, []).append(f"{grid}:{n}")
    return {farm: ";".join(entries) for farm, entries in signatures.items()}


def held_among(*, now: datetime, nodes: QuerySet[Node] | None = None) -> Held:
    """The live holds at `now` on these nodes (every node when None); one query (two while a node's
    holds have partly ended by time)."""
    return _summed(Node.objects.all() if nodes is None else nodes, None, now).get(None, Held())
