"""What the simulated chain keeps per farm and node beyond capacity: the farm's public IPv4s, and a
node's features (ZOS-light) and GPUs.

- **Public IPv4 is the farm's pool** (tfchain pallet-smart-contract `_reserve_ip`): a node contract with
  `public_ips = N` reserves N of its farm's free IPs in the same extrinsic; a farm with fewer than N IPs
  at all is refused with `FarmHasNotEnoughPublicIPs`, one with fewer free with `FarmHasNotEnoughPublicIPsFree`.
  An IP is held by its contract: once the contract is gone (the VM deleted) the IP is free again, so
  here an IP is free when its contract_id names no live VM (nothing to update on a delete or a reset).
- **ZOS-light** nodes (features without `ipv4`/`ip`) have no public network config: a VM asking a public
  IPv4 there fails in ZOS (the simulator's words below; ZOS-light's own are not pinned down).
- **GPUs** only on a rented node: ZOS refuses a GPU VM with `usage of GPU is not allowed unless node is
  rented` (zos pkg/primitives/vm), after the chain took the contract.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from dashboard.grid.types import FarmPublicIps, NodeGpu, PublicIp
from sim.grid.checks import positive
from sim.grid.records import SimNode

SCHEMA = """
CREATE TABLE IF NOT EXISTS sim_farm_ip (
    farm_id INTEGER NOT NULL CHECK (farm_id > 0),
    ip TEXT NOT NULL,
    gateway TEXT NOT NULL,
    contract_id INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (farm_id, ip)
);
CREATE TABLE IF NOT EXISTS sim_node_feature (
    node_id INTEGER PRIMARY KEY REFERENCES sim_node (node_id) ON DELETE CASCADE,
    light INTEGER NOT NULL DEFAULT 0,
    gpus INTEGER NOT NULL DEFAULT 0 CHECK (gpus >= 0)
);
CREATE TABLE IF NOT EXISTS sim_gpu_use (contract_id INTEGER PRIMARY KEY, node_id INTEGER NOT NULL, gpus INTEGER NOT NULL)
"""
MAX_FARM_IPS = 250  # one /24 of documentation addresses a farm
GPU_NOT_RENTED = "usage of GPU is not allowed unless node is rented"
LIGHT_NO_IPV4 = "public ipv4 is not supported on this node: zos-light has no public network config"
# An IP's contract counts only while the contract lives (a VM of it is on the grid).
_LIVE = "contract_id <> 0 AND contract_id IN (SELECT deployment_id FROM sim_vm)"


def features(conn: sqlite3.Connection, node_ids: list[int]) -> dict[int, tuple[bool, int, tuple[int, ...]]]:
    """Node id -> (ZOS-light, GPUs, the contract holding each GPU, 0 for a free one); a node without a
    row is a full ZOS node without GPUs."""
    if not node_ids:
        return {}
    marks = ", ".join("?" * len(node_ids))
    rows = conn.execute(
        f"SELECT node_id, light, gpus FROM sim_node_feature WHERE node_id IN ({marks})", tuple(node_ids)
    )
    found = {row[0]: (bool(row[1]), row[2]) for row in rows}
    held: dict[int, list[int]] = {}
    if any(gpus for _light, gpus in found.values()):
        uses = conn.execute(
            f"SELECT node_id, contract_id, gpus FROM sim_gpu_use WHERE node_id IN ({marks}) "
            "AND contract_id IN (SELECT deployment_id FROM sim_vm) ORDER BY contract_id",
            tuple(node_ids),
        )
        for node_id, contract_id, count in uses:
            held.setdefault(node_id, []).extend([contract_id] * count)
    return {
        node_id: (light, gpus, tuple((held.get(node_id, []) + [0] * gpus)[:gpus]))
        for node_id, (light, gpus) in found.items()
    }


# A simulated GPU is an RTX 3090 as ZOS's zos.gpu.list names it (lspci's vendor and device, 24 GiB of memory
# in MiB: zosbase pkg/capacity GetGpuDevice), one PCI slot each.
SIM_GPU_VENDOR, SIM_GPU_DEVICE, SIM_GPU_VRAM_MIB = "NVIDIA Corporation", "GA102 [GeForce RTX 3090]", 24576


def simulated_gpus(held: Sequence[int]) -> tuple[NodeGpu, ...]:
    """The node's GPUs as its ZOS reports them, each with the contract holding it (0: free)."""
    return tuple(
        NodeGpu(
            id=f"0000:{0x41 + i:02x}:00.0/10de/2204",
            vendor=SIM_GPU_VENDOR,
            device=SIM_GPU_DEVICE,
            contract=contract,
            vram=SIM_GPU_VRAM_MIB,
        )
        for i, contract in enumerate(held)
    )


def features_set(conn: sqlite3.Connection, node_id: int, *, light: bool, gpus: int) -> None:
    if not isinstance(light, bool):
        raise ValueError(f"light must be true or false (got {light!r})")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 16:
        raise ValueError(f"gpus must be a whole number from 0 to 16 (got {gpus!r})")
    conn.execute(
        "INSERT INTO sim_node_feature (node_id, light, gpus) VALUES (?, ?, ?) "
        "ON CONFLICT (node_id) DO UPDATE SET light = excluded.light, gpus = excluded.gpus",
        (node_id, int(light), gpus),
    )


