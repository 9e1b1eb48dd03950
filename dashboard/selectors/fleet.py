"""The fleet overview: nominal against deployable slices per node and for the whole fleet.

Three queries whatever the fleet size: the nodes, their slices grouped (free ones by size,
occupied ones one by one in index order, failed ones counted), and the policies. Nodes of the
same shape (size, pools, policy, occupied slices, how they were carved, free slices) share
one carve and one stale verdict; a node's figures are plain tuples until a page shows it, and
the stale reason is written in words only then.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import BigIntegerField, Case, CharField, Count, F, IntegerField, QuerySet, TextField, Value, When
from django.db.models.functions import Cast, Extract

from dashboard import capacity
from dashboard.models import Node, Slice
from dashboard.services.catalog import carve_memoised, catalog_stale, policy_book, stale_reason

# Sort keys; "-" in front sorts descending. "seen" is short for "seen_at". A missing value
# (never prechecked, never seen) sorts as the smallest: first ascending, last descending.
SORT_KEYS = ("node_id", "farm", "status", "gap", "phantom", "free", "seen_at", "seen", "deployable", "nominal")

_NODE_FIELDS = (
    "pk",
    "node_id",
    "farm_id",
    "farm_name",
    "status",
    "total_cru",
    "total_mru",
    "total_sru",
    "total_hru",
    "pools_text",
    "placeable_now",
    "phantom_slices",
    "seen_us",
    "carved_policy_name",
    "carved_policy_version",
    "carved_slice_sru",
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# A node's figures before it becomes a NodeRow: a tuple, since most nodes are only counted
# in the totals, filtered and sorted, never shown.
(_NODE_ID, _PK, _FARM_ID, _FARM_NAME, _STATUS, _NOMINAL, _DEPLOYABLE, _FREE, _RENTED, _DEPLOYED, _FAILED,
 _PLACEABLE, _PHANTOM, _STALE, _SEEN_AT, _SHAPE) = range(16)  # fmt: skip


@dataclass(frozen=True)
class NodeRow:
    node_id: int
    pk: int
    farm_id: int
    farm_name: str
    status: str
    nominal: int  # slices in the stored catalog
    deployable: int  # what the node's policy carves, rented and deployed slices kept
    free: int
    rented: int
    deployed: int
    failed: int
    placeable_now: int | None  # None: never prechecked
    phantom: int | None  # None: unknown until a precheck
    stale: bool
    stale_reason: str
    seen_at: datetime | None
    policy: str = ""  # "name vN" of the effective policy

    @property
    def gap(self) -> int:
        """Slices the catalog offers beyond what the node can host (negative: room for more)."""
        return self.nominal - self.deployable


@dataclass(frozen=True)
class FleetTotals:
    nodes: int = 0
    nominal: int = 0
    deployable: int = 0
    free: int = 0
    rented: int = 0
    deployed: int = 0
    failed: int = 0
    placeable_now: int = 0  # over the prechecked nodes
    phantom: int = 0  # over the prechecked nodes
    stale: int = 0
    unprechecked: int = 0

    @property
    def gap(self) -> int:
        return self.nominal - self.deployable


@dataclass(frozen=True)
class FleetOverview:
    rows: list[NodeRow] = field(default_factory=list)
    totals: FleetTotals = field(default_factory=FleetTotals)


@dataclass(frozen=True)
class FleetPage:
    """One page of the overview: Django's Page of NodeRow, and the totals of the whole filtered set."""

    page: Page
    totals: FleetTotals = field(default_factory=FleetTotals)

    @property
    def rows(self) -> list[NodeRow]:
        return list(self.page.object_list)

    @property
    def count(self) -> int:
        """Nodes matching the filters, on every page."""
        return self.page.paginator.count


