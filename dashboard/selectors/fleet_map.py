"""The fleet map: one cell per node, grouped by farm, saying at a glance what room it has or what blocks it.

Every figure is a column of the node's row, kept by services.figures. A farm's cells are rendered by one
function (`farm_cells`) from its nodes' values, in one of two ways:

- kept (the whole map or one farm): each farm's cells are stored in its FarmTotals row,
  stamped with the `computed_at` of the totals they were made from and the render key of the code that
  made them. The totals are brought up to date first (selectors.farm_totals: any write to a farm's
  nodes gives it a new `computed_at`), so cells whose stamp or key differs are stale: their rows are
  locked in farm order and the cells rendered again from the nodes, all such farms in one query, read
  after the locks. A page then costs one row a farm, not one row a node.
- live (any other filter): one query of plain values over the matching nodes.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass
from functools import cache
from html import escape
from itertools import groupby
from operator import itemgetter

from django.db import connection, transaction
from django.db.models import Case, F, Q, TextField, Value, When
from django.urls import reverse

from dashboard.capacity import PHANTOM_REASONS
from dashboard.models import FarmTotals, Node
from dashboard.selectors.farm_totals import changed_farms_recompute
from dashboard.selectors.fleet import fleet_nodes, keeps_whole_farms

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
    "grid_id",
    "farm_id",
    "farm_name",
    "status",
    "slices_free",
    "slices_rented",
    "slices_deployed",
    "slices_failed",
    "deployable",
    "placeable_now",
    "phantom_slices",
    "phantom_reasons",
    "stale",
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
    others = dict(status=status, stale=stale, has_phantoms=has_phantoms, search=search, tier=tier)
    if keeps_whole_farms(**others):
        farms = _kept_farms(farm_id=farm_id)
    else:
        farms = _live_farms(fleet_nodes(farm_id=farm_id, **others))
    counts = dict.fromkeys(STATES, 0)
    for farm in farms:
        for state, n in farm.counts.items():
            counts[state] += n
    return FleetMap(farms=farms, nodes=sum(counts.values()), counts=counts)


def farm_cells(rows, href: tuple[str, str]) -> FarmCells:
    """One farm's cells from its nodes' values (`_FIELDS`, in node order); `href` is `node_href()`.
    The one place the cells' markup is written, for both ways of reading the map."""
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


def render_key(href: tuple[str, str]) -> str:
    """A short hash of everything in code that kept cells depend on: the rules and markup (their source),
    the node URL, the states' and phantom reasons' words. Cells stored under another key are made again."""
    made_of = [_rules_source(), list(href), list(STATES.items()), list(PHANTOM_REASONS.items())]
    return hashlib.sha256(json.dumps(made_of).encode()).hexdigest()[:16]


@cache
def _rules_source() -> str:
    def made_of(f) -> str:
        try:
            return inspect.getsource(f)
        except (OSError, TypeError):  # deployed without its source: the compiled code tells a change too
            return f.__code__.co_code.hex() + repr(f.__code__.co_consts)

    return "".join(made_of(f) for f in (cell_state, cell_label, farm_cells)) + repr(_BLOCKING_REASONS)


def _live_farms(nodes) -> list[FarmGroup]:
    href = node_href()
    rows = nodes.order_by("farm_id", "grid_id").values_list(*_FIELDS)
    return [_group(farm_id, farm_cells(farm, href)) for farm_id, farm in groupby(rows, key=itemgetter(1))]


def _kept_farms(*, farm_id: int | None) -> list[FarmGroup]:
    changed_farms_recompute()
    href = node_href()
    key = render_key(href)
    rows = FarmTotals.objects.filter(nodes__gt=0)
    if farm_id is not None:
        rows = rows.filter(farm_id=farm_id)
    kept = {farm: cells for farm, cells in _kept_cells(rows, key)}
    stale = [farm for farm, cells in kept.items() if cells is None]
    if stale:
        kept.update(_cells_remake(stale, href=href, key=key))
    # A farm emptied since its totals were read has no cell left to show.
    return [_group(farm, cells) for farm, cells in kept.items() if cells.counts]


def _kept_cells(rows, key: str, *also: str) -> list[tuple]:
    """(farm id, *also, its kept cells or None when they are stale) for each row, in farm order."""
    fresh = Q(map_cells_of=F("computed_at"), map_render_key=key)
    rows = rows.annotate(
        fresh_cells=Case(When(fresh, then=F("map_cells")), default=Value(None), output_field=TextField())
    )
    return [
        (farm, *others, None if html is None else FarmCells(farm_name=name, counts=counts, html=html))
        for farm, *others, name, counts, html in rows.order_by("farm_id").values_list(
            "farm_id", *also, "map_farm_name", "map_counts", "fresh_cells"
        )
    ]


def _cells_remake(farms: list[int], *, href: tuple[str, str], key: str) -> dict[int, FarmCells]:
    """The farms' cells made again from their nodes and kept, stamped with the totals they agree with."""
    with transaction.atomic():
        # The rows first, locked in farm order, as the totals' readers lock them; under the lock each
        # row's computed_at is the last committed, and another map reader may have made its cells meanwhile.
        locked = _kept_cells(FarmTotals.objects.select_for_update().filter(farm_id__in=farms), key, "computed_at")
        made = {farm: cells for farm, _stamp, cells in locked if cells is not None}
        stamps = {farm: stamp for farm, stamp, cells in locked if cells is None}
        if not stamps:
            return made
        # ...then the nodes, in a statement that starts after the locks: it sees every change committed
        # before them, so every change the totals of `computed_at` hold. A change committed later marks
        # its farm, and the totals reader that clears that mark waits for these locks, then gives the
        # farm a new computed_at: these cells are stale from then on, never taken for fresh.
        nodes = Node.objects.filter(farm_id__in=stamps).order_by("farm_id", "grid_id").values_list(*_FIELDS)
        rendered = {farm: farm_cells(rows, href) for farm, rows in groupby(nodes, key=itemgetter(1))}
        empty = FarmCells(farm_name="", counts={}, html="")
        for farm in stamps:
            made[farm] = rendered.get(farm, empty)
        _cells_store(made, stamps, key)
    return made


def _cells_store(made: dict[int, FarmCells], stamps: dict, key: str) -> None:
    # One statement, its rows as one JSON document: bulk_update builds a CASE branch a farm and a field
    # (about a second of Python at 200 farms), and psycopg quotes a text array's quotes one by one.
    rows = [
        {
            "farm_id": farm,
            "cells": made[farm].html,
            "counts": made[farm].counts,
            "farm_name": made[farm].farm_name,
            "cells_of": stamp.isoformat(),
        }
        for farm, stamp in stamps.items()
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {FarmTotals._meta.db_table} AS kept
            SET map_cells = made.cells, map_counts = made.counts, map_farm_name = made.farm_name,
                map_cells_of = made.cells_of, map_render_key = %s
            FROM json_to_recordset(%s::json)
                AS made (farm_id integer, cells text, counts jsonb, farm_name text, cells_of timestamptz)
            WHERE kept.farm_id = made.farm_id
            """,
            [key, json.dumps(rows)],
        )


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


def cell_label(
    node_id, farm_id, state, status, free, rented, deployed, failed, deployable, placeable, phantom, reasons, stale
) -> str:
    nominal = free + rented + deployed + failed
    parts = [f"Node {node_id}, farm {farm_id}, {status}", f"{nominal} → {deployable} slices", f"{free} free"]
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
