"""A node's room, read once for every door: what ZOS keeps for itself and the rest (capacity.kept), its
SSD pools now and the largest disk it takes now (capacity.disk_room). The node page (its bars, its tables),
the API's node answer and placement's best nodes all call `node_room` or `largest_disk_of`, so a figure is
said one way everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dashboard import capacity
from dashboard.capacity.disk_room import DiskRoom, disk_room
from dashboard.capacity.kept import Kept, disk_kept, memory_kept
from dashboard.figures.closure import closure_of
from dashboard.models import Node, PoolReport

# Who told the node's pools (PoolReport.Source), inside a sentence: the simulated grid's node answers in
# process, not over RMB, and no page may say otherwise.
POOLS_TOLD_BY = {
    PoolReport.Source.RMB: "the node itself, over RMB (through rmb-peer)",
    PoolReport.Source.ZOS: "the simulated node itself, over the simulated grid's RMB loopback (not rmb-peer)",
    PoolReport.Source.API: "an API token (a deployer that reads them over RMB)",
    PoolReport.Source.OPERATOR: "an operator (node page or node_register)",
}
# Whose refusals decided the node's memory lesson (Node.memory_lesson_scope).
LEARNT_FROM = {
    "own": "this node's own refusals",
    "build": "its ZOS build's lesson",
    "fleet": "the fleet's lesson (its ZOS version unknown)",
}


@dataclass(frozen=True)
class NodeRoom:
    memory: Kept
    disk: Kept
    pools: DiskRoom
    pools_told: str = ""  # who told the pools, in words

    @property
    def tables(self) -> tuple[Kept, Kept]:
        return (self.memory, self.disk)


def node_live(node: Node, policy: capacity.Policy, occupied: Sequence[capacity.Resources]) -> capacity.LiveNode:
    """What the precheck knows of the node beyond the proxy's totals, as catalogs.services.precheck takes it: its
    pools, what ZOS said each holds (when that agrees with the reading), its VMs, its lessons, its cache."""
    return capacity.live_node(
        policy=policy,
        pools=node.pools,
        occupied=occupied,
        observed=node.observed,
        pools_used=capacity.pools_used_agreeing(node.pools_used, node.used_sru, cache=node.zos_cache),
        cache=node.zos_cache,
        light=bool(node.light),
    )


def pools_told_words(node: Node) -> str:
    return POOLS_TOLD_BY.get(node.pools_source, "the registration")


def node_room(
    node: Node, policy: capacity.Policy, *, occupied: Sequence[capacity.Resources], free: Sequence[capacity.Resources]
) -> NodeRoom:
    """The node's memory and SSD part by part, and its pools and largest disk now (`occupied`: the rented
    and deployed slices' sizes in slice order; `free`: the free ones')."""
    live = node_live(node, policy, occupied)
    learnt = LEARNT_FROM.get(node.memory_lesson_scope, "its refusals")
    return NodeRoom(
        memory=memory_kept(
            node.total, policy, occupied=occupied, free=free, observed=node.observed, learnt_from=learnt
        ),
        disk=disk_kept(
            node.total, policy, occupied=occupied, free=free, cache=node.zos_cache, cache_told=pools_told_words(node)
        ),
        pools=disk_room(node.total, node.used, policy, live=live, closure=closure_of(node), cache=node.zos_cache),
        pools_told=pools_told_words(node),
    )


def largest_disk_of(node: Node, policy: capacity.Policy, occupied: Sequence[capacity.Resources]) -> int | None:
    """The largest data disk a VM of the policy's slice size gets on the node now (None: none fits, or unread)."""
    live = node_live(node, policy, occupied)
    return disk_room(
        node.total, node.used, policy, live=live, closure=closure_of(node), cache=node.zos_cache
    ).largest_disk