def farm_public_ips(conn: sqlite3.Connection, farm_id: int) -> FarmPublicIps:
    farm_id = positive(farm_id, "farm id")
    row = conn.execute("SELECT farm_name FROM sim_node WHERE farm_id = ? ORDER BY node_id LIMIT 1", (farm_id,))
    name = (row.fetchone() or [""])[0]
    rows = conn.execute(
        f"SELECT ip, gateway, CASE WHEN {_LIVE} THEN contract_id ELSE 0 END FROM sim_farm_ip WHERE farm_id = ? "
        "ORDER BY ip",
        (farm_id,),
    )
    return FarmPublicIps(farm_id=farm_id, farm_name=name, ips=tuple(PublicIp(r[0], r[1], r[2]) for r in rows))


def refusal(conn: sqlite3.Connection, node: SimNode, *, public_ips: int, gpus: int, rented: bool) -> str | None:
    """The chain's or ZOS's refusal of a VM asking these public IPs and GPUs on the node; None: allowed."""
    for value, what in ((public_ips, "public_ips"), (gpus, "gpus")):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 16:
            raise ValueError(f"{what} must be a whole number from 0 to 16 (got {value!r})")
    light, has_gpus, _held = features(conn, [node.node_id]).get(node.node_id, (False, 0, ()))
    if public_ips:
        pool = farm_public_ips(conn, node.farm_id)
        wrapped = f"failed to create contract on node {node.node_id}: failed to create contract: "
        if len(pool.ips) < public_ips:
            return wrapped + "FarmHasNotEnoughPublicIPs"
        if pool.free < public_ips:
            return wrapped + "FarmHasNotEnoughPublicIPsFree"
        if light:
            return f"workload pubip within deployment 0 failed with error: {LIGHT_NO_IPV4}"
    if gpus:
        if not rented:
            return f"workload vm within deployment 0 failed with error: {GPU_NOT_RENTED}"
        (taken,) = conn.execute(
            "SELECT COALESCE(SUM(gpus), 0) FROM sim_gpu_use WHERE node_id = ? "
            "AND contract_id IN (SELECT deployment_id FROM sim_vm)",
            (node.node_id,),
        ).fetchone()
        if taken + gpus > has_gpus:
            return f"workload vm within deployment 0 failed with error: no free gpu device ({has_gpus - taken} free)"
    return None


def reserve(conn: sqlite3.Connection, node: SimNode, contract_id: int, *, public_ips: int, gpus: int) -> None:
    """Hold the farm's first free IPs and the node's GPUs for this contract (after refusal said yes)."""
    if public_ips:
        conn.execute(
            "UPDATE sim_farm_ip SET contract_id = ? WHERE farm_id = ? AND ip IN "
            f"(SELECT ip FROM sim_farm_ip WHERE farm_id = ? AND NOT ({_LIVE}) ORDER BY ip LIMIT ?)",
            (contract_id, node.farm_id, node.farm_id, public_ips),
        )
    if gpus:
        conn.execute(
            "INSERT INTO sim_gpu_use (contract_id, node_id, gpus) VALUES (?, ?, ?)", (contract_id, node.node_id, gpus)
        )


class FarmPoolAdmin:
    """The farm's IPs on the simulated chain (needs SimulatedGrid's storage)."""

    def farm_ips_set(self, farm_id: int, count: int) -> FarmPublicIps:
        """Give the farm `count` public IPv4s: the taken ones stay, free ones are added or removed."""
        farm_id = positive(farm_id, "farm id")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_FARM_IPS:
            raise ValueError(f"a farm's IP count is a whole number from 0 to {MAX_FARM_IPS} (got {count!r})")
        with self._transaction() as conn:
            pool = farm_public_ips(conn, farm_id)
            taken = len(pool.ips) - pool.free
            if count < taken:
                raise ValueError(f"farm {farm_id} has {taken} IPs taken by live contracts: it cannot have {count}")
            conn.execute(f"DELETE FROM sim_farm_ip WHERE farm_id = ? AND NOT ({_LIVE})", (farm_id,))
            used = {ip.ip for ip in pool.ips if ip.contract_id}
            # Documentation addresses (RFC 5737's 198.51.100.0/24), one /24 a farm: never a real host.
            free = (f"198.51.100.{n}/24" for n in range(2, 2 + MAX_FARM_IPS) if f"198.51.100.{n}/24" not in used)
            for _, ip in zip(range(count - taken), free, strict=False):
                conn.execute(
                    "INSERT INTO sim_farm_ip (farm_id, ip, gateway) VALUES (?, ?, '198.51.100.1')", (farm_id, ip)
                )
            return farm_public_ips(conn, farm_id)

    def farm_ips(self, farm_id: int) -> FarmPublicIps:
        with self._transaction(write=False) as conn:
            return farm_public_ips(conn, farm_id)

    def node_features(self, node_id: int, *, light: bool = False, gpus: int = 0) -> None:
        """Make the node ZOS-light (no public IPv4) or give it GPUs."""
        with self._transaction() as conn:
            self._node(conn, node_id)
            features_set(conn, node_id, light=light, gpus=gpus)
