"""What a registration checks before it carves: facts no node has are refused, saying which and why.

The same checks on every path that registers a node (one by one, a page of an onboarding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dashboard import capacity
from dashboard.grid.types import MAX_NODE_CRU  # one line for the parser and the registration
from dashboard.models import Node

# Anything above this is a typo, not a node (parse_size draws the same line).
MAX_NODE_BYTES = 1024 * capacity.TiB


class CatalogError(ValueError):
    """A request the catalog cannot carry out; the message says what and why."""


def check_registration(
    *,
    node_id: Any,
    total: capacity.Resources,
    farm_id: Any,
    twin_id: Any,
    status: str,
    pools: Sequence[int] | None,
) -> None:
    """CatalogError, saying which fact and why, for facts no node has; the same checks on every path."""
    _check_identity(node_id=node_id, farm_id=farm_id, twin_id=twin_id, status=status)
    _check_total(node_id, total)
    if pools is not None:
        _check_pools(node_id, total, pools)


def check_first_pool(*, node_id: int, pools: Sequence[int] | None, policy: capacity.Policy) -> None:
    """ZOS puts its cache on the first pool: one too small for the policy's reserve is no node to carve."""
    if pools and pools[0] < policy.reserve_sru:
        raise CatalogError(
            f"node {node_id}: the first pool is {capacity.format_size(pools[0])}; it must hold the "
            f"{capacity.format_size(policy.reserve_sru)} zos-cache that policy {policy.name} reserves"
        )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_identity(*, node_id: Any, farm_id: Any, twin_id: Any, status: str) -> None:
    if not _whole(node_id) or node_id <= 0:
        raise CatalogError(f"node id must be a whole number above zero, not {node_id!r}")
    if not _whole(farm_id) or farm_id < 0:
        raise CatalogError(f"farm id must be a whole number of zero or more, not {farm_id!r}")
    if twin_id is not None and (not _whole(twin_id) or twin_id < 0):
        raise CatalogError(f"twin id must be a whole number of zero or more, not {twin_id!r}")
    if status not in Node.Status.values:
        raise CatalogError(f"status must be one of {', '.join(Node.Status.values)}, not {status!r}")


def _check_total(node_id: int, total: capacity.Resources) -> None:
    if not all(_whole(getattr(total, r)) for r in ("cru", "mru", "sru", "hru")):
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


def _check_pools(node_id: int, total: capacity.Resources, pools: Sequence[int]) -> None:
    sizes = list(pools)
    if not sizes or any(not _whole(size) or size <= 0 for size in sizes):
        raise CatalogError("pools must be one or more SSD pool sizes in bytes, each above zero")
    if sum(sizes) > total.sru:
        raise CatalogError(
            f"node {node_id}: the pools add up to {capacity.format_size(sum(sizes))}, "
            f"more than the node's SSD total of {capacity.format_size(total.sru)}"
        )


def check_is_a_node(node_id: int, total: capacity.Resources, policy: capacity.Policy, carve: capacity.Carve) -> None:
    """What can never hold a VM is no node to register (issue 34, finding 7): no SSD at all, or memory
    below one slice and the reserve. One line, saying what is there and what one slice needs."""
    if total.sru == 0:
        raise CatalogError(f"node {node_id} has no SSD (sru 0): ZOS places every VM's disks on SSD, so it is no node")
    reserve = policy.reserve(total)
    needed = reserve.mru + policy.vm_charge(policy.slice_cru, policy.slice_mru, 0).mru
    if carve.new_slices == 0 and total.mru < needed:
        raise CatalogError(
            f"node {node_id} has {capacity.format_size(total.mru)} of memory, below one slice and the reserve "
            f"({capacity.format_size(needed)} under policy {policy.name}): it can host no VM"
        )
