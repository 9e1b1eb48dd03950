"""The fleet map: one cell per node, grouped by farm, saying at a glance what room it has or what blocks it.

Every figure is a column of the node's row, kept by figures.services.figures. A farm's cells are rendered by one
function (`farm_cells`) from its nodes' values, in one of two ways:

- kept (the whole map or one farm): a farm's rendered cells are kept in Django's cache (the
  "fleet-map" alias), keyed on the farm and the `computed_at` of its FarmTotals row: any write to a
  farm's nodes marks it changed, and its next refresh (figures.services.farm_totals) gives it a new
  `computed_at`, so a key names one state of the farm's nodes. A farm marked changed and not refreshed
  yet is rendered live, and not kept. A page then costs one row a farm, not one row a node.
- live (any other filter): one query of plain values over the matching nodes.

A farm with a live hold (deployments.selectors.holds) is rendered live and never kept: a hold ends by itself, so no
key could name the farm's state. Its held slices are not free in its cells (one query for the holds).

Nothing here writes to the database: the cache is the only thing a read fills.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from html import escape
from itertools import groupby
from operator import itemgetter

from django.conf import settings
from django.core.cache import caches
from django.urls import reverse
from django.utils import timezone

from dashboard.capacity import CLOSURE_REASONS, PHANTOM_REASONS, Closure
from dashboard.deployments.selectors.holds import held_by_grid_id, holds_signature
from dashboard.figures.selectors.farm_totals import farms_behind
from dashboard.figures.selectors.fleet import NO_FILTERS, ROW_FIGURES, FleetFilters
from dashboard.models import FarmTotals, Node
from dashboard.nodes.selectors.farm_ips import farms_ipv4_read

# What a cell can say, worst first; a node shows the first that holds. The words are the legend's.
STATES = {
    "withheld": "withheld (maintenance or quarantine)",
    "down": "down",
    "standby": "on standby (can be woken)",
    # Any other closure (capacity.closures), each named: a new reason joins the legend with no edit.
    "closed": "closed: "
    + ", ".join(r.label for key, r in CLOSURE_REASONS.items() if key not in ("withheld", "down", "standby")),
    "memory": "offers slices memory refuses",
    "disk": "offers slices its disk cannot hold",
    "pool": "offers slices no SSD pool holds",
    "stale": "catalog differs from the policy",
    "unknown": "never prechecked",
    "full": "no free slice placeable",
    "some": "under half its slices placeable",
    "most": "half or more placeable",
}
_BLOCKING_REASONS = ("memory", "disk", "pool")
# The cache alias the rendered cells are kept in (settings.CACHES), and for how long an unread farm's stay.
CACHE = "fleet-map"
CACHE_SECONDS = 24 * 3600

_FIELDS = (
    "grid_id",
    "farm_id",
    "farm_name",
    *ROW_FIGURES,
    "phantom_reasons",
    "stale",
    "closure",
    "closure_detail",
)


@dataclass(frozen=True)
class FarmCells:
    """One farm as the map shows it: its name, its nodes by state, its cells."""

    farm_name: str  # the first name its nodes give, in node order
    counts: dict[str, int]  # state -> nodes
    html: str  # one link a node, in node order


@dataclass(frozen=True)
class FarmGroup:
    farm_id: int
    farm_name: str
    counts: dict[str, int]  # state -> nodes
    cells_html: str  # trusted HTML (farm_cells'), marked safe once for the whole map by the map_farms tag

    @property
    def nodes(self) -> int:
        return sum(self.counts.values())

    @property
    def summary(self) -> str:
        """'3 nodes · 1 down · 2 most': the farm's heading, the states no node is in left out, in STATES' order."""
        nodes = self.nodes
        states = "".join(f" · {self.counts[state]} {state}" for state in STATES if self.counts.get(state))
        return f"{nodes} node{'' if nodes == 1 else 's'}{states}"


@dataclass(frozen=True)
class FleetMap:
    farms: list[FarmGroup]
    nodes: int
    counts: dict[str, int]  # state -> nodes, over the whole map
    # Farms shown by their counts only, each farm's cells one click away (issue 37: 2.55 MB of cells at
    # 10,000 nodes); a map of one farm, or of up to MAP_CELLS_INLINE_NODES nodes, shows every cell.
    collapsed: bool = False
    # Farm id -> its public IPv4 bound in words (free IPs, IPv4 slices), for farms whose IPs were read.
    ipv4: dict[int, str] = field(default_factory=dict)

    @property
    def legend(self) -> list[tuple[str, str, int]]:
        """(state, words, nodes) for every state, in STATES' order."""
        return [(state, words, self.counts[state]) for state, words in STATES.items()]


