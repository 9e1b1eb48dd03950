"""The fleet overview: nominal against deployable slices per node and for the whole fleet.

Every figure is a column of the node's row, kept by figures.services.figures in the transactions that
change it, so a page is one aggregate for the totals and one `ORDER BY ... LIMIT` for its rows,
whatever the fleet size; filters and sorts are SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime

from django.core.paginator import Page, Paginator
from django.db.models import CharField, F, Q, QuerySet
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from dashboard import capacity
from dashboard.deployments.selectors.holds import Held, held_by_node
from dashboard.figures.selectors.farm_totals import NOMINAL, FarmSums, farm_totals, fleet_totals, nodes_totals
from dashboard.figures.selectors.tiers import TIER_FIGURES, TIER_WORDS, TIERS, closed_by_reason, tier_of, tier_q
from dashboard.figures.warning import warnings_of_values
from dashboard.models import Node, reading_is_uncertain

# Sort keys; "-" in front sorts descending. "seen" is short for "seen_at". A missing value
# (never prechecked, never seen) sorts as the smallest: first ascending, last descending.
SORT_KEYS = ("node_id", "farm", "status", "gap", "phantom", "free", "seen_at", "seen", "deployable", "nominal")


# The largest farm id the column holds (a PositiveIntegerField is a 32-bit integer in PostgreSQL).
FARM_ID_MAX = 2**31 - 1


# A node's status and slice figures, in the order both the fleet's rows and the map's cells unpack them.
ROW_FIGURES = (
    "status",
    "slices_free",
    "slices_rented",
    "slices_deployed",
    "slices_failed",
    "deployable",
    "placeable_now",
    "phantom_slices",
)
_ROW_FIELDS = (
    "grid_id",
    "pk",
    "farm_id",
    "farm_name",
    *ROW_FIGURES,
    "stale",
    "stale_reason",
    "seen_at",
    "effective_policy",
    "phantom_reasons",
    "reported_at",
    "closure",
    "closure_detail",
    # What decides its warnings (figures.warning.WARNING_FIELDS, in that order).
    "zos_cache_sru",
    "pools_sru",
    "grace_contracts",
    # The live holds summed on the row (figures.services.held_figures): the rows take them off with no query.
    "held_slices",
    "held_first_expiry",
    "held_last_expiry",
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
    phantom_reasons: dict = field(default_factory=dict)  # capacity.PHANTOM_REASONS key -> count
    reported_at: datetime | None = None  # the node's last report to the grid, as of that reading
    closure: str = ""  # why the node offers nothing (capacity.closures key, as stored); "" open
    closure_detail: str = ""
    # Why a deploy there may still fail though it looks free (capacity.warnings), decided from its row.
    warnings: tuple = ()

    @property
    def phantom_by_reason(self) -> dict:
        return self.phantom_reasons

    @property
    def closed(self):
        """The stored closure (capacity.Closure) or None."""
        return capacity.stored_closure(self.closure, self.closure_detail)

    @property
    def closure_words(self) -> str:
        """The closure's short words for a table cell ("node down", "rented by another twin: 42")."""
        closed = self.closed
        if closed is None:
            return ""
        return f"{closed.label}: {closed.detail}" if closed.detail else closed.label

    held: int = 0  # free slices held for a buyer now; `free` leaves them out (deployments.selectors.holds)
    # The row's stored hold sums (slices, first and last expiry), read by _offered at its own now.
    held_stored: tuple = field(default=(0, None, None), repr=False, compare=False)

    @property
    def held_until(self) -> datetime | None:
        """When the last of its live holds ends (the CSV's `held_until`; the node page names each one's)."""
        return self.held_stored[2] if self.held else None

    @property
    def uncertain(self) -> bool:
        """Its figures rest on no reading or one past READING_MAX_AGE_MINUTES: neither phantom nor fine."""
        return reading_is_uncertain(self.seen_at, timezone.now())

    @property
    def gap(self) -> int:
        """Slices the catalog offers beyond what the node can host (negative: room for more)."""
        return self.nominal - self.deployable

    @property
    def tier(self) -> str:
        """When its deployable slices can be used: "now", "after-wake", "blocked" or "closed" (figures.selectors.tiers)."""
        return tier_of(self.status, self.closure)