def fleet_overview(
    *,
    farm_id: int | None = None,
    status: str | None = None,
    stale: bool | None = None,
    has_phantoms: bool | None = None,
    search: str | None = None,
    sort: str = "node_id",
) -> FleetOverview:
    """Every registered node (or those matching the filters) with its figures, and their totals.

    `search` matches node ids exactly or by leading digits; text that is not digits matches
    nothing. `has_phantoms=False` keeps nodes with no known phantom (none, or not prechecked).
    Totals are over the rows returned. ValueError for an unknown sort key or status.
    """
    figures = _filtered(farm_id=farm_id, status=status, stale=stale, has_phantoms=has_phantoms, search=search, sort=sort)
    return FleetOverview(rows=[_node_row(t) for t in figures], totals=_totals(figures))


def fleet_page(
    *,
    page: int | str | None = 1,
    per_page: int = 50,
    farm_id: int | None = None,
    status: str | None = None,
    stale: bool | None = None,
    has_phantoms: bool | None = None,
    search: str | None = None,
    sort: str = "node_id",
) -> FleetPage:
    """fleet_overview's rows of one page (a page number out of range or not a number gives the
    nearest page, as Paginator.get_page) and the totals of every matching node.

    The same three queries; only the page's nodes become NodeRows with their reason in words.
    """
    figures = _filtered(farm_id=farm_id, status=status, stale=stale, has_phantoms=has_phantoms, search=search, sort=sort)
    shown = Paginator(_LazyRows(figures), per_page).get_page(page)
    shown.object_list = list(shown.object_list)
    return FleetPage(page=shown, totals=_totals(figures))


def fleet_rows(*, node_pks: Iterable[int]) -> dict[int, NodeRow]:
    """The same figures for chosen nodes (node pk -> row), e.g. one admin page; three queries."""
    return {t[_PK]: _node_row(t) for t in _figures(Node.objects.filter(pk__in=list(node_pks)))}


class _LazyRows(Sequence):
    """Figures seen as NodeRows, made only for the items asked for (a Paginator asks for a page)."""

    def __init__(self, figures: list[tuple]):
        self._figures = figures

    def __len__(self) -> int:
        return len(self._figures)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [_node_row(t) for t in self._figures[index]]
        return _node_row(self._figures[index])


def _filtered(
    *,
    farm_id: int | None,
    status: str | None,
    stale: bool | None,
    has_phantoms: bool | None,
    search: str | None,
    sort: str,
) -> list[tuple]:
    key, descending = _sort_key(sort)
    if status is not None and status not in Node.Status.values:
        raise ValueError(f"status must be one of {', '.join(Node.Status.values)}, not {status!r}")
    nodes = Node.objects.all()
    if search is not None and search.strip():
        digits = search.strip()
        if not digits.isdigit():
            return []
        nodes = nodes.annotate(node_id_text=Cast("node_id", CharField())).filter(node_id_text__startswith=digits)
    if farm_id is not None:
        nodes = nodes.filter(farm_id=farm_id)
    if status is not None:
        nodes = nodes.filter(status=status)

    figures = _figures(nodes)
    if stale is not None:
        figures = [t for t in figures if t[_STALE] == stale]
    if has_phantoms is not None:
        figures = [t for t in figures if bool(t[_PHANTOM]) == has_phantoms]
    return _sorted(figures, key, descending)


class _Shape:
    """What nodes of one shape share: the policy, the carve, the stale verdict and, once asked, its words."""

    __slots__ = ("policy", "carve", "stale", "_reason_args", "_reason")

    def __init__(self, *, policy: capacity.Policy, carve: capacity.Carve, reason_args: dict):
        self.policy = policy
        self.carve = carve
        self._reason_args = reason_args
        self._reason: str | None = None
        self.stale = catalog_stale(policy=policy, carve=carve, **reason_args)

    @property
    def reason(self) -> str:
        if self._reason is None:
            self._reason = stale_reason(policy=self.policy, carve=self.carve, **self._reason_args) if self.stale else ""
        return self._reason


def _microseconds(moment: datetime | None) -> int | None:
    return None if moment is None else (moment - _EPOCH) // timedelta(microseconds=1)


