"""The slice catalog: which policy a node is carved with, registering a node, stale catalogs.

A node's effective policy is, in order: its own override, its farm's override, the fleet
default Policy row, and finally the built-in "zos" profile. A catalog is stale when it was
carved under another policy (name or version) or when its free slices are not what that
policy would carve now, counting rented and deployed slices as occupied.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from dashboard import capacity
from dashboard.models import AuditEvent, Node, Policy, Slice

# Anything above this is a typo, not a node (parse_size draws the same line).
MAX_NODE_BYTES = 1024 * capacity.TiB
MAX_NODE_CRU = 4096
# Beyond this many nodes, loading every policy row is cheaper than a long IN list
# (and SQLite caps the number of query parameters).
POLICY_IN_LIST_LIMIT = 500


class CatalogError(ValueError):
    """A request the catalog cannot carry out; the message says what and why."""


class NodeAlreadyRegistered(CatalogError):
    def __init__(self, node_id: int):
        super().__init__(
            f"node {node_id} is already registered; re-register it to re-carve its catalog "
            f"(manage.py node_reregister {node_id})"
        )
        self.node_id = node_id


# --- policies ---------------------------------------------------------------------------


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


# --- carving ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=8192)
def _carve_memo(
    total: capacity.Resources,
    policy: capacity.Policy,
    occupied: tuple[capacity.Resources, ...],
    pools: tuple[int, ...] | None,
    observed: capacity.Observed,
) -> capacity.Carve:
    return capacity.carve(total, policy, occupied=occupied, pools=pools, observed=observed)


def carve_memoised(
    total: capacity.Resources,
    policy: capacity.Policy,
    *,
    occupied: Sequence[capacity.Resources] = (),
    pools: Sequence[int] | None = None,
    observed: capacity.Observed = capacity.NOTHING_OBSERVED,
) -> capacity.Carve:
    """capacity.carve, remembered: a fleet has many nodes of the same size and the carve is pure.

    Policies and resources are frozen values, so a changed policy is a different key.
    """
    return _carve_memo(total, policy, tuple(occupied), tuple(pools) if pools else None, observed)


def node_carve(node: Node, policy: capacity.Policy, *, occupied: Sequence[capacity.Resources] = ()) -> capacity.Carve:
    """What `policy` carves on this stored node, the occupied slices kept and its lessons counted."""
    return carve_memoised(node.total, policy, occupied=occupied, pools=node.pools, observed=node.observed)


def catalog_slices(*, node: Node, carve: capacity.Carve, start_index: int, generation: int) -> list[Slice]:
    """Unsaved free Slice rows for the carve's new slices, numbered from start_index."""
    size = carve.slice
    return [
        Slice(node=node, index=start_index + i, cru=size.cru, mru=size.mru, sru=size.sru, generation=generation)
        for i in range(carve.new_slices)
    ]


# --- registering a node --------------------------------------------------------------------


