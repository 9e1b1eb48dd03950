"""A registered node's stored facts in the grid's reading shape (grid.types.NodeCapacity), for the code
that takes a reading: the precheck on a stored reading, and the calls that ask nodes over RMB."""

from __future__ import annotations

from dashboard import capacity
from dashboard.grid.types import NodeCapacity
from dashboard.models import Node


def node_stored_reading(node: Node, *, used: capacity.Resources | None = None) -> NodeCapacity:
    """What the node's row says a reading said: `used` when given (else the stored one, or nothing used
    when it has none), its pools, build flags and GPUs."""
    return NodeCapacity(
        node_id=node.grid_id,
        farm_id=node.farm_id,
        farm_name=node.farm_name,
        twin_id=node.twin_id,
        status=node.status,
        dedicated=node.dedicated,
        rented_by_twin_id=node.rented_by_twin_id,
        total=node.total,
        used=used or node.used or capacity.Resources(),
        pools_sru=node.pools,
        light=node.light,
        num_gpu=node.gpus,
    )
