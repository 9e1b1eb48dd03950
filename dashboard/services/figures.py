"""A node's catalog figures, kept on its row: slice counts, deployable slices, stale and why.

The fleet overview sorts, filters and totals thousands of nodes on every request; computing
these there meant grouping every slice and carving every node each time. They change only
when a catalog, a node's capacity or a policy changes, so the services that make those
changes call `figures_refresh` in the same transaction, and the overview reads plain columns.

`figures_compute` is the truth: three queries for any number of nodes (the nodes, their
slices grouped, the policies; a fourth for the memory lessons when a node has one). Nodes of
the same shape (size, pools, policy, occupied slices, how they were carved, free slices, the
lesson) share one carve and one stale verdict.
`manage.py figures_refresh` rewrites every node's figures, for rows changed by hand.

"Deployable" and "placeable now" count only the slices a headline may promise: those whose odds
(capacity.odds, from the node's memory lesson and its uncertainty, or its build's prior where the
build never refused, weighted by the deployments ZOS took: selectors.odds) are at or above SLICE_MIN_ODDS.
The catalog keeps the others (uncertain: offered at their odds, never promised).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from functools import lru_cache

from django.conf import settings
from django.db import connection, transaction
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from dashboard import capacity
from dashboard.models import Node
from dashboard.rules.catalog import catalog_stale, stale_reason
from dashboard.rules.closure import CLOSURE_FIELDS, closure_of_values
from dashboard.selectors.odds import (
    belief_key,
    beliefs_for,
    has_own_residual,
    lesson_fits,
    sure_free_slices,
    sure_new_slices,
)
from dashboard.selectors.policy_book import policy_book
from dashboard.selectors.slices_grouped import slices_grouped
from dashboard.services.farm_totals import farm_totals_refresh_on_commit
from dashboard.services.held_figures import held_store

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
    # Why the node offers nothing now (capacity.closures; "" open), decided by dashboard.rules.closure.
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


def figures_refresh(node_pks: Iterable[int], *, locked: bool = False) -> int:
    """Recompute and store these nodes' figures; the number of nodes whose figures changed.

    Call it in the transaction that changed their slices, capacity or policy, after the change.
    It locks the nodes (in pk order, as every caller locks a node before its slices), so two
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
        (*(json.dumps(v) if isinstance(v, dict) else v for v in astuple(figures)), pk)
        for pk, (figures, stored) in _computed(nodes).items()
        if astuple(figures) != stored
    ]
    if rows:
        # One parametrised UPDATE per node, pipelined by executemany: bulk_update's CASE WHEN
        # statements took 11.6 s for 10,000 nodes (mostly building them), this 1.5 s.
        table = connection.ops.quote_name(Node._meta.db_table)
        columns = ", ".join(
            f"{connection.ops.quote_name(name)} = %s{'::jsonb' if name == 'phantom_reasons' else ''}"
            for name in FIGURE_FIELDS
        )
        with connection.cursor() as cursor:
            cursor.executemany(f"UPDATE {table} SET {columns} WHERE id = %s", rows)
    return len(rows)


class _Shape:
    """What nodes of one shape share: the carve, the stale verdict and its words."""

    __slots__ = ("deployable", "stale", "reason", "policy")

    def __init__(self, *, policy: capacity.Policy, carve: capacity.Carve, reason_args: dict, sure_new: int):
        self.policy = f"{policy.name} v{policy.version}"
        # The occupied slices and the new ones the odds let a headline promise.
        self.deployable = carve.slices - carve.new_slices + min(sure_new, carve.new_slices)
        self.stale = catalog_stale(policy=policy, carve=carve, **reason_args)
        self.reason = stale_reason(policy=policy, carve=carve, **reason_args) if self.stale else ""