def node_register(
    *,
    node_id: int,
    total: capacity.Resources,
    farm_id: int,
    farm_name: str = "",
    twin_id: int | None = None,
    status: str = "up",
    dedicated: bool = False,
    pools: Sequence[int] | None = None,
    policy_name: str | None = None,
    by=None,
    source: str = "command",
    used: capacity.Resources | None = None,
    seen_at: datetime | None = None,
    origin: str = "",
    country: str = "",
    city: str = "",
) -> Node:
    """Carve a new node with its effective policy (or `policy_name`) and store it with its catalog.

    One transaction: the node, its slices and an audit event, or nothing. `by` is the user
    (None for the command line); `source` and `origin` (a host or address) say from where.
    `used` is the live used capacity when it was read (at `seen_at`, default now).
    """
    from dashboard.services.figures import figures_refresh  # it builds on this module

    _check_registration(node_id=node_id, total=total, farm_id=farm_id, twin_id=twin_id, status=status, pools=pools)
    pools = list(pools) if pools else None
    if policy_name:
        policy = policy_named(policy_name)
    else:
        policy = policy_book(node_pks=[], farm_ids=[farm_id]).for_farm(farm_id)
    if pools and pools[0] < policy.reserve_sru:
        raise CatalogError(
            f"node {node_id}: the first pool is {capacity.format_size(pools[0])}; it must hold the "
            f"{capacity.format_size(policy.reserve_sru)} zos-cache that policy {policy.name} reserves"
        )
    carve = capacity.carve(total, policy, pools=pools)

    if Node.objects.filter(node_id=node_id).exists():
        raise NodeAlreadyRegistered(node_id)
    if used is not None and seen_at is None:
        seen_at = timezone.now()  # a live reading is from now unless told otherwise
    try:
        with transaction.atomic():
            node = Node.objects.create(
                node_id=node_id,
                farm_id=farm_id,
                farm_name=farm_name,
                country=country,
                city=city,
                twin_id=twin_id,
                status=status,
                dedicated=dedicated,
                total_cru=total.cru,
                total_mru=total.mru,
                total_sru=total.sru,
                total_hru=total.hru,
                pools_sru=pools,
                used_cru=used.cru if used else None,
                used_mru=used.mru if used else None,
                used_sru=used.sru if used else None,
                used_hru=used.hru if used else None,
                seen_at=seen_at,
                carved_policy_name=policy.name,
                carved_policy_version=policy.version,
                carved_slice_sru=carve.slice.sru,
                carved_deployable=carve.slices,
                catalog_generation=1,
            )
            Slice.objects.bulk_create(catalog_slices(node=node, carve=carve, start_index=0, generation=1))
            figures_refresh([node.pk])
            AuditEvent.objects.create(
                actor=by,
                source=source,
                action="node registered",
                node=node,
                message=_registered_words(node_id, policy, carve),
                detail={
                    "origin": origin,
                    "policy": {"name": policy.name, "version": policy.version},
                    "total": total.as_dict(),
                    "pools": pools,
                    "carve": carve.as_dict(),
                },
            )
    except IntegrityError:
        # Registered by someone else between the check and the insert.
        if Node.objects.filter(node_id=node_id).exists():
            raise NodeAlreadyRegistered(node_id) from None
        raise
    return node


def _registered_words(node_id: int, policy: capacity.Policy, carve: capacity.Carve) -> str:
    if not carve.new_slices:
        return f"node {node_id} registered with policy {policy.name} v{policy.version}: no slice fits ({', '.join(carve.notes)})"
    return (
        f"node {node_id} registered with policy {policy.name} v{policy.version}: "
        f"{carve.new_slices} slice(s) of {_size_words(carve.slice)}"
    )


def _check_registration(
    *,
    node_id: Any,
    total: capacity.Resources,
    farm_id: Any,
    twin_id: Any,
    status: str,
    pools: Sequence[int] | None,
) -> None:
    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not whole(node_id) or node_id <= 0:
        raise CatalogError(f"node id must be a whole number above zero, not {node_id!r}")
    if not whole(farm_id) or farm_id < 0:
        raise CatalogError(f"farm id must be a whole number of zero or more, not {farm_id!r}")
    if twin_id is not None and (not whole(twin_id) or twin_id < 0):
        raise CatalogError(f"twin id must be a whole number of zero or more, not {twin_id!r}")
    if status not in Node.Status.values:
        raise CatalogError(f"status must be one of {', '.join(Node.Status.values)}, not {status!r}")
    if not all(whole(getattr(total, r)) for r in ("cru", "mru", "sru", "hru")):
        raise CatalogError("node capacity must be whole numbers (cores and bytes)")
    if not 1 <= total.cru <= MAX_NODE_CRU:
        raise CatalogError(f"node {node_id}: {total.cru} CPU cores is not a node (1 to {MAX_NODE_CRU})")
    if total.mru <= 0:
        raise CatalogError(f"node {node_id}: memory must be more than zero")
    for resource in ("mru", "sru", "hru"):
        value = getattr(total, resource)
        if value < 0 or value > MAX_NODE_BYTES:
            raise CatalogError(
                f"node {node_id}: {capacity.RESOURCE_WORDS[resource]} of {capacity.format_size(value)} "
                "is not a node (0 to 1 PiB)"
            )
    if pools is not None:
        sizes = list(pools)
        if not sizes or any(not whole(size) or size <= 0 for size in sizes):
            raise CatalogError("pools must be one or more SSD pool sizes in bytes, each above zero")
        if sum(sizes) > total.sru:
            raise CatalogError(
                f"node {node_id}: the pools add up to {capacity.format_size(sum(sizes))}, "
                f"more than the node's SSD total of {capacity.format_size(total.sru)}"
            )


