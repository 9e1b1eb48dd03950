"""What a slice carries besides its size, and the refusal when the farm or the chain cannot give it.

A public IPv4 comes from the farm's pool on the chain (shared by all its nodes; a ZOS-light node takes
none); a GPU is usable only on a node the deployer rents (ZOS: "usage of GPU is not allowed unless node is
rented"). The carve does not change: what changes is whether one more slice *with* it can be deployed.
Pure: numbers in, a verdict with its words out.
"""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.capacity.precheck import Verdict
from dashboard.capacity.sizes import Resources

PUBLIC_IP = "public-ip"
GPU = "gpu"


@dataclass(frozen=True)
class CarriesVerdict(Verdict):
    """A slice refused for what it carries; `cause` is PUBLIC_IP or GPU, `detail` the sentence."""

    cause: str = PUBLIC_IP
    detail: str = ""

    @property
    def words(self) -> str:
        return self.detail

    def as_dict(self) -> dict:
        return {**super().as_dict(), "cause": self.cause}


def ipv4_refusal(
    size: Resources,
    *,
    node_id: int,
    light: bool | None,
    farm_id: int,
    farm_name: str,
    total_ips: int,
    free_ips: int,
    held_ips: int,
    needed: int,
) -> CarriesVerdict | None:
    """None when the farm can give the VM its `needed` public IPv4s now; else the refusal naming the farm."""
    if needed <= 0:
        return None
    farm = f"farm {farm_id}" + (f" ({farm_name})" if farm_name else "")
    if light:
        detail = (
            f"node {node_id} is ZOS-light: it takes no public IPv4, and this slice needs {needed}; "
            f"place it on another node of {farm} or sell it without the IP"
        )
    elif free_ips - held_ips >= needed:
        return None
    else:
        held = f", {held_ips} more held for buyers" if held_ips else ""
        detail = (
            f"public IPv4: needs {needed}, {farm} has {max(free_ips - held_ips, 0)} free of {total_ips}{held}; "
            f"the chain would refuse it (FarmHasNotEnoughPublicIPsFree): add IPs to {farm} or deploy in another farm"
        )
    return CarriesVerdict(fits=False, needed=size, available=Resources(), cause=PUBLIC_IP, detail=detail)


def gpu_refusal(size: Resources, *, node_id: int, rented_by_us: bool, gpus: int, needed: int) -> CarriesVerdict | None:
    """None when the node can give the VM its GPUs (rented by the marketplace, with the devices)."""
    if needed <= 0:
        return None
    if not rented_by_us:
        detail = (
            f"GPU: node {node_id} is not rented by the marketplace, and ZOS allows a GPU only on a rented node "
            "(usage of GPU is not allowed unless node is rented): rent it first"
        )
    elif gpus < needed:
        detail = f"GPU: needs {needed}, node {node_id} reports {gpus}"
    else:
        return None
    return CarriesVerdict(fits=False, needed=size, available=Resources(), cause=GPU, detail=detail)