_NODE_VALUES = (
    "pk",
    "farm_id",
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


def _computed(nodes: QuerySet[Node], pools: dict | None = None) -> dict[int, tuple[NodeFigures, tuple]]:
    """Node pk -> (figures now, figures stored) for the nodes of the queryset."""
    # The pools as JSON text: a shape key as it is, parsed once per shape.
    node_values = list(nodes.order_by().annotate(pools_text=Cast("pools_sru", TextField())).values_list(*_NODE_VALUES))
    for i, row in enumerate(node_values if pools else ()):
        if row[0] in pools:  # pools_text, pools_used and the cache as they will be (figures_compute)
            node_values[i] = (*row[:6], json.dumps(pools[row[0]][0]), *pools[row[0]][1:], *row[9:])
    if not node_values:
        return {}
    slices = slices_grouped(nodes)
    fits = lesson_fits(row[_LESSON_AT] for row in node_values)
    # What each node's odds are judged by: its lesson, or its build's prior (selectors.odds.beliefs_for).
    beliefs = beliefs_for({belief_key(row[_LESSON_AT], row[_LESSON_AT + 1]) for row in node_values})
    min_odds = settings.SLICE_MIN_ODDS
    book = policy_book()
    by_node, by_farm = book.by_node, book.by_farm
    fleet_policy = book.for_farm(None)
    shapes: dict[tuple, _Shape] = {}
    checks: dict[tuple, tuple] = {}
    slice_order = {pk: (grouped[5], grouped[4][1]) for pk, grouped in slices.items()}
    nothing = (0, 0, 0, 0, ((), ()), ())
    computed = {}
    for (
        pk,
        farm_id,
        cru,
        mru,
        sru,
        hru,
        pools_text,
        pools_used,
        zos_cache,
        carved_pools_known,
        carved_name,
        carved_version,
        carved_sru,
        hidden,
        bound,
        bound_used,
        zos_own,
        lesson_id,
        zos_version,
        used_cru,
        used_mru,
        used_sru,
        used_hru,
        *rest,
    ) in node_values:
        stored = rest[len(CLOSURE_FIELDS) :]
        closed = closure_of_values(dict(zip(CLOSURE_FIELDS, rest[: len(CLOSURE_FIELDS)], strict=True)))
        free, rented, deployed, failed, slice_key, _free_order = slices.get(pk, nothing)
        policy = by_node.get(pk) or by_farm.get(farm_id) or fleet_policy  # as PolicyBook.for_node
        # The book hands out one object per policy for this call, so its id stands for it
        # (hashing the frozen policy for every node would cost more than the lookup saves).
        observed = capacity.observed_now(
            hidden_mru_per_vm=hidden,
            pool_room_below=bound,
            bound_used_sru=bound_used,
            used_sru=used_sru,
            zos_own_mru=zos_own,
        )
        cache = zos_cache if pools_text and pools_text not in ("null", "[]") else None  # as Node.zos_cache
        key = (
            cru,
            mru,
            sru,
            hru,
            pools_text,
            cache,
            id(policy),
            carved_name,
            carved_version,
            carved_sru,
            carved_pools_known,
            slice_key,
            observed,
            belief_key(lesson_id, zos_version),
            pk if has_own_residual(fits, lesson_id, pk) else None,
        )
        fit = beliefs[belief_key(lesson_id, zos_version)]
        shape = shapes.get(key)
        if shape is None:
            free_key, occupied_key = slice_key
            pools = json.loads(pools_text) if pools_text else None
            carved = capacity.carve_memoised(
                capacity.Resources(cru=cru, mru=mru, sru=sru, hru=hru),
                policy,
                occupied=[capacity.Resources(cru=c, mru=m, sru=s) for c, m, s in occupied_key],
                pools=tuple(pools) if pools else None,
                observed=observed,
                cache=cache,
            )
            shape = shapes[key] = _Shape(
                policy=policy,
                carve=carved,
                sure_new=sure_new_slices(fit, carved, mru, occupied_key, pk, min_odds),
                reason_args={
                    "carved_policy_name": carved_name,
                    "carved_policy_version": carved_version,
                    "carved_slice_sru": carved_sru,
                    "carved_pools_known": carved_pools_known,
                    "free": [size for size, n in free_key for _ in range(n)],
                },
            )
        # Without a reading there is nothing to place slices on: what is stored stays.
        placeable, phantom, reasons = stored[-3], stored[-2], stored[-1]
        room_mru, room_sru, pools_shape = None, None, Node.NOT_WORKED_OUT
        if used_mru is not None and used_sru is not None:
            free_in_order, occupied_key = slice_order.get(pk, ((), ()))
            pools_used = capacity.pools_used_agreeing(pools_used, used_sru, cache=cache)
            check_key = (key, free_in_order, closed, used_cru, used_mru, used_sru, used_hru, pools_used)
            check = checks.get(check_key)
            if check is None:
                check = checks[check_key] = _placeable(
                    policy=policy,
                    closure=closed,
                    free=free_in_order,
                    occupied=occupied_key,
                    total=capacity.Resources(cru=cru, mru=mru, sru=sru, hru=hru),
                    used=capacity.Resources(cru=used_cru or 0, mru=used_mru, sru=used_sru, hru=used_hru or 0),
                    pools=tuple(json.loads(pools_text)) if pools_text else None,
                    observed=observed,
                    pools_used=pools_used,
                    cache=cache,
                )
            placeable, phantom, reasons = check
            if fit is not None:
                placeable = min(
                    placeable, sure_free_slices(fit, pk, free_in_order, used_mru, mru, occupied_key, min_odds)
                )
            total = capacity.Resources(cru=cru, mru=mru, sru=sru, hru=hru)
            used = capacity.Resources(cru=used_cru or 0, mru=used_mru, sru=used_sru, hru=used_hru or 0)
            room = capacity.room_now(total, used, running=rented + deployed, observed=observed)
            room_mru, room_sru = room.mru, room.sru + capacity.cache_room(policy, cache)  # as the precheck counts it
            pools_shape = _pools_shape(pools_text, shape.policy, observed, slice_order.get(pk, ((), ()))[1], sru, cache)
        figures = NodeFigures(
            free,
            rented,
            deployed,
            failed,
            shape.deployable,
            shape.stale,
            shape.reason,
            shape.policy,
            closed.key if closed else "",
            closed.detail[:200] if closed else "",
            room_mru,
            room_sru,
            pools_shape,
            placeable,
            phantom,
            reasons,
        )
        computed[pk] = (figures, tuple(stored))
    return computed


_LESSON_AT = _NODE_VALUES.index("memory_lesson_id")


def _pools_shape(
    pools_text: str | None, effective: str, observed: capacity.Observed, occupied: tuple, total_sru: int, cache=None
) -> str:
    """ "" when the pools cannot refuse what memory and SSD allow; else a short key that nodes whose
    pools judge any VM alike share: the pools, the policy, the refused-disk bound in force and the
    occupied slices' sizes in order (where ZOS placed their disks), and the zos-cache's quota when known."""
    pools = json.loads(pools_text) if pools_text else None
    if not capacity.pools_decide(capacity.LiveNode(pools=tuple(pools) if pools else None, observed=observed)):
        return ""
    # Unknown pools are the plausible layouts of the SSD total: nodes of one total judge alike.
    made_of = [pools if pools else ["unknown", total_sru], effective, observed.pool_room_below, occupied]
    if cache is not None:  # kept out otherwise, so the keys of nodes without it stay as they were
        made_of.append(cache)
    return hashlib.sha1(json.dumps(made_of).encode()).hexdigest()[:16]


@lru_cache(maxsize=4096)  # pure, and the costly half of the figures: see figures_compute's `pools`
def _placeable(
    *,
    policy: capacity.Policy,
    closure: capacity.Closure | None,
    free: tuple,
    occupied: tuple,
    total: capacity.Resources,
    used: capacity.Resources,
    pools: tuple[int, ...] | None,
    observed: capacity.Observed,
    pools_used: tuple[int, ...] | None = None,
    cache: int | None = None,
) -> tuple[int, int, dict]:
    """(placeable now, phantom, phantom by reason) of the free sizes, in order, on this reading."""
    sizes = [capacity.SliceSize(*size) for size in free]
    if not sizes:
        return 0, 0, {}
    occupied_sizes = [capacity.Resources(cru=c, mru=m, sru=s) for c, m, s in occupied]
    live = capacity.live_node(
        policy=policy, pools=pools, occupied=occupied_sizes, observed=observed, pools_used=pools_used, cache=cache
    )
    check = capacity.precheck(list(enumerate(sizes)), total, used, policy, live=live, closure=closure)
    return check.placeable_now, len(check.phantom_slices), check.phantom_by_reason
