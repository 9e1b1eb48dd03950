"""The placement answer's first cut in PostgreSQL: each node's block worked out in one statement.

selectors.placement judges every node in Python with capacity.fits, the precheck's own judgement;
at 10,000 nodes that is a Python loop over every row, eight times the fleet page's time. Most of
a verdict is column arithmetic, so here the database does it for the whole fleet at once:

- away, never read, reading too old: the node's status and reading columns;
- memory, disk: what one VM of the size is charged under the node's policy (worked out in Python
  for each policy, passed in as a VALUES list) against total - used - hidden memory of its VMs;
- a disk the node's refusals say no pool holds: the lesson, while it still holds.

What is left is the pools of nodes whose pools are known: where ZOS puts each disk depends on the
disks already placed, which only capacity's storaged model can say. Those nodes come back grouped by
everything that decides it (pools, policy, the occupied slices' sizes in order), so Python judges one
node of each group, however many share it. A node whose "name vN" is not a version in force
(rare: a policy change refreshes every node's figures) is judged alone in Python.

The running VMs are the node's rented + deployed counts, which services.figures keeps from its
slices in the same transaction as any change to them.

The order of the CASE is capacity._Placement.verdict's order of shortfalls, the first one that holds;
tests/test_selectors_placement.py checks this cut against the Python judgement on every node.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from dashboard.capacity import AWAY_STATUSES
from dashboard.models import Node, Slice

# The block a node's row says, before its pools are looked at: "" fits, "pools" must be judged (one
# node of each group that shares them), "judge" must be judged alone.
POOLS_TO_JUDGE = "pools"
JUDGE_ALONE = "judge"


@dataclass(frozen=True)
class PolicyCharge:
    """What one VM of the asked size costs under one policy: memory, disk, and its disks in the pools."""

    name: str
    effective: str  # "name vN", as Node.effective_policy holds it while this version is in force
    need_mru: int
    need_sru: int
    disks: int  # data disk + rootfs, as they are allocated in the pools


@dataclass(frozen=True)
class BlockCount:
    block: str  # a key of placement.BLOCKS, "" (fits), POOLS_TO_JUDGE or JUDGE_ALONE
    nodes: int
    sample_pk: int  # for POOLS_TO_JUDGE: one node of the group, judged for all of it; for JUDGE_ALONE, the node


_CLASSIFIED = """
WITH charge(name, effective, need_mru, need_sru, disks) AS (VALUES {values}),
nodes AS MATERIALIZED (
    SELECT n.id, n.grid_id, n.seen_at, n.pools_sru, n.slices_rented + n.slices_deployed AS running, c.name AS policy,
           n.total_mru - n.used_mru - (n.slices_rented + n.slices_deployed) * n.hidden_mru_per_vm - c.need_mru AS room_mru,
           n.total_sru - n.used_sru - c.need_sru AS room_sru,
           CASE
             WHEN n.status = ANY(%(away)s) THEN n.status
             WHEN n.used_mru IS NULL OR n.used_sru IS NULL THEN 'unread'
             WHEN n.seen_at IS NULL OR n.seen_at < %(cutoff)s THEN 'old'
             -- Not the "name vN" of a version in force (every node's figures are refreshed when a
             -- policy changes, so this is rare): judged in Python, one by one.
             WHEN c.name IS NULL THEN %(judge)s
             WHEN %(below_min_mru)s THEN 'memory'
             WHEN c.need_mru > n.total_mru - n.used_mru - (n.slices_rented + n.slices_deployed) * n.hidden_mru_per_vm
               THEN 'memory'
             WHEN c.need_sru > n.total_sru - n.used_sru THEN 'disk'
             -- A refused disk bounds the pools while nothing was freed since (capacity.observed_now).
             WHEN n.pool_room_below IS NOT NULL
                  AND NOT (n.pool_room_below_used_sru IS NOT NULL AND n.used_sru < n.pool_room_below_used_sru)
               THEN CASE WHEN c.disks >= n.pool_room_below THEN 'pool' ELSE '' END
             WHEN jsonb_typeof(n.pools_sru) = 'array' AND jsonb_array_length(n.pools_sru) > 0 THEN %(pools)s
             ELSE ''
           END AS block
    FROM {node} n LEFT JOIN charge c ON c.effective = n.effective_policy
)
"""

_BEST = """
SELECT 'best', NULL, NULL, id FROM nodes WHERE block IN ('', %(pools)s)
ORDER BY room_mru DESC, room_sru DESC, seen_at DESC NULLS LAST, grid_id
LIMIT %(limit)s OFFSET %(offset)s
"""

# Counts by block, the nodes whose pools decide grouped by what decides it (their pools, their
# policy, the sizes of their occupied slices in slice order); then the first candidates for the best.
_FIRST_CUT = (
    _CLASSIFIED
    + """,