def _figures(nodes: QuerySet[Node]) -> list[tuple]:
    # seen_at as whole microseconds since the epoch: it sorts the same, and turning 10,000
    # timestamps into datetimes took as long as the rest of the query; only shown rows need one.
    # SQLite (the embedded demo) has no epoch extract; its fleets are small, so Python converts there.
    in_sql = connection.vendor == "postgresql"
    seen_us = Cast(Extract("seen_at", "epoch", tzinfo=UTC) * Value(1_000_000), BigIntegerField()) if in_sql else F("seen_at")
    # The pools as JSON text: a shape key as it is, parsed once per shape.
    pools_text = Cast("pools_sru", TextField())
    node_values = list(nodes.order_by().annotate(seen_us=seen_us, pools_text=pools_text).values_list(*_NODE_FIELDS))
    if not in_sql:
        at = _NODE_FIELDS.index("seen_us")
        node_values = [v[:at] + (_microseconds(v[at]),) + v[at + 1 :] for v in node_values]
    if not node_values:
        return []

    # One row per free size, per failed size, and per occupied slice with its index: occupied
    # ones are kept by the carve in index order (first fit in the pools follows it), free ones
    # are compared with it, and all of them are counted.
    occupied_index = Case(
        When(state__in=Slice.OCCUPIED_STATES, then=F("index")), default=Value(None), output_field=IntegerField()
    )
    slice_rows = Slice.objects.all()
    if nodes.query.has_filters():
        # Unfiltered, the join to the nodes would cost as much as the grouping itself.
        slice_rows = slice_rows.filter(node__in=nodes.order_by().values("pk"))
    groups = (
        slice_rows.annotate(occupied_index=occupied_index)
        .values_list("node_id", "state", "cru", "mru", "sru", "occupied_index")
        .annotate(n=Count("pk"))
        .order_by()
    )
    # node pk -> [rented, deployed, failed, free, free (size, count) pairs, occupied (index, size) pairs]
    counted: dict[int, list] = {}
    for node_pk, state, cru, mru, sru, index, n in groups:
        counts = counted.get(node_pk)
        if counts is None:
            counts = counted[node_pk] = [0, 0, 0, 0, [], []]
        if state == Slice.State.FREE:
            counts[3] += n
            counts[4].append(((cru, mru, sru), n))
        elif state == Slice.State.FAILED:
            counts[2] += n
        else:
            counts[0 if state == Slice.State.RENTED else 1] += n
            counts[5].extend([(index, (cru, mru, sru))] * n)
    # node pk -> (rented, deployed, failed, free, (free sizes with their count, occupied sizes in index order))
    slices = {
        pk: (rented, deployed, failed, free, (tuple(sorted(free_sizes)), tuple(size for _, size in sorted(occupied))))
        for pk, (rented, deployed, failed, free, free_sizes, occupied) in counted.items()
    }

    book = policy_book()
    by_node, by_farm = book.by_node, book.by_farm
    fleet_policy = book.for_farm(None)
    shapes: dict[tuple, _Shape] = {}
    nothing = (0, 0, 0, 0, ((), ()))
    figures = []
    for (pk, node_id, farm_id, farm_name, status, cru, mru, sru, hru, pools_text, placeable, phantom, seen_us,
         carved_name, carved_version, carved_sru) in node_values:  # fmt: skip
        rented, deployed, failed, free, slice_key = slices.get(pk, nothing)
        policy = by_node.get(pk) or by_farm.get(farm_id) or fleet_policy  # as PolicyBook.for_node
        # The book hands out one object per policy for this request, so its id stands for it
        # (hashing the frozen policy for every node would cost more than the lookup saves).
        key = (cru, mru, sru, hru, pools_text, id(policy), carved_name, carved_version, carved_sru, slice_key)
        shape = shapes.get(key)
        if shape is None:
            free_key, occupied_key = slice_key
            pools = json.loads(pools_text) if pools_text else None
            shape = shapes[key] = _Shape(
                policy=policy,
                carve=carve_memoised(
                    capacity.Resources(cru=cru, mru=mru, sru=sru, hru=hru),
                    policy,
                    occupied=[capacity.Resources(cru=c, mru=m, sru=s) for c, m, s in occupied_key],
                    pools=tuple(pools) if pools else None,
                ),
                reason_args={
                    "carved_policy_name": carved_name,
                    "carved_policy_version": carved_version,
                    "carved_slice_sru": carved_sru,
                    "free": [size for size, n in free_key for _ in range(n)],
                },
            )
        figures.append(
            (node_id, pk, farm_id, farm_name, status, free + rented + deployed + failed, shape.carve.slices, free,
             rented, deployed, failed, placeable, phantom, shape.stale, seen_us, shape)
        )  # fmt: skip
    return figures


