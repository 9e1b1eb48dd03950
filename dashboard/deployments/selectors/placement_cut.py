"""The placement answer's first cut: each node's block from figures capacity worked out and stored.

deployments.selectors.placement judges every node in Python with capacity.fits, the precheck's own judgement; at
10,000 nodes that is a Python loop over every row. The figures writer (figures.services.figures) stores on each
node, from its last reading, what capacity says one more VM can be charged (`room_mru`, `room_sru`:
capacity.room_now) and whether only the pool model can judge it (`pools_shape`: capacity.pools_decide,
with a key shared by the nodes whose pools judge alike). So here the database only compares:

- closed (down, standby, ...: capacity.closures), never read, reading too old: the node's closure as
  the figures writer stored it, and its reading columns;
- CPU: a slice of more vCPUs than ZOS lets one VM have on the node (`uint8(total_cru)`, capacity.vcpus;
  a node whose `total_cru` is 0 is not judged, as capacity does not);
- memory, disk: what one VM of the size is charged under the node's policy (worked out in Python for
  each policy) against the room stored, memory first, as capacity's verdict names its shortfalls;
- the rest fits, unless its pools decide: those come back grouped by their `pools_shape`, and Python
  judges one node of each group. A node whose "name vN" is not a version in force, or whose figures
  predate these columns, is judged alone in Python;
- live holds: a held VM is not on the reading yet, so the holds summed on the node row
  (figures.services.held_figures) are charged on its room while every one is live, and the held sizes join
  its pools' group key; a node whose holds partly ended by time since is judged alone.

No rule of capacity's is restated here: a change to the carve or to "placeable now" reaches the stored
figures, and so this cut, with nothing to edit. tests/deployments/test_selectors_placement.py checks this cut
against the Python judgement on every node.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import BigIntegerField, Case, CharField, F, Q, QuerySet, Value, When
from django.db.models.functions import Concat, Mod

from dashboard.models import Node

# The block a node's row says, before its pools are looked at: "" fits, "pools" must be judged (one
# node of each group that shares its pools_shape, and its held sizes when it holds live holds), "judge"
# must be judged alone, "held short" fits on its own but not with its live holds charged: one node of
# each pools_shape group is judged without them ("held" if it fits, else its pools' block).
POOLS_TO_JUDGE = "pools"
JUDGE_ALONE = "judge"
HELD_SHORT = "held short"


@dataclass(frozen=True)
class PolicyCharge:
    """What one VM of the asked size is charged under one policy version."""

    effective: str  # "name vN", as Node.effective_policy holds it while this version is in force
    need_mru: int
    need_sru: int


@dataclass(frozen=True)
class BlockCount:
    block: str  # a key of placement.BLOCKS, "" (fits), POOLS_TO_JUDGE, JUDGE_ALONE or HELD_SHORT
    nodes: int
    sample_pk: (
        int  # for POOLS_TO_JUDGE, HELD_SHORT: one node of the group, judged for all of it; for JUDGE_ALONE, the node
    )
    group: str = ""  # for POOLS_TO_JUDGE and HELD_SHORT: the group's key (pool_group)
    held: int = 0  # of the nodes, those with a live hold


def _held(now: datetime) -> tuple[Q, Q]:
    """(every hold the row sums is live at `now`, some are and some are not): Node's held_* columns
    (held_first_expiry is None on a node with no hold)."""
    return Q(held_first_expiry__gt=now), Q(held_first_expiry__lte=now, held_last_expiry__gt=now)


def _askers_whens(
    *,
    exclude_nodes: tuple[int, ...],
    exclude_farms: tuple[int, ...],
    ipv4_farms: tuple[int, ...] | None,
    ipv4_read_farms: tuple[int, ...] | None,
) -> list[When]:
    """The blocks the asker's own rules set, first: nodes and farms left out, and no free public IPv4."""
    whens = []
    if exclude_nodes:
        whens.append(When(grid_id__in=exclude_nodes, then=Value("node_excluded")))
    if exclude_farms:
        whens.append(When(farm_id__in=exclude_farms, then=Value("farm_excluded")))
    if ipv4_farms is not None:
        whens.append(When(light=True, then=Value("no_ipv4")))
        # Never read before all taken: unknown is not none (no farm has id 0).
        whens.append(When(~Q(farm_id__in=ipv4_read_farms or (0,)), then=Value("farm_ips_unread")))
        whens.append(When(~Q(farm_id__in=ipv4_farms or (0,)), then=Value("farm_ips")))
    return whens


