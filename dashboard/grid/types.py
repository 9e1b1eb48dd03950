"""What the grid tells us, in capacity terms, and the typed errors every backend raises.

Callers catch GridError (or one of its kinds) and never see a raw HTTP or parsing error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dashboard.capacity import MAX_POOLS, Resources, SliceSize

NODE_STATUSES = ("up", "down", "standby")


@dataclass(frozen=True)
class NodeGpu:
    """One GPU a node reports (the proxy's `gpus`, from ZOS's zos.gpu.list): its PCI id, names, the
    contract holding it (0: free) and its memory in MiB when said (ZOS's GPUInfo `vram`)."""

    id: str
    vendor: str = ""
    device: str = ""
    contract: int = 0
    vram: int | None = None


@dataclass(frozen=True)
class NodeCapacity:
    """One node as the grid reports it; `used` includes the node reserve (proxy accounting)."""

    node_id: int
    farm_id: int
    farm_name: str
    twin_id: int | None
    status: str  # up, down or standby
    # The proxy's `dedicated`: true for a node in a dedicated farm, but ALSO for any node with no
    # contracts, a rented one, or one with an extra fee. It does not mean "a dedicated node".
    dedicated: bool
    rented_by_twin_id: int | None
    total: Resources
    used: Resources
    country: str = ""
    city: str = ""
    updated_at: int | None = None
    # SSD pool sizes, when the reader learnt them from the node itself (storage_pools); the
    # Grid Proxy never reports them, and neither does the simulated grid's proxy face.
    pools_sru: tuple[int, ...] | None = None
    # A bound on the zos-cache's quota, from those pools' `used` beside this reading (nodes.services.pools.pools_cache).
    zos_cache_sru: int | None = None
    # The proxy's health verdict; None when the answer does not say.
    healthy: bool | None = None
    # The farm's power manager (farmerbot): the node's power state and the state it was asked to
    # take, "up" or "down" ("" when not reported). Target up with state down: a wake asked for.
    power_state: str = ""
    power_target: str = ""
    uptime: int | None = None  # seconds since the node booted, as it last reported; back to small on a reboot
    # The chain's rent of the whole node (the proxy's rentContractId, kept until the contract is deleted,
    # so in grace too), and what makes the chain keep a node for a renter (tfchain pallet-smart-contract
    # _create_node_contract: the farm is dedicated, or the node has an extra fee).
    rent_contract_id: int | None = None
    in_dedicated_farm: bool = False  # the proxy's inDedicatedFarm: the farm's own dedicated flag
    extra_fee: int = 0  # the proxy's extraFee: a dedicated node's extra fee (> 0: only a renter deploys)
    # The rent contract's state when it was read (GET /contracts?node_id=N&type=rent): "Created",
    # "GracePeriod", or "" (not read, or no rent contract).
    rent_state: str = ""
    # What the node's ZOS can deploy, as the proxy lists it (None: not listed, an older proxy), and
    # ZOS-light from it (grid.proxy.features.zos_light): True takes no public IPv4, False does, None is
    # not known (no features, or none that say). And the GPUs it reports: their count and, when listed, each.
    features: tuple[str, ...] | None = None
    light: bool | None = None
    num_gpu: int = 0
    gpus: tuple[NodeGpu, ...] = ()

    def as_dict(self) -> dict:
        return {
            "node_id": self.node_id,
            "farm_id": self.farm_id,
            "status": self.status,
            "total": self.total.as_dict(),
            "used": self.used.as_dict(),
        }


@dataclass(frozen=True)
class NodeStatistics:
    """GET /nodes/{id}/statistics: what the node itself says."""

    system: Resources
    total: Resources
    used: Resources
    deployments: int
    workloads: int


@dataclass(frozen=True)
class PoolMetrics:
    """One storage pool as ZOS reports it over RMB (`zos.storage.pools`, zosbase pkg.PoolMetrics):
    `{"name", "type", "size", "used"}`. ZOS lists its SSD pools then its HDD pools, each set in
    its device order; `size` is the device's size and `used` what the pool's filesystem holds
    (0 for a pool that is not mounted), both in bytes (zosbase pkg/storage Metrics, poolUsage)."""

    name: str
    type: str  # "ssd" or "hdd"
    size: int
    used: int

    def as_dict(self) -> dict:
        return {"name": self.name, "type": self.type, "size": self.size, "used": self.used}


@dataclass(frozen=True)
class NodePage:
    nodes: tuple[NodeCapacity, ...]
    page: int
    size: int
    # Nodes the page held that were malformed: (node id or position, reason). Never fatal for the page.
    skipped: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    # How many nodes match the query in all, when the backend says (the Grid Proxy's `count` header
    # with ret_count=true); None when it does not. A paged read never reads past it.
    count: int | None = None

    @property
    def entries(self) -> int:
        """What the grid sent, malformed entries included: a page with fewer than `size` is the last."""
        return len(self.nodes) + len(self.skipped)


# Contract states that hold capacity on a node: the proxy counts these in `used` (docs/domain.md).
LIVE_CONTRACT_STATES = ("Created", "GracePeriod")
# Node contracts whose deployment holds no slice-sized capacity: a VM's network, a gateway's name.
NO_CAPACITY_DEPLOYMENTS = ("network", "gateway-name-proxy", "gateway-fqdn-proxy")


@dataclass(frozen=True)
class Contract:
    """One live contract on a node, from GET /contracts?node_id=N&state=Created,GracePeriod.

    `type` is the proxy's: "node" (a deployment on the node), "rent" (the whole node rented) or
    "name". A node contract's `deployment_type` and `name` come from its deployment_data
    ({"type": "vm", "name": ...}); "" when it carries none.
    """

    contract_id: int
    twin_id: int
    node_id: int
    state: str
    type: str
    created_at: int | None = None
    deployment_type: str = ""
    name: str = ""

    @property
    def holds_capacity(self) -> bool:
        """A deployment that takes memory and disk on the node (a VM, a k8s worker, a zdb, or one whose
        kind is not said): the ones the catalog's slices must account for."""
        return self.type == "node" and self.deployment_type not in NO_CAPACITY_DEPLOYMENTS

    @property
    def workload_id(self) -> str:
        """ZOS's id of the deployment's workload, "<twin>-<contract>-<name>" ("" without a name)."""
        return f"{self.twin_id}-{self.contract_id}-{self.name}" if self.name else ""


@dataclass(frozen=True)
class NodeContracts:
    """Every live contract of one node, read in full (a partial read raises instead)."""

    node_id: int
    contracts: tuple[Contract, ...]
    requests: int = 1  # pages asked for


@dataclass(frozen=True)
class VmDeployed:
    workload_id: str
    node_id: int


class GridError(Exception):
    """Base of every grid failure; `cause` matches Deployment.Cause values."""

    cause = "unknown"


class NodeNotFound(GridError):
    cause = "node-offline"


class NodeAway(GridError):
    """The node is down or on standby: it cannot answer or host anything now."""

    cause = "node-offline"  # the stored value (Deployment.Cause), read by other programs: kept


# Its name before "away" became the one word for a node that is down or on standby.
NodeOffline = NodeAway


class GridUnavailable(GridError):
    """The grid could not be reached, timed out, or answered 5xx after the retries."""

    cause = "grid-unavailable"


class MalformedPayload(GridError):
    """The grid answered, but not in the shape we can trust; the message names the field."""

    cause = "grid-unavailable"


class QueryRefused(GridError):
    """The grid refused the query itself (HTTP 400): a proxy older than a parameter we sent (`node_ids`
    exists only since v0.15.6, and an unknown parameter is a 400, not ignored)."""

    cause = "grid-unavailable"


class DeployNotSupported(GridError):
    """The backend is read-only (the public Grid Proxy cannot deploy)."""

    cause = "unknown"


class PoolsNotAvailable(GridError):
    """The backend cannot tell a node's storage pools (the public Grid Proxy never reports them)."""

    cause = "unknown"


POOLS_NOT_AVAILABLE = (
    "pools are not available through the Grid Proxy; ZOS answers them over RMB (zos.storage.pools): "
    "report them with PUT /api/v1/nodes/{id}/pools or node_register --pools"
)


class NodeSilent(GridError):
    """The node did not answer over RMB before the call's deadline: off, on standby, unreachable,
    or the peer lost the call (RMB has no other end than a deadline)."""

    cause = "node-offline"


class RmbRefused(GridError):
    """The node (or the relay) answered a call with an `err`: its code and message in the words."""

    cause = "unknown"


class RmbUndelivered(GridError):
    """Our rmb-peer could not deliver the call (rmb-rs src/peer/postman.rs `undeliverable`: an answer with
    the call's `ref`, an empty `src`, `now` 0 and an `err`): the node said nothing. Code 103 (rmb-rs
    src/peer/protocol.rs: an unknown twin) will not change by asking again; the others may."""

    cause = "node-offline"


@dataclass(frozen=True)
class ZosVersion:
    """`zos.system.version`: the node's ZOS build and its zinit's, as it says them (cleaned text)."""

    zos: str
    zinit: str = ""


class DeploymentFailed(GridError):
    """ZOS refused the workload; `raw` is ZOS's own message (classify it for a cause)."""

    def __init__(self, raw: str):
        super().__init__(raw)
        self.raw = raw


@dataclass(frozen=True)
class PublicIp:
    """One of a farm's public IPv4s on the chain; contract_id 0 when free."""

    ip: str
    gateway: str
    contract_id: int = 0


@dataclass(frozen=True)
class FarmPublicIps:
    """A farm's public IPv4 pool (the proxy's farm `publicIps`), shared by all its nodes."""

    farm_id: int
    farm_name: str
    ips: tuple[PublicIp, ...] = ()

    @property
    def free(self) -> int:
        return sum(1 for ip in self.ips if not ip.contract_id)


class Grid(Protocol):
    """The one interface the product uses; see dashboard/grid/__init__.py for get_grid()."""

    name: str
    can_deploy: bool

    def node(self, node_id: int) -> NodeCapacity: ...

    def nodes(
        self,
        *,
        farm_id: int | None = None,
        page: int = 1,
        size: int = 50,
        farm_ids: Sequence[int] | None = None,
        node_ids: Sequence[int] | None = None,
        status: str | None = None,
    ) -> NodePage:
        """One page of GET /nodes, ordered by node id; filters combine (farm_id joins farm_ids).

        A page holding fewer entries than `size` (NodePage.entries, skipped ones included) is the last.
        """
        ...

    def statistics(self, node_id: int) -> NodeStatistics: ...

    def contracts(self, node_id: int) -> NodeContracts:
        """The node's live contracts (Created or GracePeriod), all pages of them, or a GridError:
        never a part of them, since a contract left out would make a running VM look gone."""
        ...

    def rent_contract(self, node_id: int) -> Contract | None:
        """The node's live rent contract (GET /contracts?node_id=N&type=rent&state=Created,GracePeriod),
        None when it has none: one request, for its state (a node page does not say it)."""
        ...

    def storage_pools(self, node_id: int) -> tuple[PoolMetrics, ...]:
        """The node's own pool report (`zos.storage.pools`); PoolsNotAvailable where the backend cannot ask."""
        ...

    def farm_ips(self, farm_id: int) -> FarmPublicIps:
        """The farm's public IPv4s (GET /farms?farm_id=F, its `publicIps`): one request."""
        ...

    def deploy_vm(self, node_id: int, size: SliceSize, *, name: str, public_ips: int = 0, gpus: int = 0) -> VmDeployed:
        """public_ips: IPv4s the node contract reserves from the farm's pool; gpus: devices the VM takes."""
        ...

    def delete_vm(self, node_id: int, workload_id: str) -> None: ...


__all__ = [
    "LIVE_CONTRACT_STATES",
    "NODE_STATUSES",
    "Contract",
    "NodeContracts",
    "DeployNotSupported",
    "DeploymentFailed",
    "Grid",
    "GridError",
    "GridUnavailable",
    "MalformedPayload",
    "NodeCapacity",
    "NodeGpu",
    "FarmPublicIps",
    "PublicIp",
    "NodeAway",
    "NodeNotFound",
    "NodeOffline",
    "NodeSilent",
    "RmbRefused",
    "ZosVersion",
    "MAX_POOLS",
    "NodePage",
    "NodeStatistics",
    "QueryRefused",
    "POOLS_NOT_AVAILABLE",
    "PoolMetrics",
    "PoolsNotAvailable",
    "VmDeployed",
    "WorkloadNotFound",
    "MAX_NODE_CRU",
    "MAX_NODE_MRU",
    "MAX_NODE_SRU",
    "MAX_NODE_HRU",
]


class WorkloadNotFound(GridError):
    """delete_vm named a workload the node does not carry."""


# Past these a reported figure is a broken record, not a real machine: the largest
# servers ship with a few hundred cores, a few TiB of memory and some hundred TiB of
# disk. The proxy parser refuses them; the simulator refuses to be configured with them.
MAX_NODE_CRU = 4096
MAX_NODE_MRU = 64 * 1024**4  # 64 TiB
MAX_NODE_SRU = 1024**5  # 1 PiB
MAX_NODE_HRU = 8 * 1024**5  # 8 PiB: storage nodes carry dozens of large HDDs