def fleet_map(*, filters: FleetFilters = NO_FILTERS) -> FleetMap:
    """The nodes the filters keep (figures.selectors.fleet.FleetFilters), by farm id then node id."""
    farm_id = filters.farm_id
    farms = _kept_farms(farm_id=farm_id) if filters.whole_farms else _live_farms(filters.nodes())
    counts = dict.fromkeys(STATES, 0)
    for farm in farms:
        for state, n in farm.counts.items():
            counts[state] += n
    nodes = sum(counts.values())
    inline = settings.MAP_CELLS_INLINE_NODES
    collapsed = farm_id is None and len(farms) > 1 and nodes > inline
    # One query for every farm's tooltip, whatever the fleet (not kept with the cells: holds and IPs move it).
    bounds = farms_ipv4_read(None if farm_id is None else [farm_id])
    shown = {farm.farm_id for farm in farms}
    ipv4 = {farm: bound.words for farm, bound in bounds.items() if farm in shown}
    return FleetMap(farms=farms, nodes=nodes, counts=counts, collapsed=collapsed, ipv4=ipv4)


def farm_cells(rows, href: tuple[str, str], held: dict[int, int] | None = None) -> FarmCells:
    """One farm's cells from its nodes' values (`_FIELDS`, in node order); `href` is `node_href()`;
    `held`, grid node id -> free slices held for a buyer now (off offer: neither free nor placeable).
    The one place the cells' markup is written, for both ways of reading the map."""
    before, after = href
    farm_name, counts, links = "", {}, []
    for node_id, farm_id, name, *figures in rows:
        farm_name = farm_name or name
        n = min((held or {}).get(node_id, 0), figures[1])
        if n:  # status, free, ..., placeable: the held slices taken off what is on offer (not off the catalog)
            figures[1] -= n
            figures[6] = None if figures[6] is None else max(figures[6] - n, 0)
        state = cell_state(*figures)
        counts[state] = counts.get(state, 0) + 1
        label = escape(cell_label(node_id, farm_id, state, *figures, held=n))
        links.append(
            f'<a class="cell s-{state}" href="{before}{node_id}{after}" data-node="{node_id}" '
            f'data-state="{state}" aria-label="{label}"></a>'
        )
    return FarmCells(farm_name=farm_name, counts=counts, html="".join(links))


def node_href() -> tuple[str, str]:
    """A node page's URL as (before the id, after it)."""
    marker = "987654321"
    before, _, after = reverse("node", args=[marker]).partition(marker)
    return before, after


def _live_farms(nodes) -> list[FarmGroup]:
    href = node_href()
    rows = nodes.order_by("farm_id", "grid_id").values_list(*_FIELDS)
    held = held_by_grid_id(now=timezone.now(), nodes=nodes)
    return [_group(farm_id, farm_cells(farm, href, held)) for farm_id, farm in groupby(rows, key=itemgetter(1))]


def _kept_farms(*, farm_id: int | None) -> list[FarmGroup]:
    now = timezone.now()
    # A farm's cells change when one of its holds is made, released or ends by time, with no write:
    # its kept cells are keyed on its nodes' held counts at `now` too, so a hold's end is a new key.
    signatures = holds_signature(now=now, farm_ids=None if farm_id is None else [farm_id])
    held_farms = set(signatures)
    behind = farms_behind(farm_id=farm_id)
    rows = FarmTotals.objects.filter(nodes__gt=0).exclude(farm_id__in=behind)
    if farm_id is not None:
        rows = rows.filter(farm_id=farm_id)
    keys = {
        farm: _cache_key(farm, stamp, signatures.get(farm, ""))
        for farm, stamp in rows.values_list("farm_id", "computed_at")
    }
    store = caches[CACHE]
    found = store.get_many(list(keys.values()))
    cells = {farm: found[key] for farm, key in keys.items() if key in found}
    to_make = sorted({*behind, *(farm for farm in keys if farm not in cells)})
    if to_make:
        made = _cells_made(to_make, now=now, held_farms=held_farms)
        cells.update(made)
        # Kept only under a refreshed farm's key: a farm behind has no key that names its state yet.
        store.set_many({keys[farm]: made[farm] for farm in made if farm in keys}, timeout=CACHE_SECONDS)
    # A farm emptied since its totals were read has no cell left to show.
    return [_group(farm, cells[farm]) for farm in sorted(cells) if cells[farm].counts]


