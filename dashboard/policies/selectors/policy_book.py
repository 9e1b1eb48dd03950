"""Which policy carves each node, read from the Policy rows: a read that selectors and services share.

A node's effective policy is, in order: its own override, its farm's override, the fleet default
Policy row, and finally the built-in "zos" profile (capacity.PROFILES). `PolicyBook` holds the rows
that matter for a set of nodes, loaded in one query, so a loop over nodes looks policies up with no
query at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db.models import Q

from dashboard import capacity
from dashboard.capacity.catalog import stale_reason
from dashboard.models import Node, Policy, Slice

# Beyond this many nodes, loading every policy row is cheaper than a long IN list.
POLICY_IN_LIST_LIMIT = 500


class PolicyBook:
    """The policy rows that matter for a set of nodes, loaded once; lookups need no query."""

    def __init__(self, rows: Iterable[Policy]):
        self.fleet: capacity.Policy | None = None
        self.by_farm: dict[int, capacity.Policy] = {}
        self.by_node: dict[int, capacity.Policy] = {}
        for row in rows:
            policy = row.to_capacity()
            if row.scope == Policy.Scope.NODE:
                self.by_node[row.node_id] = policy
            elif row.scope == Policy.Scope.FARM:
                self.by_farm[row.farm_id] = policy
            else:
                self.fleet = policy

    def for_node(self, *, pk: int | None, farm_id: int) -> capacity.Policy:
        if pk is not None and pk in self.by_node:
            return self.by_node[pk]
        return self.for_farm(farm_id)

    def for_farm(self, farm_id: int) -> capacity.Policy:
        if farm_id in self.by_farm:
            return self.by_farm[farm_id]
        return self.fleet or capacity.PROFILES[capacity.DEFAULT_PROFILE]


def policy_book(*, node_pks: Iterable[int] | None = None, farm_ids: Iterable[int] | None = None) -> PolicyBook:
    """One query: the fleet default plus the overrides of these nodes and farms (all when None)."""
    rows = Policy.objects.all()
    if node_pks is not None and farm_ids is not None:
        node_pks, farm_ids = set(node_pks), set(farm_ids)
        if len(node_pks) + len(farm_ids) <= POLICY_IN_LIST_LIMIT:
            rows = rows.filter(
                Q(scope=Policy.Scope.FLEET)
                | Q(scope=Policy.Scope.FARM, farm_id__in=farm_ids)
                | Q(scope=Policy.Scope.NODE, node_id__in=node_pks)
            )
    return PolicyBook(rows)


def policy_for_node(node: Node) -> capacity.Policy:
    """The node's effective policy: node override > farm override > fleet default > "zos"."""
    return policy_book(node_pks=[node.pk] if node.pk else [], farm_ids=[node.farm_id]).for_node(
        pk=node.pk, farm_id=node.farm_id
    )


def policies_for_nodes(nodes: Iterable[Node]) -> dict[int, capacity.Policy]:
    """Node pk -> effective policy, in one query whatever the number of nodes."""
    nodes = list(nodes)
    book = policy_book(node_pks=[n.pk for n in nodes], farm_ids=[n.farm_id for n in nodes])
    return {n.pk: book.for_node(pk=n.pk, farm_id=n.farm_id) for n in nodes}


def policy_named(name: str) -> capacity.Policy:
    """A stored Policy by name, else a built-in profile; PolicyError naming the choices."""
    row = Policy.objects.filter(name=name).first()
    if row is not None:
        return row.to_capacity()
    if name in capacity.PROFILES:
        return capacity.PROFILES[name]
    known = sorted(set(Policy.objects.values_list("name", flat=True)) | set(capacity.PROFILES))
    raise capacity.PolicyError(f"unknown policy {name!r}; choose one of: {', '.join(known)}")


def node_carve(node: Node, policy: capacity.Policy, *, occupied: Sequence[capacity.Resources] = ()) -> capacity.Carve:
    """What `policy` carves on this stored node, the occupied slices kept and its lessons counted."""
    return capacity.carve_memoised(
        node.total,
        policy,
        occupied=occupied,
        pools=node.pools,
        observed=node.observed,
        cache=node.zos_cache,
        light=bool(node.light),
    )


def catalog_is_stale(
    node: Node,
    policy: capacity.Policy,
    *,
    occupied: Sequence[capacity.Resources],
    free: Sequence[capacity.SliceSize | capacity.Resources] | None = None,
    carve: capacity.Carve | None = None,
) -> tuple[bool, str]:
    """(stale, why) for the node's stored catalog under `policy`; why is "" when it is current.

    `occupied` are the rented and deployed slices' sizes. Pass `free` (the free slices' sizes)
    and `carve` when they are at hand: then no query is made, which matters in a loop over
    nodes. Otherwise the free slices come from a prefetched `slices` or one query.
    """
    if free is None:
        free = free_sizes(node)
    if carve is None:
        carve = node_carve(node, policy, occupied=occupied)
    reason = stale_reason(
        carved_policy_name=node.carved_policy_name,
        carved_policy_version=node.carved_policy_version,
        carved_slice_sru=node.carved_slice_sru,
        carved_pools_known=node.carved_pools_known,
        policy=policy,
        free=[(s.cru, s.mru, s.sru) for s in free],
        carve=carve,
    )
    return bool(reason), reason


def free_sizes(node: Node) -> list[capacity.SliceSize]:
    """The node's free slices' sizes: from a prefetched `slices` if there is one, else one query."""
    prefetched = getattr(node, "_prefetched_objects_cache", {}).get("slices")
    if prefetched is not None:
        return [s.size for s in prefetched if s.state == Slice.State.FREE]
    return [
        capacity.SliceSize(cru=cru, mru=mru, sru=sru)
        for cru, mru, sru in node.slices.filter(state=Slice.State.FREE).values_list("cru", "mru", "sru")
    ]
