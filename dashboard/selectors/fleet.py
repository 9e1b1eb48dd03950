"""The fleet overview: nominal against deployable slices per node and for the whole fleet.

Three queries whatever the fleet size: the nodes with their slice counts (conditional
aggregation), the free and occupied slices' sizes, and the policies. The carve of each node
is remembered by (size, pools, policy, occupied slices), which many nodes share.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import CharField, Count, Q, QuerySet
from django.db.models.functions import Cast

from dashboard import capacity
from dashboard.models import Node, Slice
from dashboard.services.catalog import carve_memoised, policy_book, stale_reason

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
    "pools_sru",
    "placeable_now",
    "phantom_slices",
    "seen_at",
    "carved_policy_name",
    "carved_policy_version",
    "carved_slice_sru",
)


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
    key, descending = _sort_key(sort)
    if status is not None and status not in Node.Status.values:
        raise ValueError(f"status must be one of {', '.join(Node.Status.values)}, not {status!r}")
    nodes = Node.objects.all()
    if search is not None and search.strip():
        digits = search.strip()
        if not digits.isdigit():
            return FleetOverview()
        nodes = nodes.annotate(node_id_text=Cast("node_id", CharField())).filter(node_id_text__startswith=digits)
    if farm_id is not None:
        nodes = nodes.filter(farm_id=farm_id)
    if status is not None:
        nodes = nodes.filter(status=status)

    rows = _rows(nodes)
    if stale is not None:
        rows = [r for r in rows if r.stale == stale]
    if has_phantoms is not None:
        rows = [r for r in rows if bool(r.phantom) == has_phantoms]
    rows = _sorted(rows, key, descending)
    return FleetOverview(rows=rows, totals=_totals(rows))


def fleet_rows(*, node_pks: Iterable[int]) -> dict[int, NodeRow]:
    """The same figures for chosen nodes (node pk -> row), e.g. one admin page; three queries."""
    return {row.pk: row for row in _rows(Node.objects.filter(pk__in=list(node_pks)))}


def _rows(nodes: QuerySet[Node]) -> list[NodeRow]:
    def counted(state: str) -> Count:
        return Count("slices", filter=Q(slices__state=state))

    node_values = list(
        nodes.order_by()
        .values(*_NODE_FIELDS)
        .annotate(
            nominal=Count("slices"),
            free=counted(Slice.State.FREE),
            rented=counted(Slice.State.RENTED),
            deployed=counted(Slice.State.DEPLOYED),
            failed=counted(Slice.State.FAILED),
        )
    )
    if not node_values:
        return []

    # Sizes of the free and occupied slices, in index order: occupied ones are kept by the
    # carve (first fit in the pools follows their order), free ones are compared with it.
    free_sizes: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    occupied_sizes: dict[int, list[capacity.Resources]] = defaultdict(list)
    slices = Slice.objects.filter(
        node__in=nodes.order_by().values("pk"), state__in=[Slice.State.FREE, *Slice.OCCUPIED_STATES]
    )
    for node_pk, state, cru, mru, sru in slices.order_by("node_id", "index").values_list(
        "node_id", "state", "cru", "mru", "sru"
    ):
        if state == Slice.State.FREE:
            free_sizes[node_pk].append((cru, mru, sru))
        else:
            occupied_sizes[node_pk].append(capacity.Resources(cru=cru, mru=mru, sru=sru))

    book = policy_book()
    rows = []
    for n in node_values:
        policy = book.for_node(pk=n["pk"], farm_id=n["farm_id"])
        total = capacity.Resources(cru=n["total_cru"], mru=n["total_mru"], sru=n["total_sru"], hru=n["total_hru"])
        carve = carve_memoised(total, policy, occupied=occupied_sizes[n["pk"]], pools=n["pools_sru"] or None)
        reason = stale_reason(
            carved_policy_name=n["carved_policy_name"],
            carved_policy_version=n["carved_policy_version"],
            carved_slice_sru=n["carved_slice_sru"],
            policy=policy,
            free=free_sizes[n["pk"]],
            carve=carve,
        )
        rows.append(
            NodeRow(
                node_id=n["node_id"],
                pk=n["pk"],
                farm_id=n["farm_id"],
                farm_name=n["farm_name"],
                status=n["status"],
                nominal=n["nominal"],
                deployable=carve.slices,
                free=n["free"],
                rented=n["rented"],
                deployed=n["deployed"],
                failed=n["failed"],
                placeable_now=n["placeable_now"],
                phantom=n["phantom_slices"],
                stale=bool(reason),
                stale_reason=reason,
                seen_at=n["seen_at"],
                policy=f"{policy.name} v{policy.version}",
            )
        )
    return rows


def _sort_key(sort: str) -> tuple[str, bool]:
    descending = sort.startswith("-")
    key = sort.removeprefix("-")
    if key not in SORT_KEYS:
        raise ValueError(f"cannot sort by {sort!r}; sort by one of {', '.join(SORT_KEYS)} (prefix - for descending)")
    return ("seen_at" if key == "seen" else key), descending


def _sorted(rows: list[NodeRow], key: str, descending: bool) -> list[NodeRow]:
    def value(row: NodeRow):
        if key == "farm":
            return (True, row.farm_id)
        raw = getattr(row, key)
        return (raw is not None, raw if raw is not None else 0)

    # Node id breaks ties, always ascending, so pages stay stable.
    rows = sorted(rows, key=lambda r: r.node_id)
    return sorted(rows, key=value, reverse=descending) if key != "node_id" or descending else rows


def _totals(rows: list[NodeRow]) -> FleetTotals:
    return FleetTotals(
        nodes=len(rows),
        nominal=sum(r.nominal for r in rows),
        deployable=sum(r.deployable for r in rows),
        free=sum(r.free for r in rows),
        rented=sum(r.rented for r in rows),
        deployed=sum(r.deployed for r in rows),
        failed=sum(r.failed for r in rows),
        placeable_now=sum(r.placeable_now or 0 for r in rows),
        phantom=sum(r.phantom or 0 for r in rows),
        stale=sum(1 for r in rows if r.stale),
        unprechecked=sum(1 for r in rows if r.placeable_now is None),
    )
