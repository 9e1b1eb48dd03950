"""The figures of new nodes before they are stored: a page of new nodes is written once, figures and all.

figures_refresh reads a node's row and its slices back from the database and stores its figures by an
UPDATE. For a page of nodes being registered both are known before the insert (the row built, the
catalog its carve's free slices), so the same computation (figures.node_figures.FleetFigures) runs on the
rows in memory and the nodes are inserted with their figures: inserting 100 wide rows and then
rewriting them with their index entries was a fifth of onboarding's work (issue 43).
"""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Sequence

from dashboard import capacity
from dashboard.figures.node_figures import FIGURE_FIELDS, NO_SLICES, NODE_VALUES, FleetFigures, figures_row
from dashboard.figures.services.figures import figures_inputs
from dashboard.models import Node

# A node's NODE_VALUES in memory, as figures' _node_rows reads them from the database.
_Row = namedtuple("_Row", NODE_VALUES)


def figures_of_new(nodes: Sequence[Node], carves: Sequence[capacity.Carve]) -> None:
    """Set on each new node (not inserted yet, its primary key allocated) the figures figures_refresh would
    store once it and its carve's free slices are. Each node's catalog is its carve's `new_slices` free
    slices (registration's catalog) and it has no lesson yet: memory_lessons_for_new, after the insert,
    refreshes the figures of the nodes it gives one, as it does after any registration."""
    if not nodes:
        return
    rows = [
        _Row(*(_pools_text(node) if name == "pools_text" else getattr(node, name) for name in NODE_VALUES))
        for node in nodes
    ]
    slices = {node.pk: _catalog_grouped(carve) for node, carve in zip(nodes, carves, strict=True)}
    fleet = FleetFigures(figures_inputs(rows, slices=slices))
    for node, row in zip(nodes, rows, strict=True):
        for name, value in zip(FIGURE_FIELDS, figures_row(fleet.node(row)[0]), strict=True):
            setattr(node, name, value)


def _pools_text(node: Node) -> str | None:
    """The pools as figures reads them: PostgreSQL's text of the JSON list, which json.dumps writes alike
    (figures.services.figures.figures_compute stands pools not stored yet in the same way)."""
    return None if node.pools_sru is None else json.dumps(node.pools_sru)


def _catalog_grouped(carve: capacity.Carve) -> tuple:
    """A new catalog as figures.selectors.slices_grouped groups it once stored: `new_slices` free slices of one size."""
    count = carve.new_slices
    if not count:
        return NO_SLICES
    size = (carve.slice.cru, carve.slice.mru, carve.slice.sru)
    return (count, 0, 0, 0, (((size, count),), ()), (size,) * count)
