"""The simulated grid's fleet, kept in one SQLite file, behind the Grid interface.

Web, worker and management commands each open the same file, so it is the one grid they all see.
Stdlib sqlite3 only (no Django): WAL so readers never wait on writers, and every deploy runs inside
`BEGIN IMMEDIATE`, which takes the write lock before the node is read, so two deploys racing for the
last room on a node are serialised and the second one sees the first one's VM. It plays the outside
world: its store is not ours. Each deploy is decided by the node's ZosMachine (machine.py), built from
its row and VMs; the row keeps storaged's state (pools, vdisks; the zos-cache's quota, cache.py) after.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from os import PathLike
from pathlib import Path

# Sizes and types only: the decisions are ZosMachine's.
from dashboard.capacity import Resources, SliceSize
from dashboard.grid.proxy.features import ZOS3_FEATURES, ZOS4_FEATURES
from dashboard.grid.types import (
    MAX_NODE_CRU,
    MAX_NODE_MRU,
    MAX_NODE_SRU,
    Contract,
    DeploymentFailed,
    GridUnavailable,
    NodeAway,
    NodeCapacity,
    NodeContracts,
    NodeNotFound,
    NodePage,
    NodeStatistics,
    PoolMetrics,
    VmDeployed,
    WorkloadNotFound,
)
from sim.grid import chain, farm_pool, records
from sim.grid.answers import NodeAnswers, ZosRefused
from sim.grid.cache import CACHE_COLUMN, CACHE_MISSING_COLUMN, CacheAdmin, cache_upgrade
from sim.grid.checks import bounded as _bounded
from sim.grid.checks import flag as _flag
from sim.grid.checks import positive as _positive
from sim.grid.checks import status as _status
from sim.grid.checks import text as _text
from sim.grid.machine import CACHE_NOT_FOUND, ZosMachine, validation_error
from sim.grid.records import ZOS_CACHE_SRU, SimNode, SimVm, checked_pools, node_from_row, now

# 3: rent contracts, dedicated farms (chain.py); 4: ZOS build; 5: cache.py; 6: farm_pool.py; 7: cache.py (missing)
SCHEMA_VERSION = 7
# Workload names end up in workload ids ("<twin>-<deployment>-<name>"), stored in 64 characters.
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")


class NodeAlreadyOnGrid(ValueError):
    """add_node for a node id the simulated grid already has (pass replace=True to overwrite)."""


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS sim_node (
    node_id INTEGER PRIMARY KEY CHECK (node_id > 0),
    farm_id INTEGER NOT NULL CHECK (farm_id > 0),
    farm_name TEXT NOT NULL DEFAULT '',
    twin_id INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('up', 'down', 'standby')),
    dedicated INTEGER NOT NULL DEFAULT 0,
    cru INTEGER NOT NULL CHECK (cru > 0),
    mru INTEGER NOT NULL CHECK (mru > 0),
    sru INTEGER NOT NULL CHECK (sru >= 0),
    pools TEXT NOT NULL,
    per_vm_overhead_mru INTEGER NOT NULL DEFAULT 0 CHECK (per_vm_overhead_mru >= 0),
    country TEXT NOT NULL DEFAULT '',
    city TEXT NOT NULL DEFAULT '',
    status_changed_at INTEGER NOT NULL,
    cache_pool INTEGER NOT NULL DEFAULT 0,
    mounted TEXT NOT NULL DEFAULT '[]',
    vdisk_pools TEXT NOT NULL DEFAULT '[]',
    zos_build TEXT NOT NULL DEFAULT '',
    {CACHE_COLUMN},
    {CACHE_MISSING_COLUMN}
);
CREATE TABLE IF NOT EXISTS sim_vm (
    workload_id TEXT PRIMARY KEY,
    node_id INTEGER NOT NULL REFERENCES sim_node (node_id) ON DELETE CASCADE,
    deployment_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    cru INTEGER NOT NULL CHECK (cru >= 0),
    mru INTEGER NOT NULL CHECK (mru >= 0),
    sru INTEGER NOT NULL CHECK (sru >= 0),
    rootfs INTEGER NOT NULL CHECK (rootfs >= 0),
    data_pool INTEGER,
    rootfs_pool INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sim_vm_by_node ON sim_vm (node_id, deployment_id);
-- Contract ids only grow, across resets too, so a workload id is never handed out twice.
CREATE TABLE IF NOT EXISTS sim_counter (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


class SimulatedGrid(chain.ChainAdmin, NodeAnswers, CacheAdmin, farm_pool.FarmPoolAdmin):
    """The Grid interface over a simulated ZOS fleet; `can_deploy` is True. It deploys as `deployer_twin`
    (the marketplace's twin, MARKETPLACE_TWIN_ID's first) when the chain asks who signs (chain.py)."""

    name = "simulator"
    can_deploy = True

    def __init__(
        self, path: str | PathLike[str], *, busy_timeout: float = 30.0, deployer_twin: int | None = None
    ) -> None:
        self.path = Path(path)
        self.deployer_twin = deployer_twin
        self.busy_timeout = busy_timeout
        self._schema_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SimulatedGrid({str(self.path)!r})"

    # --- administration --------------------------------------------------------------

    def add_node(
        self,
        node_id: int,
        *,
        cru: int,
        mru: int,
        sru: int,
        pools: Sequence[int] | None = None,
        farm_id: int = 1,
        farm_name: str = "",
        twin_id: int | None = None,
        status: str = "up",
        dedicated: bool = False,
        per_vm_overhead_mru: int = 0,
        country: str = "",
        city: str = "",
        replace: bool = False,
        zos_build: str = "",
        light: bool = False,
        gpus: int = 0,
    ) -> NodeCapacity:
        """Put a node on the simulated grid. With replace=True an existing node and its VMs are dropped first."""
        node_id = _positive(node_id, "node id")
        cru, mru, sru = _node_sizes(cru, mru, sru)
        pool_sizes = checked_pools(pools, sru)
        cache = _boot_cache_pool(pool_sizes)
        farm_id = _positive(farm_id, "farm id")
        twin_id = _positive(twin_id, "twin id") if twin_id is not None else node_id + 1000
        status = _status(status)
        per_vm_overhead_mru = _bounded(per_vm_overhead_mru, "per-VM memory overhead", low=0, high=mru)
        zos_build = records.checked_build(zos_build)
        dedicated = _flag(dedicated, "dedicated")
        farm_name, country, city = _place_names(farm_name, country, city)
        with self._transaction() as conn:
            _node_make_room(conn, node_id, replace=replace)
            conn.execute(
                _NODE_INSERT,
                (
                    node_id,
                    farm_id,
                    farm_name,
                    twin_id,
                    status,
                    int(dedicated),
                    cru,
                    mru,
                    sru,
                    json.dumps(pool_sizes),
                    per_vm_overhead_mru,
                    country,
                    city,
                    now(),
                    cache,
                    json.dumps([cache]),
                    zos_build,
                ),
            )
            farm_pool.features_set(conn, node_id, light=light, gpus=gpus)
            return self._capacity(self._node(conn, node_id), [], conn)

    def set_status(self, node_id: int, status: str) -> None:
        status = _status(status)
        with self._transaction() as conn:
            self._node(conn, node_id)
            conn.execute(
                "UPDATE sim_node SET status = ?, status_changed_at = ? WHERE node_id = ? AND status <> ?",
                (status, now(), node_id, status),
            )

    def remove_node(self, node_id: int) -> None:
        with self._transaction() as conn:
            self._node(conn, node_id)
            conn.execute("DELETE FROM sim_node WHERE node_id = ?", (node_id,))

    def reset(self) -> None:
        """Remove every node and VM (contract ids keep counting up)."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM sim_vm")
            conn.execute("DELETE FROM sim_node")

    def node_ids(self) -> list[int]:
        with self._transaction(write=False) as conn:
            return [row[0] for row in conn.execute("SELECT node_id FROM sim_node ORDER BY node_id")]

    def pool_sizes(self, node_id: int) -> tuple[int, ...]:
        """The node's SSD pool sizes in device order, as the simulator's administrator set them."""
        with self._transaction(write=False) as conn:
            return self._node(conn, node_id).pools

    def vms(self, node_id: int) -> list[SimVm]:
        with self._transaction(write=False) as conn:
            self._node(conn, node_id)
            return self._vms(conn, node_id)

    # --- the Grid interface -----------------------------------------------------------

    def node(self, node_id: int) -> NodeCapacity:
        """The node as the Grid Proxy would report it; down/standby is returned, not raised."""
        with self._transaction(write=False) as conn:
            node = self._node(conn, node_id)
            return self._capacity(node, self._vms(conn, node.node_id), conn)

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
        page = _positive(page, "page")
        size = _positive(size, "page size")
        farms = list(farm_ids or []) + ([farm_id] if farm_id is not None else [])
        clauses, params = [], []
        if farms:
            clauses.append(f"farm_id IN ({', '.join('?' * len(farms))})")
            params += [_positive(f, "farm id") for f in farms]
        if node_ids:
            clauses.append(f"node_id IN ({', '.join('?' * len(node_ids))})")
            params += [_positive(n, "node id") for n in node_ids]
        if status is not None:
            clauses.append("status = ?")
            params.append(_status(status))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                f"SELECT * FROM sim_node {where} ORDER BY node_id LIMIT ? OFFSET ?", (*params, size, (page - 1) * size)
            ).fetchall()
            nodes = [node_from_row(row) for row in rows]
            vms = self._vms_by_node(conn, [n.node_id for n in nodes])
            rents, dedicated = chain.rents(conn, [n.node_id for n in nodes]), chain.dedicated_farms(conn)
            features = farm_pool.features(conn, [n.node_id for n in nodes])
            # What the proxy's `count` header says with ret_count=true: every node the query matches.
            (count,) = conn.execute(f"SELECT COUNT(*) FROM sim_node {where}", params).fetchone()
            return NodePage(
                nodes=tuple(
                    self._capacity(
                        n, vms.get(n.node_id, []), rent=rents.get(n.node_id), dedicated=dedicated, features=features
                    )
                    for n in nodes
                ),
                page=page,
                size=size,
                count=count,
            )

    def statistics(self, node_id: int) -> NodeStatistics:
        with self._transaction(write=False) as conn:
            node = self._node(conn, node_id)
            _require_up(node, "answer for its statistics")
            vms = self._vms(conn, node.node_id)
        if node.cache_missing:
            # GetCounters asks provisiond's reserve, which asks storaged for the cache (zos#2043).
            raise ZosRefused(CACHE_NOT_FOUND)
        accounted = sum(vm.mru for vm in vms) + node.reserve_mru
        return NodeStatistics(
            system=Resources(mru=node.reserve_mru, sru=node.cache_sru),  # ZOS's own: the cache's quota
            total=Resources(cru=node.cru, mru=node.mru, sru=node.sru),
            used=Resources(
                cru=sum(vm.cru for vm in vms),
                # GetCounters: the accounted use only; real use shows in refusals alone.
                mru=accounted,
                sru=sum(vm.disk for vm in vms) + node.cache_sru,
            ),
            deployments=len(vms),
            # network + zmachine, and the zmount when the VM has a data disk
            workloads=sum(3 if vm.sru else 2 for vm in vms),
        )

    def contracts(self, node_id: int) -> NodeContracts:
        """The node's live contracts as the proxy lists them: one node contract per VM, by contract id.

        Whoever deployed it (the dashboard, the marketplace, anyone outside the catalog), and whatever
        the node's status: contracts are the chain's, not the node's. An unknown node has none (the
        proxy answers an empty list, not 404).
        """
        node_id = _positive(node_id, "node id")
        with self._transaction(write=False) as conn:
            vms = self._vms(conn, node_id)
            rent = chain.rents(conn, [node_id]).get(node_id)
        rented = (
            (Contract(rent.contract_id, rent.twin_id, node_id, rent.state, "rent", rent.created_at),) if rent else ()
        )
        return NodeContracts(
            node_id=node_id,
            contracts=rented
            + tuple(
                Contract(
                    contract_id=vm.deployment_id,
                    # The twin that deployed it, as in its workload id ("<twin>-<contract>-<name>").
                    twin_id=int(vm.workload_id.split("-", 1)[0]),
                    node_id=node_id,
                    # A rent contract in grace takes the node's contracts into grace with it (tfchain).
                    state="GracePeriod" if rent and rent.state == "GracePeriod" else "Created",
                    type="node",
                    created_at=vm.created_at or None,
                    deployment_type="vm",
                    name=vm.name,
                )
                for vm in sorted(vms, key=lambda vm: vm.deployment_id)
            ),
        )

    def rent_contract(self, node_id: int) -> Contract | None:
        return next((c for c in self.contracts(node_id).contracts if c.type == "rent"), None)

    def storage_pools(self, node_id: int) -> tuple[PoolMetrics, ...]:
        """The node's answer to `zos.storage.pools` (over RMB on a real grid, so only an up node answers)."""
        with self._transaction(write=False) as conn:
            node = self._node(conn, node_id)
            _require_up(node, "answer for its storage pools")
            return ZosMachine(node, self._vms(conn, node.node_id)).storage_pools()

    def deploy_vm(self, node_id: int, size: SliceSize, *, name: str, public_ips: int = 0, gpus: int = 0) -> VmDeployed:
        """Deploy one VM the way ZOS would, or raise DeploymentFailed with ZOS's own words."""
        if not isinstance(size, SliceSize):
            raise TypeError(f"size must be a capacity.SliceSize, not {type(size).__name__}")
        for part in ("cru", "mru", "sru", "rootfs"):
            value = getattr(size, part)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"VM {part} must be a whole number, zero or more (got {value!r})")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"VM name {name!r} must be 1 to 40 letters, digits, '_', '-' or '.'")
        with self._transaction() as conn:
            node = self._node(conn, node_id)
            _require_up(node, "deploy anything")
            invalid = validation_error(size)
            if invalid:
                # The Go deployer validates before it creates a contract: no deployment id is spent.
                raise DeploymentFailed(f"deployment is invalid: {invalid}")
            rent = chain.rents(conn, [node_id]).get(node_id)
            refused = chain.refusal(node, rent, chain.dedicated_farms(conn), self.deployer_twin) or farm_pool.refusal(
                conn, node, public_ips=public_ips, gpus=gpus, rented=rent is not None
            )
            if refused:  # the chain refused the contract: no contract id is spent, ZOS never sees the VM
                raise DeploymentFailed(refused)
            deployment_id = self._next_deployment_id(conn)
            outcome = self._place(conn, node, size, name=name, deployment_id=deployment_id)
            if isinstance(outcome, VmDeployed):
                farm_pool.reserve(conn, node, deployment_id, public_ips=public_ips, gpus=gpus)
        # Outside the transaction: a refused deploy still spends its contract id, as on the chain.
        if isinstance(outcome, DeploymentFailed):
            raise outcome
        return outcome

    def delete_vm(self, node_id: int, workload_id: str) -> None:
        """Cancel the VM's contract; works on a down node too (the chain does not need the node)."""
        with self._transaction() as conn:
            self._node(conn, node_id)
            deleted = conn.execute(
                "DELETE FROM sim_vm WHERE node_id = ? AND workload_id = ?", (node_id, workload_id)
            ).rowcount
            if not deleted:
                raise WorkloadNotFound(f"workload {workload_id} is not deployed on node {node_id}")

    # --- ZOS's placement -------------------------------------------------------------

    def _place(
        self, conn: sqlite3.Connection, node: SimNode, size: SliceSize, *, name: str, deployment_id: int
    ) -> VmDeployed | DeploymentFailed:
        machine = ZosMachine(node, self._vms(conn, node.node_id))
        vm, refusal = machine.place(size, name=name, deployment_id=deployment_id)
        # The vdisks volume a refused VM's data disk created stays, as on a node.
        conn.execute(
            "UPDATE sim_node SET mounted = ?, vdisk_pools = ? WHERE node_id = ?",
            (
                json.dumps(sorted(machine.storaged.mounted)),
                json.dumps(sorted(machine.storaged.vdisk_pools)),
                node.node_id,
            ),
        )
        if vm is None:
            return refusal
        conn.execute(
            "INSERT INTO sim_vm (workload_id, node_id, deployment_id, name, cru, mru, sru, rootfs, data_pool,"
            " rootfs_pool, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                vm.workload_id,
                node.node_id,
                deployment_id,
                name,
                vm.cru,
                vm.mru,
                vm.sru,
                vm.rootfs,
                vm.data_pool,
                vm.rootfs_pool,
                vm.created_at,
            ),
        )
        return VmDeployed(workload_id=vm.workload_id, node_id=node.node_id)

    # --- storage ---------------------------------------------------------------------

    @contextmanager
    def _transaction(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            # IMMEDIATE takes the write lock up front: read-then-write never deadlocks or oversubscribes.
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise GridUnavailable(f"the simulated grid at {self.path} failed: {exc}") from exc
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise GridUnavailable(f"the simulated grid at {self.path} cannot be opened: {exc}") from exc
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA foreign_keys = ON")
            # WAL with NORMAL survives crashes intact; at worst a power cut loses the latest deploys.
            conn.execute("PRAGMA synchronous = NORMAL")
            # Asked on every connection, not once per instance: a long-lived server must survive
            # the file being deleted and recreated under it (a demo rebuilt from scratch).
            if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                self._ensure_schema(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise GridUnavailable(f"the simulated grid at {self.path} cannot be opened: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        with self._schema_lock:
            # Persistent for the file; a no-op once it is WAL.
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise GridUnavailable(
                        f"the simulated grid at {self.path} was written by a newer version (schema {version}); "
                        "upgrade, or point SIMGRID_PATH at another file"
                    )
                if version == 1:
                    # Schema 1 kept zos-cache on the first pool and placed first fit: its nodes
                    # keep the cache where it was; the pools their VMs use count as mounted.
                    for column in (
                        "cache_pool INTEGER NOT NULL DEFAULT 0",
                        "mounted TEXT NOT NULL DEFAULT '[]'",
                        "vdisk_pools TEXT NOT NULL DEFAULT '[]'",
                    ):
                        conn.execute(f"ALTER TABLE sim_node ADD COLUMN {column}")
                if 1 <= version < 4:
                    conn.execute("ALTER TABLE sim_node ADD COLUMN zos_build TEXT NOT NULL DEFAULT ''")
                cache_upgrade(conn, version)
                schema = ";".join((_SCHEMA, chain.SCHEMA, farm_pool.SCHEMA))
                for statement in filter(None, (s.strip() for s in schema.split(";"))):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _node(self, conn: sqlite3.Connection, node_id: int) -> SimNode:
        node_id = _positive(node_id, "node id")
        row = conn.execute("SELECT * FROM sim_node WHERE node_id = ?", (node_id,)).fetchone()
        if row is None:
            raise NodeNotFound(f"node {node_id} is not on the simulated grid ({self.path})")
        return node_from_row(row)

    def _vms(self, conn: sqlite3.Connection, node_id: int) -> list[SimVm]:
        return self._vms_by_node(conn, [node_id]).get(node_id, [])

    def _vms_by_node(self, conn: sqlite3.Connection, node_ids: Sequence[int]) -> dict[int, list[SimVm]]:
        if not node_ids:
            return {}
        rows = conn.execute(
            f"SELECT * FROM sim_vm WHERE node_id IN ({', '.join('?' * len(node_ids))}) ORDER BY deployment_id",
            tuple(node_ids),
        )
        result: dict[int, list[SimVm]] = {}
        for row in rows:
            result.setdefault(row["node_id"], []).append(
                SimVm(
                    workload_id=row["workload_id"],
                    name=row["name"],
                    cru=row["cru"],
                    mru=row["mru"],
                    sru=row["sru"],
                    rootfs=row["rootfs"],
                    deployment_id=row["deployment_id"],
                    data_pool=row["data_pool"],
                    rootfs_pool=row["rootfs_pool"],
                    created_at=row["created_at"],
                )
            )
        return result

    def _next_deployment_id(self, conn: sqlite3.Connection) -> int:
        conn.execute("INSERT OR IGNORE INTO sim_counter (name, value) VALUES ('deployment', 0)")
        conn.execute("UPDATE sim_counter SET value = value + 1 WHERE name = 'deployment'")
        return conn.execute("SELECT value FROM sim_counter WHERE name = 'deployment'").fetchone()[0]

    def _capacity(
        self,
        node: SimNode,
        vms: Sequence[SimVm],
        conn: sqlite3.Connection | None = None,
        *,
        rent: chain.Rent | None = None,
        dedicated: set[int] | None = None,
        features: dict[int, tuple[bool, int, tuple[int, ...]]] | None = None,
    ) -> NodeCapacity:
        if conn is not None:
            rent, dedicated = chain.rents(conn, [node.node_id]).get(node.node_id), chain.dedicated_farms(conn)
            features = farm_pool.features(conn, [node.node_id])
        light, num_gpu, held = (features or {}).get(node.node_id, (False, 0, ()))
        return NodeCapacity(
            **chain.capacity_fields(node, rent, dedicated or set()),
            node_id=node.node_id,
            farm_id=node.farm_id,
            farm_name=node.farm_name,
            twin_id=node.twin_id,
            status=node.status,
            dedicated=node.dedicated,
            total=Resources(cru=node.cru, mru=node.mru, sru=node.sru),
            used=Resources(
                cru=sum(vm.cru for vm in vms),
                mru=sum(vm.mru for vm in vms) + node.reserve_mru,
                sru=sum(vm.disk for vm in vms) + ZOS_CACHE_SRU,
            ),
            country=node.country,
            city=node.city,
            # What a simulated ZOS lists (the proxy's `features`): full or light, never unknown here.
            features=ZOS4_FEATURES if light else ZOS3_FEATURES,
            light=light,
            num_gpu=num_gpu,
            gpus=farm_pool.simulated_gpus(held),
            # An up node reports in continuously; a down one was last heard when it went down.
            updated_at=now() if node.status == "up" else node.status_changed_at,
            # The Grid Proxy's face tells no pools: the node tells them itself (storage_pools).
        )


# One node's row on the simulated grid.
_NODE_INSERT = (
    "INSERT INTO sim_node (node_id, farm_id, farm_name, twin_id, status, dedicated, cru, mru, sru, pools,"
    " per_vm_overhead_mru, country, city, status_changed_at, cache_pool, mounted, zos_build)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _node_sizes(cru: int, mru: int, sru: int) -> tuple[int, int, int]:
    """The node's cores, memory and SSD, each within what a single node has."""
    cru = _bounded(cru, "cru", low=1, high=MAX_NODE_CRU, unit="cores")
    mru = _bounded(mru, "mru", low=1, high=MAX_NODE_MRU)
    sru = _bounded(sru, "sru", low=ZOS_CACHE_SRU, high=MAX_NODE_SRU, why_low="the 20 GiB zos-cache ZOS keeps")
    return cru, mru, sru


def _boot_cache_pool(pool_sizes: list[int]) -> int:
    """At boot zos-cache goes to the pool with the most space (the first of equals)."""
    return pool_sizes.index(max(pool_sizes))


def _place_names(farm_name: str, country: str, city: str) -> tuple[str, str, str]:
    """The farm's name and the node's country and city, checked as the chain bounds them."""
    farm_name, country, city = (
        _text(v, what, limit)
        for v, what, limit in ((farm_name, "farm name", 128), (country, "country", 64), (city, "city", 64))
    )
    return farm_name, country, city


def _node_make_room(conn: sqlite3.Connection, node_id: int, *, replace: bool) -> None:
    """Drop the node already under this id when told to replace it; NodeAlreadyOnGrid when not."""
    exists = conn.execute("SELECT 1 FROM sim_node WHERE node_id = ?", (node_id,)).fetchone()
    if exists and not replace:
        raise NodeAlreadyOnGrid(
            f"node {node_id} is already on the simulated grid; replace it to overwrite it (its VMs are dropped)"
        )
    conn.execute("DELETE FROM sim_node WHERE node_id = ?", (node_id,))


def _require_up(node: SimNode, doing: str) -> None:
    if node.status != "up":
        raise NodeAway(f"node {node.node_id} is {node.status}: it cannot {doing} until it is up again")


__all__ = ["NodeAlreadyOnGrid", "SimulatedGrid"]
