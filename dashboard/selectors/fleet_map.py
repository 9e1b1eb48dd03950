"""The fleet map: one cell per node, grouped by farm, saying at a glance what room it has or what blocks it.

One query of plain values (no model objects) whatever the fleet size, filtered like the table
(selectors.fleet.fleet_nodes). Every figure is a column of the node's row, kept by services.figures.
A farm's cells are rendered by one function (`farm_cells`) from its nodes' values.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from itertools import groupby
from operator import itemgetter

from django.urls import reverse

from dashboard.capacity import PHANTOM_REASONS
from dashboard.selectors.fleet import fleet_nodes

# What a cell can say, worst first; a node shows the first that holds. The words are the legend's.
STATES = {
    "down": "down",
    "standby": "on standby (can be woken)",
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

_FIELDS = (
    "node_id", "farm_id", "farm_name", "status", "slices_free", "slices_rented", "slices_deployed", "slices_failed",
    "deployable", "placeable_now", "phantom_slices", "phantom_reasons", "stale",
)  # fmt: skip


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

    @property
    def legend(self) -> list[tuple[str, str, int]]:
        """(state, words, nodes) for every state, in STATES' order."""
        return [(state, words, self.counts[state]) for state, words in STATES.items()]


def fleet_map(
    *,
    farm_id: int | None = None,
    status: str | None = None,
    stale: bool | None = None,
    has_phantoms: bool | None = None,
    search: str | None = None,
    tier: str | None = None,
) -> FleetMap:
    """The nodes the filters keep (as selectors.fleet.fleet_nodes takes them), by farm id then node id."""
    nodes = fleet_nodes(farm_id=farm_id, status=status, stale=stale, has_phantoms=has_phantoms, search=search, tier=tier)
    farms = _live_farms(nodes)
    counts = dict.fromkeys(STATES, 0)
    for farm in farms:
        for state, n in farm.counts.items():
            counts[state] += n
    return FleetMap(farms=farms, nodes=sum(counts.values()), counts=counts)


def farm_cells(rows, href: tuple[str, str]) -> FarmCells:
    """One farm's cells from its nodes' values (`_FIELDS`, in node order); `href` is `node_href()`.
    The one place the cells' markup is written."""
    before, after = href
    farm_name, counts, links = "", {}, []
    for node_id, farm_id, name, *figures in rows:
        farm_name = farm_name or name
        state = cell_state(*figures)
        counts[state] = counts.get(state, 0) + 1
        label = escape(cell_label(node_id, farm_id, state, *figures))
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
    rows = nodes.order_by("farm_id", "node_id").values_list(*_FIELDS)
    return [_group(farm_id, farm_cells(farm, href)) for farm_id, farm in groupby(rows, key=itemgetter(1))]


def _group(farm_id: int, cells: FarmCells) -> FarmGroup:
    return FarmGroup(farm_id=farm_id, farm_name=cells.farm_name, counts=cells.counts, cells_html=cells.html)


def cell_state(status, free, rented, deployed, failed, deployable, placeable, phantom, reasons, stale) -> str:
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


def cell_label(node_id, farm_id, state, status, free, rented, deployed, failed, deployable, placeable, phantom, reasons, stale) -> str:
    nominal = free + rented + deployed + failed
    parts = [f"Node {node_id}, farm {farm_id}, {status}", f"{nominal} → {deployable} slices", f"{free} free"]
    if placeable is None:
        parts.append("never prechecked")
    else:
        parts.append(f"{placeable} placeable now")
        if phantom:
            why = ", ".join(f"{PHANTOM_REASONS[r]} {n}" for r, n in (reasons or {}).items() if n and r in PHANTOM_REASONS)
            parts.append(f"{phantom} phantom" + (f" ({why})" if why else ""))
    if stale:
        parts.append("stale catalog")
    return ": ".join([parts[0], "; ".join(parts[1:])]) + f" — {STATES[state]}"
