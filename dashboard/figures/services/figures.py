"""A node's catalog figures, kept on its row: slice counts, deployable slices, stale and why.

The fleet overview sorts, filters and totals thousands of nodes on every request; computing
these there meant grouping every slice and carving every node each time. They change only
when a catalog, a node's capacity or a policy changes, so the services that make those
changes write in a figures.services.node_writes block, which stores them in the same transaction, and the
overview reads plain columns. Only that block calls `figures_refresh` and `nodes_lock` (tests/test_architecture.py).

One pipeline: the inputs read once (`figures_inputs`: three queries for any number of nodes, the nodes,
their slices grouped, the policies; a fourth for the memory lessons when a node has one), the figures
computed from plain values (figures.node_figures, no database), one store (`_store`). `figures_compute`
is the truth. Nodes of the same shape (size, pools, policy, occupied slices, how they were carved, free
slices, the lesson) share one carve and one stale verdict.
`manage.py figures_refresh` rewrites every node's figures, for rows changed by hand.

"Deployable" and "placeable now" count only the slices a headline may promise: those whose odds
(capacity.odds, from the node's memory lesson and its uncertainty, or its build's prior where the
build never refused, weighted by the deployments ZOS took: lessons.selectors.odds) are at or above SLICE_MIN_ODDS.
The catalog keeps the others (uncertain: offered at their odds, never promised).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from dashboard.figures.node_figures import (
    FIGURE_FIELDS,
    NO_SLICES,
    NODE_VALUES,
    FiguresInputs,
    FleetFigures,
    NodeFigures,
    figures_row,
)
from dashboard.figures.selectors.slices_grouped import slices_grouped
from dashboard.figures.services.farm_totals import farm_totals_refresh_on_commit
from dashboard.figures.services.held_figures import held_store
from dashboard.lessons.selectors.odds import belief_key, beliefs_for, lesson_fits, unread_among
from dashboard.models import Node
from dashboard.policies.selectors.policy_book import policy_book
from dashboard.rows import rows_update

# Nodes per UPDATE when many change at once (a policy edit, the repair command).
STORE_BATCH = 500
# Each figure's column as rows_update takes it, the primary key first (phantom_reasons goes as JSON text).
_COLUMNS = (
    ("id", "bigint"),
    *((name, "integer") for name in FIGURE_FIELDS[:5]),
    ("stale", "boolean"),
    *((name, "text") for name in FIGURE_FIELDS[6:10]),
    ("room_mru", "bigint"),
    ("room_sru", "bigint"),
    ("pools_shape", "text"),
    ("placeable_now", "integer"),
    ("phantom_slices", "integer"),
    ("phantom_reasons", "text"),
)
assert tuple(name for name, _type in _COLUMNS[1:]) == FIGURE_FIELDS


def figures_refresh(node_pks: Iterable[int], *, locked: bool = False) -> int:
    """Recompute and store these nodes' figures; the number of nodes whose figures changed.

    figures.services.node_writes calls it on a block's exit, in the transaction that changed their slices, capacity
    or policy; the repair (figures_refresh_all) and the suite call it alone. It locks the nodes (in pk order, as every caller locks a node before its slices), so two
    writers of one node store figures in turn, each from what the other committed; `locked`
    says the caller holds those locks already in this transaction.
    """
    pks = sorted(set(node_pks))
    if not pks:
        return 0
    with transaction.atomic():
        changed = 0
        for start in range(0, len(pks), STORE_BATCH):
            batch = pks[start : start + STORE_BATCH]
            if not locked:
                nodes_lock(batch)
            changed += _store(Node.objects.filter(pk__in=batch))
            # A slice rented, deployed or carved away under a hold no longer counts as held.
            held_store(batch)
        # Every service that changes a node calls this in its transaction: the farm totals follow on commit.
        farm_totals_refresh_on_commit()
    return changed


def nodes_lock(node_pks: Iterable[int]) -> None:
    """Lock these nodes' rows (in pk order) until the transaction ends.

    Writers lock a node before its slices, as re-register does: taking a slice's row first and
    the node afterwards (for its figures) could deadlock with a re-register of the same node.
    """
    list(Node.objects.select_for_update().filter(pk__in=list(node_pks)).order_by("pk").values_list("pk", flat=True))


def figures_refresh_all(nodes: QuerySet[Node] | None = None) -> int:
    """figures_refresh for every node (or those of `nodes`), a batch per transaction."""
    pks = list((nodes if nodes is not None else Node.objects.all()).order_by("pk").values_list("pk", flat=True))
    return sum(figures_refresh(pks[start : start + STORE_BATCH]) for start in range(0, len(pks), STORE_BATCH))


def figures_compute(nodes: QuerySet[Node], *, pools: dict | None = None) -> dict[int, NodeFigures]:
    """Node pk -> its figures from its slices and effective policy now; three queries. `pools` (pk -> SSD sizes,
    used, zos-cache bound): pools not stored yet, judged before their writer locks the node (memoised)."""
    return {pk: figures for pk, (figures, _stored) in _computed(nodes, pools).items()}


def _store(nodes: QuerySet[Node]) -> int:
    rows = [
        (pk, *(json.dumps(v) if isinstance(v, dict) else v for v in now))
        for pk, (figures, stored) in _computed(nodes).items()
        if (now := figures_row(figures)) != stored
    ]
    # One UPDATE from arrays: bulk_update's CASE WHEN took 11.6 s for 10,000 nodes, one UPDATE a node
    # 1.5 s but fired the farm totals trigger (figures.services.farm_totals_trigger) once a node; this, once.
    rows_update(Node, _COLUMNS, rows, json=("phantom_reasons",))
    return len(rows)


def _computed(nodes: QuerySet[Node], pools: dict | None = None) -> dict[int, tuple[NodeFigures, tuple]]:
    """Node pk -> (figures now, figures stored) for the nodes of the queryset."""
    rows = _node_rows(nodes, pools)
    if not rows:
        return {}
    fleet = FleetFigures(figures_inputs(rows, slices=slices_grouped(nodes, pks=[row.pk for row in rows])))
    return {row.pk: fleet.node(row) for row in rows}


def figures_inputs(rows: list, *, slices: Mapping[int, tuple]) -> FiguresInputs:
    """What the figures of these rows' nodes are computed from beside the rows: their lessons' fits, the
    beliefs their odds are judged by, the policies (two or three queries for any number of nodes)."""
    book = policy_book()
    unread = unread_among(
        (row.pk, row.memory_lesson_id, row.zos_version, _running(slices.get(row.pk, NO_SLICES))) for row in rows
    )
    return FiguresInputs(
        slices=slices,
        fits=lesson_fits(row.memory_lesson_id for row in rows),
        beliefs=beliefs_for(
            {belief_key(row.memory_lesson_id, row.zos_version, unread=row.pk in unread) for row in rows}
        ),
        by_node=book.by_node,
        by_farm=book.by_farm,
        fleet_policy=book.for_farm(None),
        min_odds=settings.SLICE_MIN_ODDS,
        unread=unread,
    )


def _node_rows(nodes: QuerySet[Node], pools: dict | None) -> list:
    """The nodes' NODE_VALUES as named rows, with `pools` (figures_compute) in place of the stored pools."""
    # The pools as JSON text: a shape key as it is, parsed once per shape.
    rows = list(
        nodes.order_by().annotate(pools_text=Cast("pools_sru", TextField())).values_list(*NODE_VALUES, named=True)
    )
    if not pools:
        return rows
    return [
        row._replace(
            pools_text=json.dumps(pools[row.pk][0]), pools_used=pools[row.pk][1], zos_cache_sru=pools[row.pk][2]
        )
        if row.pk in pools
        else row
        for row in rows
    ]


def _running(grouped: tuple) -> int:
    """The VMs a node runs, from its slices grouped (figures.selectors.slices_grouped): rented and deployed."""
    _free, rented, deployed, *_rest = grouped
    return rented + deployed
