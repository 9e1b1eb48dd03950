"""The placement answer's first cut: each node's block from figures capacity worked out and stored.

selectors.placement judges every node in Python with capacity.fits, the precheck's own judgement; at
10,000 nodes that is a Python loop over every row. The figures writer (services.figures) stores on each
node, from its last reading, what capacity says one more VM can be charged (`room_mru`, `room_sru`:
capacity.room_now) and whether only the pool model can judge it (`pools_shape`: capacity.pools_decide,
with a key shared by the nodes whose pools judge alike). So here the database only compares:

- closed (down, standby, ...: capacity.closures), never read, reading too old: the node's closure as
  the figures writer stored it, and its reading columns;
- memory, disk: what one VM of the size is charged under the node's policy (worked out in Python for
  each policy) against the room stored, memory first, as capacity's verdict names its shortfalls;
- the rest fits, unless its pools decide: those come back grouped by their `pools_shape`, and Python
  judges one node of each group. A node whose "name vN" is not a version in force, or whose figures
  predate these columns, is judged alone in Python.

No rule of capacity's is restated here: a change to the carve or to "placeable now" reaches the stored
figures, and so this cut, with nothing to edit. tests/test_selectors_placement.py checks this cut
against the Python judgement on every node.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Case, CharField, Count, F, Min, Q, QuerySet, Value, When
from django.db.models.functions import Cast

from dashboard.models import Node

# The block a node's row says, before its pools are looked at: "" fits, "pools" must be judged (one
# node of each group that shares its pools_shape), "judge" must be judged alone.
POOLS_TO_JUDGE = "pools"
JUDGE_ALONE = "judge"
# Nodes with live holds, whose stored room does not count them: selectors.placement charges the holds.
HELD_APART = "holds"


@dataclass(frozen=True)
class PolicyCharge:
    """What one VM of the asked size is charged under one policy version."""

    effective: str  # "name vN", as Node.effective_policy holds it while this version is in force
    need_mru: int
    need_sru: int


@dataclass(frozen=True)
class BlockCount:
    block: str  # a key of placement.BLOCKS, "" (fits), POOLS_TO_JUDGE or JUDGE_ALONE
    nodes: int
    sample_pk: int  # for POOLS_TO_JUDGE: one node of the group, judged for all of it; for JUDGE_ALONE, the node
    group: str = ""  # for POOLS_TO_JUDGE: the group's pools_shape


def _blocked(
    charges: list[PolicyCharge],
    *,
    cutoff: datetime,
    below_min_mru: bool,
    exclude_nodes: tuple[int, ...] = (),
    exclude_farms: tuple[int, ...] = (),
    holds: QuerySet | None = None,
) -> QuerySet[Node]:
    """`holds` (the live holds, a queryset of Hold) sets apart the nodes they are on, before anything:
    their stored room does not count them, and placement judges them all itself (one count row here, the
    holds a subquery, with no list of ids). `exclude_nodes` (grid ids) and `exclude_farms` are the asker's rules."""
    versions = [c.effective for c in charges]
    whens = []
    if holds is not None:
        # IN (subquery), not a correlated EXISTS: PostgreSQL hashes the held nodes once for every row.
        whens.append(When(pk__in=holds.order_by().values("node_id"), then=Value(HELD_APART)))
    if exclude_nodes:
        whens.append(When(grid_id__in=exclude_nodes, then=Value("node_excluded")))
    if exclude_farms:
        whens.append(When(farm_id__in=exclude_farms, then=Value("farm_excluded")))
    whens += [
        When(~Q(closure=""), then=F("closure")),
        When(Q(used_mru__isnull=True) | Q(used_sru__isnull=True), then=Value("unread")),
        When(Q(seen_at__isnull=True) | Q(seen_at__lt=cutoff), then=Value("old")),
    ]
    whens += [
        When(
            ~Q(effective_policy__in=versions) | Q(room_mru__isnull=True) | Q(pools_shape=Node.NOT_WORKED_OUT),
            then=Value(JUDGE_ALONE),
        ),
    ]
    if below_min_mru:
        whens.append(When(pk__isnull=False, then=Value("memory")))
    whens += [When(effective_policy=c.effective, room_mru__lt=c.need_mru, then=Value("memory")) for c in charges]
    whens += [When(effective_policy=c.effective, room_sru__lt=c.need_sru, then=Value("disk")) for c in charges]
    whens.append(When(~Q(pools_shape=""), then=Value(POOLS_TO_JUDGE)))
    return Node.objects.order_by().annotate(block=Case(*whens, default=Value(""), output_field=CharField()))


def _best_order(nodes: QuerySet[Node], charges: list[PolicyCharge], *, pack: bool = False) -> QuerySet[Node]:
    """Most memory left after the slice, then most disk, then the freshest reading: the best nodes' order.
    `pack`: nodes running VMs first, then the least memory left, then the least disk (placement._packed_first)."""
    left_mru = Case(*(When(effective_policy=c.effective, then=F("room_mru") - c.need_mru) for c in charges))
    left_sru = Case(*(When(effective_policy=c.effective, then=F("room_sru") - c.need_sru) for c in charges))
    nodes = nodes.annotate(left_mru=left_mru, left_sru=left_sru)
    if pack:
        idle = Case(When(Q(slices_rented=0) & Q(slices_deployed=0), then=Value(1)), default=Value(0))
        return nodes.annotate(idle=idle).order_by(
            "idle", F("left_mru").asc(), F("left_sru").asc(), F("seen_at").desc(nulls_last=True), "grid_id"
        )
    return nodes.order_by(F("left_mru").desc(), F("left_sru").desc(), F("seen_at").desc(nulls_last=True), "grid_id")


def first_cut(charges: list[PolicyCharge], *, cutoff: datetime, below_min_mru: bool, **rules) -> list[BlockCount]:
    """Nodes by block (the nodes whose pools decide, in groups that share their pools_shape); `rules`
    as _blocked takes them."""
    blocked = _blocked(charges, cutoff=cutoff, below_min_mru=below_min_mru, **rules)
    group = Case(
        When(block=POOLS_TO_JUDGE, then=F("pools_shape")),
        When(block=JUDGE_ALONE, then=Cast("pk", CharField())),
        default=Value(""),
        output_field=CharField(),
    )
    rows = blocked.annotate(group=group).values("block", "group").annotate(nodes=Count("pk"), sample=Min("pk"))
    counts = [BlockCount(block=r["block"], nodes=r["nodes"], sample_pk=r["sample"], group=r["group"]) for r in rows]
    return counts


def candidates(
    charges: list[PolicyCharge],
    *,
    cutoff: datetime,
    below_min_mru: bool,
    limit: int,
    offset: int,
    refused_shapes: tuple[str, ...] = (),
    pack: bool = False,
    **rules,
) -> list[int]:
    """Node pks that may host the size (their pools still to judge), in the best nodes' order. Not the
    nodes to judge alone (their room is not known here), nor those of a group whose pools were judged
    to refuse the size (`refused_shapes`): the best nodes are then found in one page, not by paging
    through every node a group refuses."""
    if not limit:
        return []
    blocked = _blocked(charges, cutoff=cutoff, below_min_mru=below_min_mru, **rules)
    blocked = blocked.filter(block__in=("", POOLS_TO_JUDGE))
    if refused_shapes:
        blocked = blocked.exclude(pools_shape__in=refused_shapes)
    ordered = _best_order(blocked, charges, pack=pack)
    return list(ordered.values_list("pk", flat=True)[offset : offset + limit])
