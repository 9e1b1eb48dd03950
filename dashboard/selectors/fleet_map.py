"""The fleet map: one cell per node, grouped by farm, saying at a glance what room it has or what blocks it.

One query of plain values (no model objects) whatever the fleet size, filtered like the table
(selectors.fleet.fleet_nodes). Every figure is a column of the node's row, kept by services.figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
class MapCell:
    node_id: int
    state: str  # a key of STATES
    label: str  # the node's figures in words: the tooltip and what a screen reader says


@dataclass
class FarmGroup:
    farm_id: int
    farm_name: str
    cells: list[MapCell] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # state -> nodes

    @property
    def summary(self) -> list[tuple[str, int]]:
        """(state, nodes) in STATES' order, the states no node is in left out."""
        return [(state, self.counts[state]) for state in STATES if self.counts.get(state)]


@dataclass(frozen=True)
class FleetMap:
    farms: list[FarmGroup]
    nodes: int
    counts: dict[str, int]  # state -> nodes, over the whole map

    @property
    def legend(self) -> list[tuple[str, str, int]]:
        """(state, words, nodes) for every state, in STATES' order."""
        return [(state, words, self.counts[state]) for state, words in STATES.items()]


def fleet_map(**filters) -> FleetMap:
    """The nodes the filters keep (as selectors.fleet.fleet_nodes takes them), by farm id then node id."""
    rows = fleet_nodes(**filters).order_by("farm_id", "node_id").values_list(*_FIELDS)
    farms: list[FarmGroup] = []
    counts = dict.fromkeys(STATES, 0)
    for row in rows:
        node_id, farm_id, farm_name = row[0], row[1], row[2]
        if not farms or farms[-1].farm_id != farm_id:
            farms.append(FarmGroup(farm_id=farm_id, farm_name=farm_name))
        farm = farms[-1]
        farm.farm_name = farm.farm_name or farm_name
        state = cell_state(*row[3:])
        farm.cells.append(MapCell(node_id=node_id, state=state, label=cell_label(node_id, farm_id, state, *row[3:])))
        farm.counts[state] = farm.counts.get(state, 0) + 1
        counts[state] += 1
    return FleetMap(farms=farms, nodes=sum(counts.values()), counts=counts)


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
