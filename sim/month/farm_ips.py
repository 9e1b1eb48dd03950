"""The farms' public IPv4 in the month: `ipv4_share` of the deploy requests ask one from their farm.

A farm is FARM_NODES nodes by node id, its pool FARM_IPS IPs, fewer than its slices, so the pool
binds. An IP is held while its VM runs (released, or gone behind the catalog's back); past the pool
the chain refuses in its own words (NO_FREE_IP).
"""

from __future__ import annotations

FARM_NODES = 4
FARM_IPS = 4
NO_FREE_IP = "failed to create contract on node {node}: failed to create contract: FarmHasNotEnoughPublicIPsFree"


class FarmIps:
    """Who holds each farm's IPs: farm -> (node position, workload), read off the nodes' running VMs."""

    def __init__(self, nodes) -> None:
        self.nodes = nodes
        self.users: dict[int, set[tuple[int, str]]] = {}

    def farm(self, position: int) -> int:
        return self.nodes[position].spec.node_id // FARM_NODES

    def free(self, farm: int) -> int:
        users = self.users.get(farm, set())
        for position, workload in list(users):
            if not any(vm.workload_id == workload for vm in self.nodes[position].machine.vms):
                users.discard((position, workload))
        return FARM_IPS - len(users)

    def without(self) -> set[int]:
        """The farms with no IP free (once a request: once a node made the month quadratic)."""
        return {farm for farm in list(self.users) if self.free(farm) <= 0}

    def hold(self, position: int, workload: str) -> None:
        self.users.setdefault(self.farm(position), set()).add((position, workload))