# --- stale catalogs -----------------------------------------------------------------------


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
        free = _free_sizes(node)
    if carve is None:
        carve = node_carve(node, policy, occupied=occupied)
    reason = stale_reason(
        carved_policy_name=node.carved_policy_name,
        carved_policy_version=node.carved_policy_version,
        carved_slice_sru=node.carved_slice_sru,
        policy=policy,
        free=[(s.cru, s.mru, s.sru) for s in free],
        carve=carve,
    )
    return bool(reason), reason


def stale_reason(
    *,
    carved_policy_name: str,
    carved_policy_version: int,
    carved_slice_sru: int,
    policy: capacity.Policy,
    free: Sequence[tuple[int, int, int]],
    carve: capacity.Carve,
) -> str:
    """Why a catalog is stale, in words ("" when it is not); pure, for callers holding plain rows.

    `free` holds (cru, mru, data sru) of each free slice; `carve` is what the policy carves
    on the node with its rented and deployed slices kept. `catalog_stale` is the same test
    without the words.
    """
    reasons = []
    same_policy = carved_policy_name == policy.name and carved_policy_version == policy.version
    if carved_policy_name != policy.name:
        reasons.append(
            f"carved with policy {carved_policy_name} v{carved_policy_version}; "
            f"its policy is {policy.name} v{policy.version}"
        )
    elif carved_policy_version != policy.version:
        reasons.append(f"carved with {policy.name} v{carved_policy_version}; the policy is now v{policy.version}")

    if len(free) != carve.new_slices:
        reasons.append(f"{len(free)} free slice(s) where the policy carves {carve.new_slices}")
    wrong = _free_not_current(free, carve=carve, carved_slice_sru=carved_slice_sru, same_policy=same_policy)
    if wrong:
        shown = ", ".join(_size_words(capacity.SliceSize(*size)) for size in wrong[:3])
        reasons.append(f"free slices of {shown} where the policy carves {_size_words(carve.slice)}")
    return "; ".join(reasons)


def catalog_stale(
    *,
    carved_policy_name: str,
    carved_policy_version: int,
    carved_slice_sru: int,
    policy: capacity.Policy,
    free: Sequence[tuple[int, int, int]],
    carve: capacity.Carve,
) -> bool:
    """stale_reason(...) != "", without writing the words: a fleet page needs the words of 50 nodes only."""
    if carved_policy_name != policy.name or carved_policy_version != policy.version:
        return True
    if len(free) != carve.new_slices:
        return True
    return bool(_free_not_current(free, carve=carve, carved_slice_sru=carved_slice_sru, same_policy=True))


def _free_not_current(
    free: Sequence[tuple[int, int, int]], *, carve: capacity.Carve, carved_slice_sru: int, same_policy: bool
) -> list[tuple[int, int, int]]:
    """The distinct free sizes that are not what the policy carves, smallest first."""
    target = carve.slice
    if not (carve.new_slices and free):
        return []

    # Deployments change the rounding of what is left, so a re-carve may offer a slightly
    # larger disk than the node was carved with. Free slices still of the carved size, no
    # larger than the policy's, are current: otherwise every deploy would make a node stale.
    def current(size: tuple[int, int, int]) -> bool:
        cru, mru, sru = size
        if (cru, mru) != (target.cru, target.mru):
            return False
        return sru == target.sru or (same_policy and sru == carved_slice_sru and sru <= target.sru)

    return sorted(size for size in set(free) if not current(size))


def _free_sizes(node: Node) -> list[capacity.SliceSize]:
    prefetched = getattr(node, "_prefetched_objects_cache", {}).get("slices")
    if prefetched is not None:
        return [s.size for s in prefetched if s.state == Slice.State.FREE]
    return [
        capacity.SliceSize(cru=cru, mru=mru, sru=sru)
        for cru, mru, sru in node.slices.filter(state=Slice.State.FREE).values_list("cru", "mru", "sru")
    ]


def _size_words(size: capacity.SliceSize) -> str:
    return f"{size.cru} vCPU / {capacity.format_size(size.mru)} / {capacity.format_size(size.sru)}"