def _room_whens(charges: list[PolicyCharge], *, vcpus: int | None, below_min_mru: bool) -> list[When]:
    """The blocks of a node with too few vCPUs, or too little memory or disk room for the slice."""
    whens = []
    if vcpus is not None:
        # VM.Validate: vm.CPU == 0 || vm.CPU > uint8(cpus) (capacity.vcpus), on nodes whose threads are known.
        refused = Q(total_cru__gt=0) if vcpus == 0 else Q(total_cru__gt=0, vcpu_limit__lt=vcpus)
        whens.append(When(refused, then=Value("cpu")))
    if below_min_mru:
        whens.append(When(pk__isnull=False, then=Value("memory")))
    whens += [When(effective_policy=c.effective, room_mru__lt=c.need_mru, then=Value("memory")) for c in charges]
    whens += [When(effective_policy=c.effective, room_sru__lt=c.need_sru, then=Value("disk")) for c in charges]
    return whens


def _held_when(charges: list[PolicyCharge], *, all_live: Q, pools_or_fits: Case) -> When:
    """The held nodes' own whens behind one test, so a node with no live hold pays one comparison for
    them; held_mru counts each held VM's hidden use already (figures.services.held_figures)."""
    held_whens = [
        When(effective_policy=c.effective, **{f"room_{r}__lt": F(f"held_{r}") + need}, then=Value(HELD_SHORT))
        for r in ("mru", "sru")
        for c in charges
        for need in ((c.need_mru if r == "mru" else c.need_sru),)
    ]
    return When(all_live, then=Case(*held_whens, default=pools_or_fits, output_field=CharField()))


def _blocked(
    charges: list[PolicyCharge],
    *,
    cutoff: datetime,
    below_min_mru: bool,
    now: datetime,
    vcpus: int | None = None,
    exclude_nodes: tuple[int, ...] = (),
    exclude_farms: tuple[int, ...] = (),
    ipv4_farms: tuple[int, ...] | None = None,
    ipv4_read_farms: tuple[int, ...] | None = None,
) -> QuerySet[Node]:
    """Each node's block (and `pool_group`, the key its pools are judged by) at `now`. A node's live holds
    are charged on its stored room from the sums on its row (figures.services.held_figures) while all of them are
    live; one whose holds partly ended by time since is judged alone. `exclude_nodes` (grid ids) and
    `exclude_farms` are the asker's rules; `ipv4_farms`, when the slice asks a public IPv4, the farms with a
    free one (a ZOS-light node, or a node of another farm, cannot take it), and `ipv4_read_farms` those whose
    IPs were read at all."""
    versions = [c.effective for c in charges]
    all_live, partly_live = _held(now)
    whens = _askers_whens(
        exclude_nodes=exclude_nodes,
        exclude_farms=exclude_farms,
        ipv4_farms=ipv4_farms,
        ipv4_read_farms=ipv4_read_farms,
    )
    whens += [
        When(~Q(closure=""), then=F("closure")),
        When(Q(used_mru__isnull=True) | Q(used_sru__isnull=True), then=Value("unread")),
        When(Q(seen_at__isnull=True) | Q(seen_at__lt=cutoff), then=Value("old")),
        When(
            ~Q(effective_policy__in=versions)
            | Q(room_mru__isnull=True)
            | Q(pools_shape=Node.NOT_WORKED_OUT)
            | partly_live,
            then=Value(JUDGE_ALONE),
        ),
    ]
    whens += _room_whens(charges, vcpus=vcpus, below_min_mru=below_min_mru)
    pools_or_fits = Case(When(~Q(pools_shape=""), then=Value(POOLS_TO_JUDGE)), default=Value(""))
    whens.append(_held_when(charges, all_live=all_live, pools_or_fits=pools_or_fits))
    pool_group = Case(
        When(all_live, then=Concat("pools_shape", Value(":"), "held_sizes")),
        default=F("pools_shape"),
        output_field=CharField(),
    )
    return (
        Node.objects.order_by()
        .annotate(vcpu_limit=Mod(F("total_cru"), Value(256)))
        .annotate(
            block=Case(*whens, default=pools_or_fits, output_field=CharField()),
            pool_group=pool_group,
            # 1 for a node with a live hold at `now`: the answer says how many were judged with their holds.
            held=Case(When(held_last_expiry__gt=now, then=Value(1)), default=Value(0)),
        )
    )