def _node_row(t: tuple) -> NodeRow:
    shape: _Shape = t[_SHAPE]
    return NodeRow(
        node_id=t[_NODE_ID],
        pk=t[_PK],
        farm_id=t[_FARM_ID],
        farm_name=t[_FARM_NAME],
        status=t[_STATUS],
        nominal=t[_NOMINAL],
        deployable=t[_DEPLOYABLE],
        free=t[_FREE],
        rented=t[_RENTED],
        deployed=t[_DEPLOYED],
        failed=t[_FAILED],
        placeable_now=t[_PLACEABLE],
        phantom=t[_PHANTOM],
        stale=t[_STALE],
        stale_reason=shape.reason,
        seen_at=None if t[_SEEN_AT] is None else _EPOCH + timedelta(microseconds=t[_SEEN_AT]),
        policy=f"{shape.policy.name} v{shape.policy.version}",
    )


def _sort_key(sort: str) -> tuple[str, bool]:
    descending = sort.startswith("-")
    key = sort.removeprefix("-")
    if key not in SORT_KEYS:
        raise ValueError(f"cannot sort by {sort!r}; sort by one of {', '.join(SORT_KEYS)} (prefix - for descending)")
    return ("seen_at" if key == "seen" else key), descending


_SORT_FIELDS = {
    "node_id": _NODE_ID,
    "status": _STATUS,
    "phantom": _PHANTOM,
    "free": _FREE,
    "seen_at": _SEEN_AT,
    "deployable": _DEPLOYABLE,
    "nominal": _NOMINAL,
}


def _sorted(figures: list[tuple], key: str, descending: bool) -> list[tuple]:
    if key == "farm":
        value = lambda t: (True, t[_FARM_ID])  # noqa: E731
    elif key == "gap":
        value = lambda t: (True, t[_NOMINAL] - t[_DEPLOYABLE])  # noqa: E731
    else:
        index = _SORT_FIELDS[key]

        def value(t: tuple):
            raw = t[index]
            return (raw is not None, raw if raw is not None else 0)

    # Node id breaks ties, always ascending, so pages stay stable.
    figures = sorted(figures, key=lambda t: t[_NODE_ID])
    return sorted(figures, key=value, reverse=descending) if key != "node_id" or descending else figures


def _totals(figures: list[tuple]) -> FleetTotals:
    return FleetTotals(
        nodes=len(figures),
        nominal=sum(t[_NOMINAL] for t in figures),
        deployable=sum(t[_DEPLOYABLE] for t in figures),
        free=sum(t[_FREE] for t in figures),
        rented=sum(t[_RENTED] for t in figures),
        deployed=sum(t[_DEPLOYED] for t in figures),
        failed=sum(t[_FAILED] for t in figures),
        placeable_now=sum(t[_PLACEABLE] or 0 for t in figures),
        phantom=sum(t[_PHANTOM] or 0 for t in figures),
        stale=sum(1 for t in figures if t[_STALE]),
        unprechecked=sum(1 for t in figures if t[_PLACEABLE] is None),
    )
