"""What a node offers beyond plain slices: slices with a public IPv4 (bounded by its farm's pool,
nodes.selectors.farm_ips) and GPU slices (one device each, only on a node the marketplace rents: ZOS refuses a
GPU off rent with "usage of GPU is not allowed unless node is rented")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Sum

from dashboard.grid.types import NodeCapacity
from dashboard.models import Deployment, Node
from dashboard.nodes.selectors.farm_ips import NodeIpv4, node_ipv4


@dataclass(frozen=True)
class NodeCarries:
    light: bool | None  # None: not known (the Grid Proxy did not list its features)
    gpus: int
    ipv4: NodeIpv4
    gpu_slices: int
    gpu_words: str


def rented_by_marketplace(node: Node | NodeCapacity) -> bool:
    """The marketplace rents the node (a twin of MARKETPLACE_TWIN_ID holds its rent contract), as stored
    or as a reading says: its GPUs are ours to sell, and its rent contract's state is worth a read."""
    return bool(node.rent_contract_id) and node.rented_by_twin_id in settings.MARKETPLACE_TWIN_ID


def node_gpu_slices(node: Node) -> tuple[int, str]:
    """(GPU slices offered, why): a GPU each, never more than the node's free devices or placeable slices."""
    if not node.gpus:
        return 0, "no GPU on this node"
    if not rented_by_marketplace(node):
        return 0, (
            f"0 GPU slices: node {node.grid_id} has {node.gpus} GPU(s), but ZOS lets a VM use one only on a node "
            "the marketplace rents (it does not rent this one)"
        )
    taken = (
        Deployment.objects.filter(node=node, state=Deployment.State.DEPLOYED, gpus__gt=0).aggregate(n=Sum("gpus"))["n"]
        or 0
    )
    slices = max(min(node.gpus - taken, node.placeable_now or 0), 0)
    return (
        slices,
        f"{slices} GPU slices: {node.gpus - taken} of its {node.gpus} GPUs free, the node rented by the marketplace",
    )


def node_carries(node: Node, now: datetime | None = None) -> NodeCarries:
    gpu_slices, gpu_words = node_gpu_slices(node)
    return NodeCarries(
        light=node.light, gpus=node.gpus, ipv4=node_ipv4(node, now), gpu_slices=gpu_slices, gpu_words=gpu_words
    )