def _cache_key(farm_id: int, computed_at, holds: str = "") -> str:
    # The live holds' ids can be many: hashed, so the key stays short (memcached's limit is 250).
    held = hashlib.sha256(holds.encode()).hexdigest()[:16] if holds else "-"
    return f"fleet-map:{farm_id}:{computed_at.isoformat() if computed_at else '-'}:{held}"


def _cells_made(farms: list[int], *, now, held_farms: set[int]) -> dict[int, FarmCells]:
    """These farms' cells made from their nodes now (a farm with no node left: no cell)."""
    href = node_href()
    nodes = Node.objects.filter(farm_id__in=farms).order_by("farm_id", "grid_id").values_list(*_FIELDS)
    with_holds = held_farms.intersection(farms)
    held = held_by_grid_id(now=now, farm_ids=with_holds) if with_holds else {}
    made = {farm: farm_cells(rows, href, held) for farm, rows in groupby(nodes, key=itemgetter(1))}
    empty = FarmCells(farm_name="", counts={}, html="")
    return {farm: made.get(farm, empty) for farm in farms}


def _group(farm_id: int, cells: FarmCells) -> FarmGroup:
    return FarmGroup(farm_id=farm_id, farm_name=cells.farm_name, counts=cells.counts, cells_html=cells.html)


def cell_state(
    status, free, rented, deployed, failed, deployable, placeable, phantom, reasons, stale, closure="", detail=""
) -> str:
    if closure in STATES:  # a closure the map has a colour of its own for (withheld, down, standby)
        return closure
    if closure:  # every other closure: nothing placeable until it opens (the label says which)
        return "closed"
    if status in ("down", "standby"):
        return status
    reasons = reasons or {}
    blocking = [(reasons.get(r, 0), r) for r in _BLOCKING_REASONS if reasons.get(r, 0)]
    if blocking:
        return max(blocking)[1]  # the reason that refuses most of its slices
    if stale:
        return "stale"
    if placeable is None:
        return "unknown"
    if not placeable:
        return "full"
    # Placeable now against what the node can host at once: the share of it still to be had.
    return "most" if 2 * placeable >= max(deployable, 1) else "some"


def cell_label(
    node_id,
    farm_id,
    state,
    status,
    free,
    rented,
    deployed,
    failed,
    deployable,
    placeable,
    phantom,
    reasons,
    stale,
    closure="",
    detail="",
    *,
    held=0,
) -> str:
    """`free`: on offer; `held`: free slices a buyer holds (still in the catalog, so in its nominal count)."""
    nominal = free + held + rented + deployed + failed
    parts = [f"Node {node_id}, farm {farm_id}, {status}", f"{nominal} → {deployable} slices", f"{free} free"]
    if held:
        parts.append(f"{held} held for a buyer")
    if closure:
        # Said once, with its detail: its phantom reasons and its colour would only repeat it.
        closed = Closure(closure, detail)
        said = f"the node {closed.what}" if detail or "{detail}" not in closed.reason.what else closed.label
        parts.append(f"none placeable: {said}")
        if stale:
            parts.append("stale catalog")
        return ": ".join([parts[0], "; ".join(parts[1:])])
    if placeable is None:
        parts.append("never prechecked")
    else:
        parts.append(f"{placeable} placeable now")
        if phantom:
            why = ", ".join(
                f"{PHANTOM_REASONS[r]} {n}" for r, n in (reasons or {}).items() if n and r in PHANTOM_REASONS
            )
            parts.append(f"{phantom} phantom" + (f" ({why})" if why else ""))
    if stale:
        parts.append("stale catalog")
    return ": ".join([parts[0], "; ".join(parts[1:])]) + f" — {STATES[state]}"
