"""A node's catalog figures, kept on its row: slice counts, deployable slices, stale and why.

The fleet overview sorts, filters and totals thousands of nodes on every request; computing
these there meant grouping every slice and carving every node each time. They change only
when a catalog, a node's capacity or a policy changes, so the services that make those
changes write in a figures.services.node_writes block, which stores them in the same transaction, and the
overview reads plain columns. Only that block calls `figures_refresh` and `nodes_lock` (tests/test_architecture.py).

`figures_compute` is the truth: three queries for any number of nodes (the nodes, their
slices grouped, the policies; a fourth for the memory lessons when a node has one). Nodes of
the same shape (size, pools, policy, occupied slices, how they were carved, free slices, the
lesson) share one carve and one stale verdict.
`manage.py figures_refresh` rewrites every node's figures, for rows changed by hand.

"Deployable" and "placeable now" count only the slices a headline may promise: those whose odds
(capacity.odds, from the node's memory lesson and its uncertainty, or its build's prior where the
build never refused, weighted by the deployments ZOS took: lessons.selectors.odds) are at or above SLICE_MIN_ODDS.
The catalog keeps the others (uncertain: offered at their odds, never promised).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from dashboard import capacity
from dashboard.figures.closure import CLOSURE_FIELDS, closure_of_values
from dashboard.figures.selectors.slices_grouped import slices_grouped
from dashboard.figures.services.farm_totals import farm_totals_refresh_on_commit
from dashboard.figures.services.figures_shapes import ShapeVerdict, placeable_on_reading, pools_shape_key
from dashboard.figures.services.held_figures import held_store
from dashboard.lessons.selectors.odds import (
    belief_key,
    beliefs_for,
    has_own_residual,
    lesson_fits,
    sure_free_slices,
    sure_new_slices,
)
from dashboard.models import Node
from dashboard.policies.selectors.policy_book import policy_book
from dashboard.rows import rows_update

# The Node columns this module owns, in NodeFigures' order.
FIGURE_FIELDS = (
    "slices_free",
    "slices_rented",
    "slices_deployed",
    "slices_failed",
    "deployable",
    "stale",
    "stale_reason",
    "effective_policy",
    "closure",
    "closure_detail",
    "room_mru",
    "room_sru",
    "pools_shape",
    "placeable_now",
    "phantom_slices",
    "phantom_reasons",
)
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


@dataclass(frozen=True)
class NodeFigures:
    slices_free: int
    slices_rented: int
    slices_deployed: int
    slices_failed: int
    # How many slices the node can host at once: what its policy carves on it with its rented
    # and deployed slices kept, under ZOS's placement and what its refusals taught. The one
    # meaning of "deployable" on every page, total, export and command.
    deployable: int
    stale: bool
    stale_reason: str  # "" when current
    effective_policy: str  # "name vN"
    # Why the node offers nothing now (capacity.closures; "" open), decided by dashboard.figures.closure.
    closure: str
    closure_detail: str
    # For the placement answer's first cut (Node's comment): None without a reading.
    room_mru: int | None
    room_sru: int | None
    pools_shape: str  # Node.NOT_WORKED_OUT without a reading
    # The free slices placed one after another (by index) on the node's last reading, under its
    # policy, pools and lessons: the same precheck as precheck_run, so a policy change or a
    # lesson moves them at once. Kept as stored while the node has no reading (None if never read).
    placeable_now: int | None
    phantom_slices: int | None
    phantom_reasons: dict


# NodeFigures as a tuple in FIGURE_FIELDS' order: dataclasses.astuple deep-copies every value (the
# phantom reasons' dict too), a third of storing a page of new nodes' figures (issue 43).
figures_row = operator.attrgetter(*FIGURE_FIELDS)


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


NODE_VALUES = (
    "pk",
    "farm_id",
    "light",
    "total_cru",
    "total_mru",
    "total_sru",
    "total_hru",
    "pools_text",
    "pools_used",
    "zos_cache_sru",
    "carved_pools_known",
    "carved_policy_name",
    "carved_policy_version",
    "carved_slice_sru",
    "hidden_mru_per_vm",
    "pool_room_below",
    "pool_room_below_used_sru",
    "zos_own_mru",
    "memory_lesson_id",
    "zos_version",
    "used_cru",
    "used_mru",
    "used_sru",
    "used_hru",
    *CLOSURE_FIELDS,
    *FIGURE_FIELDS,
)
_CLOSURE_AT = NODE_VALUES.index(CLOSURE_FIELDS[0])
_STORED_AT = len(NODE_VALUES) - len(FIGURE_FIELDS)
# A node without slices, as slices_grouped would group it.
NO_SLICES = (0, 0, 0, 0, ((), ()), ())


def _computed(nodes: QuerySet[Node], pools: dict | None = None) -> dict[int, tuple[NodeFigures, tuple]]:
    """Node pk -> (figures now, figures stored) for the nodes of the queryset."""
    rows = _node_rows(nodes, pools)
    if not rows:
        return {}
    fleet = FleetFigures(nodes, rows)
    return {row.pk: fleet.node(row) for row in rows}


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


class _ReadingCheck(NamedTuple):
    """What a node's precheck on its reading is judged by, beside its row."""

    key: tuple  # the node's shape
    policy: capacity.Policy
    closed: capacity.Closure | None
    observed: capacity.Observed
    cache: int | None
    fit: capacity.OverheadFit | None  # the node's memory lesson's, if it has one
    light: bool = False  # a ZOS-light node: unreported, its pools may be partitions (capacity.layouts)