@dataclass(frozen=True)
class FleetTotals(FarmSums):
    """The farms' sums (figures.selectors.farm_totals: one shape for a farm, the fleet and any set of nodes), with
    the closed tier by reason and the words the pages say of them."""

    farm_id: int = 0  # the whole fleet, or the nodes a page's filters keep
    deployable_closed_by_reason: dict = field(default_factory=dict)

    @classmethod
    def of(cls, sums: FarmSums, *, closed_by_reason: dict[str, int]) -> FleetTotals:
        """The farms' sums figure for figure, with the closed tier by reason."""
        return cls(
            **{f.name: getattr(sums, f.name) for f in fields(FarmSums)}, deployable_closed_by_reason=closed_by_reason
        )

    @property
    def placeable_now(self) -> int:
        """Free slices placeable now, over the prechecked nodes (a node row's own name for it)."""
        return self.placeable

    @property
    def gap(self) -> int:
        return self.nominal - self.deployable

    @property
    def closed_reasons_words(self) -> str:
        """'7 withheld (maintenance or quarantine), 6 rented by another twin': the closed tier by reason (the
        count first, so it never reads as a twin's id)."""
        return ", ".join(
            f"{count} {capacity.CLOSURE_REASONS[key].label}" for key, count in self.deployable_closed_by_reason.items()
        )

    @property
    def phantom_waiting(self) -> int:
        """Phantom slices on nodes that are not up: they wait on a wake (standby) or a repair (down)."""
        return self.phantom - self.phantom_on_up_nodes

    @property
    def tiles_words(self) -> str:
        """The fleet page's tiles in one line, for a console (the start banner): the same figures, so the
        counts printed at start are the ones the page shows (issue 34)."""
        tiers = ", ".join(f"{getattr(self, TIER_FIGURES[tier]):,} {TIER_WORDS[tier]}" for tier in TIERS)
        return (
            f"Fleet page: {self.nodes:,} nodes registered; {self.deployable:,} deployable slices ({tiers}); "
            f"{self.free:,} free; {self.phantom_on_up_nodes:,} phantom on up nodes; {self.stale:,} stale catalogs"
        )


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


@dataclass(frozen=True)
class FleetFilters:
    """The nodes the fleet page's filters keep (None: any), taken whole by the table, its CSV, the map
    and the API.

    `search` matches a farm name (contains, any case), and when it is digits a node id by its
    leading digits or a farm id exactly. `has_phantoms=False` keeps nodes with no known phantom (none, or not prechecked).
    """

    farm_id: int | None = None
    status: str | None = None
    stale: bool | None = None
    has_phantoms: bool | None = None
    search: str | None = None
    tier: str | None = None

    @property
    def whole_farms(self) -> bool:
        """Whether they keep whole farms (none, or a farm id): then the kept farm totals answer."""
        others = (self.status, self.stale, self.has_phantoms, self.search, self.tier)
        return all(value is None or (isinstance(value, str) and not value.strip()) for value in others)

    def nodes(self) -> QuerySet[Node]:
        """The nodes they keep, unordered, for every view of the same set (the table, the map).
        ValueError for an unknown status or tier."""
        if self.status is not None and self.status not in Node.Status.values:
            raise ValueError(f"status must be one of {', '.join(Node.Status.values)}, not {self.status!r}")
        if self.tier is not None and self.tier not in TIERS:
            raise ValueError(f"tier must be one of {', '.join(TIERS)}, not {self.tier!r}")
        nodes = Node.objects.all()
        if self.search is not None and self.search.strip():
            nodes = _searched(nodes, self.search.strip())
        if self.farm_id is not None:
            nodes = nodes.filter(farm_id=self.farm_id)
        if self.status is not None:
            nodes = nodes.filter(status=self.status)
        if self.tier is not None:
            nodes = nodes.filter(tier_q(self.tier))
        if self.stale is not None:
            nodes = nodes.filter(stale=self.stale)
        if self.has_phantoms is True:
            nodes = nodes.filter(phantom_slices__gt=0)
        elif self.has_phantoms is False:
            nodes = nodes.filter(Q(phantom_slices=0) | Q(phantom_slices__isnull=True))
        return nodes

    def totals(self, nodes: QuerySet[Node]) -> FleetTotals:
        """The totals of the nodes they keep (`nodes`, from `nodes()`): from the kept farm totals when they
        are whole farms (one row a farm, whatever their size: figures.selectors.farm_totals), else one
        aggregate over the matching nodes (the farm totals' own aggregates: a figure is counted one way)."""
        if self.whole_farms:
            sums = fleet_totals() if self.farm_id is None else FarmSums.total(farm_totals(farm_id=self.farm_id))
        else:
            sums = nodes_totals(nodes)
        return FleetTotals.of(sums, closed_by_reason=_closed_by_reason(sums.deployable_closed, nodes))