def _best_order(nodes: QuerySet[Node], charges: list[PolicyCharge], *, now: datetime, pack: bool = False):
    """Most memory left after the slice (and the node's live holds), then most disk, then the freshest
    reading: the best nodes' order. `pack`: nodes running VMs first, then the least memory left, then the
    least disk (placement._packed_first)."""
    all_live, _ = _held(now)
    room_mru = Case(
        When(all_live, then=F("room_mru") - F("held_mru")), default=F("room_mru"), output_field=BigIntegerField()
    )
    room_sru = Case(
        When(all_live, then=F("room_sru") - F("held_sru")), default=F("room_sru"), output_field=BigIntegerField()
    )
    left_mru = Case(*(When(effective_policy=c.effective, then=room_mru - c.need_mru) for c in charges))
    left_sru = Case(*(When(effective_policy=c.effective, then=room_sru - c.need_sru) for c in charges))
    nodes = nodes.annotate(left_mru=left_mru, left_sru=left_sru)
    if pack:
        idle = Case(When(Q(slices_rented=0) & Q(slices_deployed=0), then=Value(1)), default=Value(0))
        return nodes.annotate(idle=idle).order_by(
            "idle", F("left_mru").asc(), F("left_sru").asc(), F("seen_at").desc(nulls_last=True), "grid_id"
        )
    return nodes.order_by(F("left_mru").desc(), F("left_sru").desc(), F("seen_at").desc(nulls_last=True), "grid_id")


def first_cut(
    charges: list[PolicyCharge], *, cutoff: datetime, below_min_mru: bool, now: datetime, **rules
) -> list[BlockCount]:
    """Nodes by block (the nodes whose pools decide, in groups judged alike); `rules` as _blocked takes them."""
    blocked = _blocked(charges, cutoff=cutoff, below_min_mru=below_min_mru, now=now, **rules)
    # Grouped over the blocked rows as a derived table, so PostgreSQL works out each node's block once
    # (grouping by a CASE that names the block would compute the block's CASE again inside it); OFFSET 0
    # keeps the planner from pulling the derived table up into the grouping, which undoes that (18 -> 9 ms
    # at 10,000 nodes with 1,000 held, BENCHMARKS.md).
    inner, params = blocked.values_list("pk", "block", "pool_group", "held").query.sql_with_params()
    inner += " OFFSET 0"
    sql = f"""
        SELECT block, CASE WHEN block IN (%s, %s) THEN pool_group WHEN block = %s THEN pk::text ELSE '' END AS grp,
               count(*), min(pk), sum(held)
        FROM ({inner}) AS blocked (pk, block, pool_group, held)
        GROUP BY 1, 2
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, (POOLS_TO_JUDGE, HELD_SHORT, JUDGE_ALONE, *params))
        rows = cursor.fetchall()
    return [
        BlockCount(block=block, nodes=nodes, sample_pk=sample, group=group, held=held)
        for block, group, nodes, sample, held in rows
    ]


def candidates(
    charges: list[PolicyCharge],
    *,
    cutoff: datetime,
    below_min_mru: bool,
    now: datetime,
    limit: int,
    offset: int,
    refused_groups: tuple[str, ...] = (),
    pack: bool = False,
    **rules,
) -> list[int]:
    """Node pks that may host the size (their pools still to judge), in the best nodes' order. Not the
    nodes to judge alone (their room is not known here), nor those of a group whose pools were judged
    to refuse the size (`refused_groups`, keys of pool_group): the best nodes are then found in one page,
    not by paging through every node a group refuses."""
    if not limit:
        return []
    blocked = _blocked(charges, cutoff=cutoff, below_min_mru=below_min_mru, now=now, **rules)
    blocked = blocked.filter(block__in=("", POOLS_TO_JUDGE))
    if refused_groups:
        blocked = blocked.exclude(pool_group__in=refused_groups)
    ordered = _best_order(blocked, charges, now=now, pack=pack)
    return list(ordered.values_list("pk", flat=True)[offset : offset + limit])