occupied AS (
    SELECT s.node_id, string_agg(s.cru || ':' || s.mru || ':' || s.sru, ',' ORDER BY s.index) AS sizes
    FROM {slice} s JOIN nodes p ON p.id = s.node_id
    -- Only the nodes whose pools decide and which hold VMs: the others' pools are as at boot.
    WHERE s.state = ANY(%(occupied)s) AND p.block = %(pools)s AND p.running > 0
    GROUP BY s.node_id
)
SELECT 'count', block, count(*), min(id)
FROM (
    SELECT nodes.id, block, CASE
        WHEN block = %(pools)s THEN pools_sru::text || '|' || policy || '|' || coalesce(o.sizes, '')
        WHEN block = %(judge)s THEN nodes.id::text
    END AS group_key
    FROM nodes LEFT JOIN occupied o ON o.node_id = nodes.id
) keyed
GROUP BY block, group_key
UNION ALL
("""
    + _BEST
    + ")"
)

_CANDIDATES = _CLASSIFIED + _BEST


def _run(template: str, charges: list[PolicyCharge], params: dict) -> list[tuple]:
    values = ", ".join(
        f"(%(n{i})s, %(e{i})s, %(m{i})s::bigint, %(s{i})s::bigint, %(d{i})s::bigint)" for i in range(len(charges))
    )
    for i, c in enumerate(charges):
        params.update(
            {f"n{i}": c.name, f"e{i}": c.effective, f"m{i}": c.need_mru, f"s{i}": c.need_sru, f"d{i}": c.disks}
        )
    sql = template.format(values=values, node=Node._meta.db_table, slice=Slice._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _params(*, cutoff: datetime, below_min_mru: bool, **more) -> dict:
    return {
        "away": list(AWAY_STATUSES),
        "cutoff": cutoff,
        "below_min_mru": below_min_mru,
        "pools": POOLS_TO_JUDGE,
        "judge": JUDGE_ALONE,
        "occupied": list(Slice.OCCUPIED_STATES),
        **more,
    }


def first_cut(
    charges: list[PolicyCharge], *, cutoff: datetime, below_min_mru: bool, limit: int
) -> tuple[list[BlockCount], list[int]]:
    """Nodes by block (the nodes whose pools decide, in groups that share everything that decides it),
    and the first `limit` candidates for the best nodes (see candidates), in one statement."""
    params = _params(cutoff=cutoff, below_min_mru=below_min_mru, limit=limit, offset=0)
    counts, best = [], []
    for kind, block, nodes, pk in _run(_FIRST_CUT, charges, params):
        if kind == "count":
            counts.append(BlockCount(block=block, nodes=nodes, sample_pk=pk))
        else:
            best.append(pk)
    return counts, best


def candidates(
    charges: list[PolicyCharge], *, cutoff: datetime, below_min_mru: bool, limit: int, offset: int
) -> list[int]:
    """Node pks that may host the size (their pools still to judge), most memory left first, then disk,
    then the freshest reading: the best nodes' order. Not the nodes to judge alone (their policy unknown here)."""
    params = _params(cutoff=cutoff, below_min_mru=below_min_mru, limit=limit, offset=offset)
    return [pk for (_kind, _block, _nodes, pk) in _run(_CANDIDATES, charges, params)]