NO_FILTERS = FleetFilters()


def fleet_overview(*, filters: FleetFilters = NO_FILTERS, sort: str = "node_id") -> FleetOverview:
    """Every registered node (or those the filters keep) with its figures, and their totals.

    Totals are over the rows returned. ValueError for an unknown sort key, status or tier.
    """
    nodes = filters.nodes()
    totals = filters.totals(nodes)
    rows = [_node_row(values) for values in _ordered(nodes, sort).values_list(*_ROW_FIELDS)]
    return FleetOverview(rows=_offered(rows) if totals.held else rows, totals=totals)


def fleet_page(
    *,
    page: int | str | None = 1,
    per_page: int = 50,
    filters: FleetFilters = NO_FILTERS,
    sort: str = "node_id",
) -> FleetPage:
    """fleet_overview's rows of one page (a page number out of range or not a number gives the
    nearest page, as Paginator.get_page) and the totals of every matching node.

    Two queries: the totals (which also count the matching nodes for the paginator) and the page.
    """
    nodes = filters.nodes()
    ordered = _ordered(nodes, sort)  # before the totals: an unknown sort key is refused first
    totals = filters.totals(nodes)
    paginator = Paginator(ordered.values_list(*_ROW_FIELDS), per_page)
    paginator.count = totals.nodes  # the totals counted them already
    shown = paginator.get_page(page)
    shown.object_list = [_node_row(values) for values in shown.object_list]
    if totals.held:  # no live hold among these nodes: no query for the rows' holds
        shown.object_list = _offered(shown.object_list)
    return FleetPage(page=shown, totals=totals)


def fleet_rows(*, node_pks) -> dict[int, NodeRow]:
    """The same figures for chosen nodes (node pk -> row), e.g. one admin page; one query."""
    rows = [_node_row(values) for values in Node.objects.filter(pk__in=list(node_pks)).values_list(*_ROW_FIELDS)]
    return {row.pk: row for row in _offered(rows)}


def _offered(rows: list[NodeRow]) -> list[NodeRow]:
    """The rows with their live holds taken off the free slices on offer: from the sums each row stores
    while all its holds are live; a row whose holds partly ended by time is read from its live holds
    (one query for all of them, none when there is no such row)."""
    now = timezone.now()
    held, partly = {}, []
    for row in rows:
        slices, first, last = row.held_stored
        if not slices or last is None or last <= now:
            continue
        if first > now:
            up_and_open = row.status == "up" and not row.closure
            held[row.pk] = Held.on_node(
                slices, placeable=row.placeable_now, phantom=row.phantom, up_and_open=up_and_open
            )
        else:
            partly.append(row.pk)
    if partly:
        held.update(held_by_node(now=now, node_pks=partly))
    if not held:
        return rows
    return [held[row.pk].offered(row, placeable="placeable_now") if row.pk in held else row for row in rows]


