"""A node's figures from plain values: its row (NODE_VALUES) and what the rows share (FiguresInputs).

Nothing here reads or writes the database (tests/figures/test_node_figures.py computes figures with none):
figures.services.figures reads the rows and the inputs once for many nodes and stores what this computes,
figures.services.figures_new computes the figures of nodes not inserted yet. One definition of every figure.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from dashboard import capacity
from dashboard.figures.closure import CLOSURE_FIELDS, closure_of_values
from dashboard.figures.shapes import ShapeVerdict, placeable_on_reading, pools_shape_key
from dashboard.lessons.selectors.odds import belief_key, has_own_residual, sure_free_slices, sure_new_slices
from dashboard.models import Node, observed_of_columns

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


@dataclass(frozen=True)
class FiguresInputs:
    """What the figures of many nodes are computed from beside their rows, read once for all of them
    (figures.services.figures.figures_inputs)."""

    # Node pk -> its slices grouped as figures.selectors.slices_grouped groups them (NO_SLICES: none).
    slices: Mapping[int, tuple]
    # Memory lesson id -> its fit (lessons.selectors.odds.lesson_fits).
    fits: Mapping[int, capacity.OverheadFit]
    # What each node's odds are judged by: its lesson, or its build's prior (lessons.selectors.odds.beliefs_for).
    beliefs: Mapping[tuple, capacity.odds.Belief]
    # The policies as policies.selectors.policy_book hands them out (by node pk, by farm, the fleet's).
    by_node: Mapping[int, capacity.Policy]
    by_farm: Mapping[int, capacity.Policy]
    fleet_policy: capacity.Policy
    min_odds: float  # settings.SLICE_MIN_ODDS
    # The nodes judged as no reading tells them yet (lessons.selectors.odds.unread_among: capacity.Unread).
    unread: frozenset[int] = frozenset()


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
    """The figures of many nodes from their rows and one FiguresInputs, and the memos they share: the nodes
    of one shape share a carve and a stale verdict, the nodes of one shape on one reading a precheck."""

    def __init__(self, inputs: FiguresInputs):
        self.slices, self.fits, self.beliefs = inputs.slices, inputs.fits, inputs.beliefs
        self.min_odds = inputs.min_odds
        self.unread = inputs.unread
        self.by_node, self.by_farm, self.fleet_policy = inputs.by_node, inputs.by_farm, inputs.fleet_policy
        self.shapes: dict[tuple, ShapeVerdict] = {}
        self.checks: dict[tuple, tuple] = {}
        self.slice_order = {pk: (grouped[5], grouped[4][1]) for pk, grouped in self.slices.items()}

    def node(self, row) -> tuple[NodeFigures, tuple]:
        """(figures now, figures stored) of one node's row."""
        pk, pools_text, lesson_id, stored = row.pk, row.pools_text, row.memory_lesson_id, tuple(row[_STORED_AT:])
        closed = closure_of_values(dict(zip(CLOSURE_FIELDS, row[_CLOSURE_AT:_STORED_AT], strict=True)))
        free, rented, deployed, failed, slice_key, _free_order = self.slices.get(pk, NO_SLICES)
        policy = self.by_node.get(pk) or self.by_farm.get(row.farm_id) or self.fleet_policy  # as PolicyBook.for_node
        observed = observed_of_columns(row._asdict(), used_sru=row.used_sru)
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
            belief_key(lesson_id, row.zos_version, unread=pk in self.unread),
            pk if has_own_residual(self.fits, lesson_id, pk) else None,
            light,
        )
        fit = self.beliefs[belief_key(lesson_id, row.zos_version, unread=pk in self.unread)]
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