class _OnReading(NamedTuple):
    """The figures a live reading decides, in NodeFigures' order."""

    room_mru: int | None
    room_sru: int | None
    pools_shape: str
    placeable_now: int | None
    phantom_slices: int | None
    phantom_reasons: dict


class FleetFigures:
    """What one `_computed` call reads once and the memos its nodes share: the nodes of one shape share a
    carve and a stale verdict, the nodes of one shape on one reading a precheck."""

    def __init__(self, nodes: QuerySet[Node], rows: list, *, slices: dict[int, tuple] | None = None):
        # `slices`: the nodes' slices grouped as slices_grouped groups them, when they are not stored yet.
        self.slices = slices if slices is not None else slices_grouped(nodes, pks=[row.pk for row in rows])
        self.fits = lesson_fits(row.memory_lesson_id for row in rows)
        # What each node's odds are judged by: its lesson, or its build's prior (lessons.selectors.odds.beliefs_for).
        self.beliefs = beliefs_for({belief_key(row.memory_lesson_id, row.zos_version) for row in rows})
        self.min_odds = settings.SLICE_MIN_ODDS
        book = policy_book()
        self.by_node, self.by_farm, self.fleet_policy = book.by_node, book.by_farm, book.for_farm(None)
        self.shapes: dict[tuple, ShapeVerdict] = {}
        self.checks: dict[tuple, tuple] = {}
        self.slice_order = {pk: (grouped[5], grouped[4][1]) for pk, grouped in self.slices.items()}

    def node(self, row) -> tuple[NodeFigures, tuple]:
        """(figures now, figures stored) of one node's row."""
        pk, pools_text, lesson_id, stored = row.pk, row.pools_text, row.memory_lesson_id, tuple(row[_STORED_AT:])
        closed = closure_of_values(dict(zip(CLOSURE_FIELDS, row[_CLOSURE_AT:_STORED_AT], strict=True)))
        free, rented, deployed, failed, slice_key, _free_order = self.slices.get(pk, NO_SLICES)
        policy = self.by_node.get(pk) or self.by_farm.get(row.farm_id) or self.fleet_policy  # as PolicyBook.for_node
        observed = capacity.observed_now(
            hidden_mru_per_vm=row.hidden_mru_per_vm,
            pool_room_below=row.pool_room_below,
            bound_used_sru=row.pool_room_below_used_sru,
            used_sru=row.used_sru,
            zos_own_mru=row.zos_own_mru,
            zos_version=row.zos_version,
        )
        known = pools_text and pools_text not in ("null", "[]")
        cache = row.zos_cache_sru if known else None  # as Node.zos_cache
        light = bool(row.light) and not known  # a ZOS-light node's unreported pools may be partitions
        # The book hands out one object per policy for this call, so its id stands for it
        # (hashing the frozen policy for every node would cost more than the lookup saves).
        key = (
            row.total_cru,
            row.total_mru,
            row.total_sru,
            row.total_hru,
            pools_text,
            cache,
            id(policy),
            row.carved_policy_name,
            row.carved_policy_version,
            row.carved_slice_sru,
            row.carved_pools_known,
            slice_key,
            observed,
            belief_key(lesson_id, row.zos_version),
            pk if has_own_residual(self.fits, lesson_id, pk) else None,
            light,
        )
        fit = self.beliefs[belief_key(lesson_id, row.zos_version)]
        shape = self.shapes.get(key)
        if shape is None:
            shape = self.shapes[key] = self._shape(
                row, policy, slice_key=slice_key, observed=observed, cache=cache, fit=fit, light=light
            )
        if row.used_mru is None or row.used_sru is None:
            # Without a reading there is nothing to place slices on: what is stored stays.
            reading = _OnReading(None, None, Node.NOT_WORKED_OUT, *stored[-3:])
        else:
            check = _ReadingCheck(
                key=key, policy=policy, closed=closed, observed=observed, cache=cache, fit=fit, light=light
            )
            reading = self._on_reading(row, check, effective=shape.policy, running=rented + deployed)
        closure = (closed.key, closed.detail[:200]) if closed else ("", "")
        verdict = (shape.deployable, shape.stale, shape.reason, shape.policy)
        return NodeFigures(free, rented, deployed, failed, *verdict, *closure, *reading), stored

    def _shape(
        self,
        row,
        policy: capacity.Policy,
        *,
        slice_key: tuple,
        observed: capacity.Observed,
        cache: int | None,
        fit: capacity.OverheadFit | None,
        light: bool = False,
    ) -> ShapeVerdict:
        """The carve and stale verdict every node of this row's shape shares."""
        free_key, occupied_key = slice_key
        pools = json.loads(row.pools_text) if row.pools_text else None
        carved = capacity.carve_memoised(
            capacity.Resources(cru=row.total_cru, mru=row.total_mru, sru=row.total_sru, hru=row.total_hru),
            policy,
            occupied=[capacity.Resources(cru=c, mru=m, sru=s) for c, m, s in occupied_key],
            pools=tuple(pools) if pools else None,
            observed=observed,
            cache=cache,
            light=light,
        )
        return ShapeVerdict(
            policy=policy,
            carve=carved,
            sure_new=sure_new_slices(fit, carved, row.total_mru, occupied_key, row.pk, self.min_odds),
            reason_args={
                "carved_policy_name": row.carved_policy_name,
                "carved_policy_version": row.carved_policy_version,
                "carved_slice_sru": row.carved_slice_sru,
                "carved_pools_known": row.carved_pools_known,
                "free": [size for size, n in free_key for _ in range(n)],
            },
        )

    def _on_reading(self, row, check: _ReadingCheck, *, effective: str, running: int) -> _OnReading:
        """What the node's last reading decides: the free slices placeable now, the room, the pools' shape."""
        free_in_order, occupied_key = self.slice_order.get(row.pk, ((), ()))
        pools_used = capacity.pools_used_agreeing(row.pools_used, row.used_sru, cache=check.cache)
        total = capacity.Resources(cru=row.total_cru, mru=row.total_mru, sru=row.total_sru, hru=row.total_hru)
        used = capacity.Resources(cru=row.used_cru or 0, mru=row.used_mru, sru=row.used_sru, hru=row.used_hru or 0)
        # Nodes of one shape on one reading share one precheck.
        check_key = (
            check.key,
            free_in_order,
            check.closed,
            row.used_cru,
            row.used_mru,
            row.used_sru,
            row.used_hru,
            pools_used,
        )
        placed = self.checks.get(check_key)
        if placed is None:
            placed = self.checks[check_key] = placeable_on_reading(
                policy=check.policy,
                closure=check.closed,
                free=free_in_order,
                occupied=occupied_key,
                total=total,
                used=used,
                pools=tuple(json.loads(row.pools_text)) if row.pools_text else None,
                observed=check.observed,
                pools_used=pools_used,
                cache=check.cache,
                light=check.light,
            )
        placeable, phantom, reasons = placed
        if check.fit is not None:
            sure = sure_free_slices(
                check.fit, row.pk, free_in_order, row.used_mru, row.total_mru, occupied_key, self.min_odds
            )
            placeable = min(placeable, sure)
        room = capacity.room_now(total, used, running=running, observed=check.observed)
        return _OnReading(
            room_mru=room.mru,
            room_sru=room.sru + capacity.cache_room(check.policy, check.cache),  # as the precheck counts it
            pools_shape=pools_shape_key(
                row.pools_text, effective, check.observed, occupied_key, row.total_sru, check.cache, light=check.light
            ),
            placeable_now=placeable,
            phantom_slices=phantom,
            phantom_reasons=reasons,
        )
