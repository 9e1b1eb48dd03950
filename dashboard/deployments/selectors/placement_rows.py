"""What placement reads of each node, in bulk: its row's stored figures, its occupied slices and live holds.

deployments.selectors.placement judges a node on these alone (no grid read); the reads are kept apart from the
judgement so that both paths, every node judged and the first cut, read the same fields the same way.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import FilteredRelation, Q

from dashboard import capacity
from dashboard.deployments.selectors.holds import live_holds
from dashboard.figures.closure import CLOSURE_FIELDS
from dashboard.models import NODE_CAPACITY_FIELDS, Node, Policy, Slice

NODE_FIELDS = (
    "pk",
    "grid_id",
    "farm_id",
    "farm_name",
    "status",
    "light",
    *(name for name in CLOSURE_FIELDS if name != "status"),
    "effective_policy",
    "seen_at",
    *NODE_CAPACITY_FIELDS,
    "pools_sru",
    "zos_cache_sru",
    "slices_rented",
    "slices_deployed",
    "hidden_mru_per_vm",
    "zos_own_mru",
    "zos_version",  # the test VM kept where its build boots it every 15 minutes (capacity.test_vm)
    "pool_room_below",
    "pool_room_below_used_sru",
    "room_mru",
    "room_sru",
    "pools_shape",
    "memory_lesson_id",
    "grace_contracts",  # with zos_cache_sru and pools_sru: figures.warning.WARNING_FIELDS
)


def node_rows(pks: list[int], now: datetime, *, always: bool = False) -> tuple[dict, dict, dict]:
    """These nodes' rows (pk -> values of NODE_FIELDS), their occupied slices and their live holds at
    `now` (as live_holds_by_node gives them); two queries. `always` reads even for no pk, so that the answer's
    number of queries does not depend on what the fleet holds."""
    if not pks and not always:
        return {}, {}, {}
    rows = {row[0]: row for row in Node.objects.filter(pk__in=set(pks)).values_list(*NODE_FIELDS)}
    occupied, held = occupied_and_held_of(list(rows), now)
    return rows, occupied, held


def policies_by_name() -> dict[str, capacity.Policy]:
    """Policy name -> its parameters: the stored rows over the built-in profiles of the same name."""
    policies = dict(capacity.PROFILES)
    policies.update({row.name: row.to_capacity() for row in Policy.objects.all()})
    return policies


def policy_of(effective: str, policies: dict[str, capacity.Policy]) -> capacity.Policy:
    # Node.effective_policy is "name vN", written with the node's figures; the name finds the row.
    name = effective.rsplit(" v", 1)[0] if effective else ""
    return policies.get(name) or policies[capacity.DEFAULT_PROFILE]


def live_holds_by_node(now: datetime) -> dict[int, list[tuple[capacity.Resources, capacity.Resources]]]:
    """Node pk -> its live holds as (the held slice's size, what it will be charged), in slice order."""
    held: dict[int, list[tuple[capacity.Resources, capacity.Resources]]] = {}
    rows = (
        live_holds(now)
        .order_by("node_id", "slice_index")
        .values_list("node_id", "slice__cru", "slice__mru", "slice__sru", "charge_mru", "charge_sru")
    )
    for node_pk, cru, mru, sru, charge_mru, charge_sru in rows:
        size = capacity.Resources(cru=cru, mru=mru, sru=sru)
        held.setdefault(node_pk, []).append((size, capacity.Resources(cru=cru, mru=charge_mru, sru=charge_sru)))
    return held


def occupied_and_held_of(pks: list[int], now: datetime) -> tuple[dict, dict]:
    """occupied_by_node and live_holds_by_node for these nodes in one query: their slices rented or deployed, and those
    free under a live hold (joined on that hold alone: at most one open hold a slice), in slice order."""
    occupied: dict[int, list[capacity.Resources]] = {}
    held: dict[int, list[tuple[capacity.Resources, capacity.Resources]]] = {}
    live = FilteredRelation("holds", condition=Q(holds__ended_at__isnull=True, holds__expires_at__gt=now))
    rows = (
        Slice.objects.filter(node__in=pks)
        .annotate(live_hold=live)
        .filter(Q(state__in=Slice.OCCUPIED_STATES) | Q(state=Slice.State.FREE, live_hold__isnull=False))
        .order_by("node_id", "index")
        .values_list("node_id", "state", "cru", "mru", "sru", "live_hold__charge_mru", "live_hold__charge_sru")
    )
    for node_pk, state, cru, mru, sru, charge_mru, charge_sru in rows:
        size = capacity.Resources(cru=cru, mru=mru, sru=sru)
        if state == Slice.State.FREE:
            held.setdefault(node_pk, []).append((size, capacity.Resources(cru=cru, mru=charge_mru, sru=charge_sru)))
        else:
            occupied.setdefault(node_pk, []).append(size)
    return occupied, held


def occupied_by_node(pks: list[int] | None = None, *, nodes=None) -> dict[int, list[capacity.Resources]]:
    """Node pk -> its rented and deployed slices' sizes in slice order (of these nodes): where their disks
    lie decides where the next one goes, in the reported pools or in each plausible layout."""
    occupied: dict[int, list[capacity.Resources]] = {}
    slices = Slice.objects.filter(state__in=Slice.OCCUPIED_STATES)
    rows = (
        (slices if pks is None else slices.filter(node__in=pks))
        .filter(**({"node__in": nodes.values("pk")} if nodes is not None else {}))
        .order_by("node_id", "index")
        .values_list("node_id", "cru", "mru", "sru")
    )
    for node_pk, cru, mru, sru in rows:
        occupied.setdefault(node_pk, []).append(capacity.Resources(cru=cru, mru=mru, sru=sru))
    return occupied
