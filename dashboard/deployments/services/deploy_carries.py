"""What a deployed slice carries besides its size: its public IPv4s and GPU, as the policy sells them,
checked against the farm's pool and the node's rent before anything is sent (capacity.carries).

The farm's IPs are read at once for an IPv4 deploy (one request, GET /farms?farm_id=F) and again after
it, or after the chain refused for IPs: every node of the farm then sees the pool as it is.
"""

from __future__ import annotations

import logging

from dashboard import capacity
from dashboard.deployments.services.deploy_errors import DeployError
from dashboard.grid.types import Grid, NodeCapacity
from dashboard.models import Node, Slice
from dashboard.nodes.selectors.farm_ips import farm_ipv4, policy_carries
from dashboard.nodes.services.farm_ips import farm_ips_refresh, farm_ips_store
from dashboard.policies.selectors.carries import rented_by_marketplace

log = logging.getLogger(__name__)


class CarriesNotSold(DeployError):
    """The deploy asks an IPv4 or a GPU its policy does not sell; the message says what it sells."""


def deploy_carried(policy_name: str, public_ipv4: int | None, gpus: int) -> tuple[int, int]:
    """(IPv4s, GPUs) this deploy asks, as the policy lets it; DeployError for what the policy does not sell."""
    carries = policy_carries(policy_name)
    ips = carries.public_ipv4 if public_ipv4 is None else public_ipv4
    allowed = {carries.public_ipv4} | ({carries.public_ipv4 + 1} if carries.ipv4_addon else set())
    if ips not in allowed:
        raise CarriesNotSold(
            f"policy {policy_name} sells slices with {' or '.join(str(n) for n in sorted(allowed))} public IPv4, not {ips}"
        )
    if gpus not in ((0, 1) if carries.gpu_slices else (0,)):
        raise CarriesNotSold(
            f"policy {policy_name} sells {'one GPU a slice' if carries.gpu_slices else 'no GPU slice'}, not {gpus}"
        )
    return ips, gpus


def carried_asked(ips: int, gpus: int) -> dict[str, int]:
    """Grid.deploy_vm's keywords for what the VM carries; none when it carries nothing (a grid double of the
    tests that knows no such keyword is asked as before)."""
    return {k: v for k, v in (("public_ips", ips), ("gpus", gpus)) if v}


def carries_verdict(node: Node, slice_: Slice, live: NodeCapacity, grid: Grid, *, ips: int, gpus: int):
    """The refusal for what the slice carries (capacity.carries), or None. Reads the farm's IPs (one request)
    when the VM asks one: a reading an hour old would sell an IP the chain has given away since."""
    size = slice_.size
    if gpus:
        refused = capacity.gpu_refusal(
            size, node_id=node.grid_id, rented_by_us=rented_by_marketplace(live), gpus=live.num_gpu, needed=gpus
        )
        if refused is not None:
            return refused
    if not ips:
        return None
    row = farm_ips_store(farm=grid.farm_ips(node.farm_id))
    held = farm_ipv4(node.farm_id).held_ips
    return capacity.ipv4_refusal(
        size,
        node_id=node.grid_id,
        light=live.light,
        farm_id=node.farm_id,
        farm_name=row.farm_name or node.farm_name,
        total_ips=row.total,
        free_ips=row.free,
        held_ips=held,
        needed=ips,
    )


def farm_ips_read_again(node: Node, grid: Grid) -> None:
    read = farm_ips_refresh(farm_ids=[node.farm_id], grid=grid)
    if read.failed:
        log.warning("farm %s: public IPs not read again after a deploy: %s", node.farm_id, read.failed)