def _searched(nodes: QuerySet[Node], text: str) -> QuerySet[Node]:
    """Nodes whose farm name contains the text (any case); digits also match a node id by its
    leading digits and a farm id exactly. People type what they read on the page: "1774", "42", "mitana"."""
    matches = Q(farm_name__icontains=text)
    if text.isdigit():
        nodes = nodes.annotate(node_id_text=Cast("grid_id", CharField()))
        matches |= Q(node_id_text__startswith=text)
        if int(text) <= FARM_ID_MAX:  # beyond the column's range PostgreSQL would refuse the comparison
            matches |= Q(farm_id=int(text))
    return nodes.filter(matches)


_SORT_COLUMNS = {
    "node_id": "grid_id",
    "farm": "farm_id",
    "status": "status",
    "gap": "gap",
    "phantom": "phantom_slices",
    "free": "slices_free",
    "seen_at": "seen_at",
    "deployable": "deployable",
    "nominal": "nominal",
}


_NULLABLE = frozenset(f.name for f in Node._meta.concrete_fields if f.null)


def _ordered(nodes: QuerySet[Node], sort: str) -> QuerySet[Node]:
    descending = sort.startswith("-")
    key = sort.removeprefix("-")
    if key not in SORT_KEYS:
        raise ValueError(f"cannot sort by {sort!r}; sort by one of {', '.join(SORT_KEYS)} (prefix - for descending)")
    name = _SORT_COLUMNS["seen_at" if key == "seen" else key]
    column = F(name)
    if name in _NULLABLE:
        order = column.desc(nulls_last=True) if descending else column.asc(nulls_first=True)
    else:
        # No NULLS clause where there is no null: the grid id's index then serves the default page.
        order = column.desc() if descending else column.asc()
    # Node id breaks ties, always ascending, so pages stay stable. A node whose count matches but
    # whose slices would be refused (disks too big) comes right after the ones that offer too many.
    then = ()
    if key == "gap":
        phantom = Coalesce("phantom_slices", 0)  # unknown counts as none here: only a known phantom moves a node up
        then = (phantom.desc() if descending else phantom.asc(),)
    return nodes.annotate(nominal=NOMINAL, gap=NOMINAL - F("deployable")).order_by(order, *then, "grid_id")


def _closed_by_reason(closed: int, nodes: QuerySet[Node]) -> dict[str, int]:
    """The closed tier by reason: one query over the closed nodes, none when nothing is closed."""
    return closed_by_reason(nodes) if closed else {}


def _node_row(values: tuple) -> NodeRow:
    (
        node_id,
        pk,
        farm_id,
        farm_name,
        status,
        free,
        rented,
        deployed,
        failed,
        deployable,
        placeable,
        phantom,
        stale,
        reason,
        seen_at,
        policy,
        phantom_reasons,
        reported_at,
        closure,
        closure_detail,
        zos_cache_sru,
        pools_sru,
        grace_contracts,
        *held_stored,
    ) = values
    return NodeRow(
        node_id=node_id,
        pk=pk,
        farm_id=farm_id,
        farm_name=farm_name,
        status=status,
        nominal=free + rented + deployed + failed,
        deployable=deployable,
        free=free,
        rented=rented,
        deployed=deployed,
        failed=failed,
        placeable_now=placeable,
        phantom=phantom,
        stale=stale,
        stale_reason=reason,
        seen_at=seen_at,
        policy=policy,
        phantom_reasons=phantom_reasons or {},
        reported_at=reported_at,
        closure=closure,
        closure_detail=closure_detail,
        warnings=warnings_of_values(
            {"zos_cache_sru": zos_cache_sru, "pools_sru": pools_sru, "grace_contracts": grace_contracts}
        ),
        held_stored=tuple(held_stored),
    )
