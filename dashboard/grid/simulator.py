"""A simulated ZOS grid: ZOS's own capacity accounting, kept in one SQLite file.

Web, worker and management commands each open the same file, so it is the one grid
they all see. Stdlib sqlite3 only (no Django): WAL so readers never wait on writers,
and every deploy runs inside `BEGIN IMMEDIATE`, which takes the write lock before the
node is read, so two deploys racing for the last room on a node are serialised and
the second one sees the first one's VM.

What is modelled, and where it comes from (see docs/domain.md):
- Node memory reserve: max(total // 10, 2 GiB) (zos provisiond getNodeReserved,
  `available.MRU*10/100`, integer division).
- zos-cache: 20 GiB of SSD (the figure the Grid Proxy assumes) in the pool with the most
  space, the first of equals in device order; the other pools start unmounted.
- A deployment is one VM: a data disk (zmount, named `<name>disk` as grid-client names
  disks) and the zmachine. ZOS installs zmounts before zmachines (provisiond's
  WithStartupOrder(ZMountType, ...) and engine.installDeployment), and the zmachine's
  memory check runs before its rootfs volume is created. So the order of refusals is:
  validation (synchronous, before any contract), data disk, memory, rootfs.
- Deploy-time memory check (zos pkg/primitives/statistics.go):
  used = max(sum of workload memory + reserve, memory actually in use);
  usable = total - used; refused when the VM's memory > usable. "Actually in use" is
  the workloads' memory plus a hidden per-VM overhead (`per_vm_overhead_mru`, zero
  by default as in current ZOS) plus the reserve, capped at the node's memory.
- Disk placement as storaged does it (zos pkg/storage findCandidates, vDiskFindCandidate):
  a disk goes to the mounted pool with the most room left after it; if no mounted pool
  holds it, to the first unmounted pool in device order that does (which is mounted from
  then on); a data disk (vdisk) prefers a pool that already has a vdisks volume, the rootfs
  volume takes the best candidate. Data disk first, then the rootfs
  (max(requested, zos_rootfs(cpu, memory))).
This is ZOS played on its own: nothing here asks dashboard.capacity for a decision, so the
suite can check the capacity model against it as against a real node.
What it tells is what a real node tells: the statistics' and the proxy's `used` are the
accounted use (workloads + reserve); memory really in use shows only in a memory refusal's
`usable` figure. Pool sizes are reported largest first: the device order is not told.
- CPU is not checked (ZOS over-provisions cores).
The reported `used` follows the Grid Proxy: used_mru = sum VM memory + reserve,
used_sru = sum VM (data + rootfs) + 20 GiB; `system` in the statistics is the reserve.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

# Sizes and types only: every decision below (reserve, memory check, placement, rootfs) is ZOS's
# rule written here on its own, so the suite can hold dashboard.capacity against it.
from dashboard.capacity import GiB, MiB, Resources, SliceSize, format_size
from dashboard.grid.types import (
    MAX_NODE_CRU,
    MAX_NODE_MRU,
    MAX_NODE_SRU,
    NODE_STATUSES,
    DeploymentFailed,
    GridUnavailable,
    NodeCapacity,
    NodeNotFound,
    NodeOffline,
    NodePage,
    NodeStatistics,
    VmDeployed,
    WorkloadNotFound,
)

ZOS_CACHE_SRU = 20 * GiB
RESERVE_MRU_FLOOR = 2 * GiB
SCHEMA_VERSION = 2
# Workload names end up in workload ids ("<twin>-<deployment>-<name>"), stored in 64 characters.
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
NO_SPACE = "not enough space left in pools of this type ssd"


def zos_reserve_mru(total_mru: int) -> int:
    """Memory ZOS keeps for itself: max(10% of total, 2 GiB), integer arithmetic as in ZOS."""
    return max(total_mru * 10 // 100, RESERVE_MRU_FLOOR)


class NodeAlreadyOnGrid(ValueError):
    """add_node for a node id the simulated grid already has (pass replace=True to overwrite)."""


@dataclass(frozen=True)
class SimVm:
    workload_id: str
    name: str
    cru: int
    mru: int
    sru: int  # the data disk
    rootfs: int
    deployment_id: int = 0
    data_pool: int | None = None  # index into the node's pools; None when there is no data disk
    rootfs_pool: int = 0
    created_at: int = 0

    @property
    def disk(self) -> int:
        return self.sru + self.rootfs


@dataclass(frozen=True)
class _Node:
    node_id: int
    farm_id: int
    farm_name: str
    twin_id: int
    status: str
    dedicated: bool
    cru: int
    mru: int
    sru: int
    pools: tuple[int, ...]
    per_vm_overhead_mru: int
    country: str
    city: str
    status_changed_at: int
    # storaged's state: which pools are mounted and which hold a vdisks volume (both stay
    # so until a reboot, which the simulator does not model), and where zos-cache went.
    cache_pool: int = 0
    mounted: frozenset[int] = frozenset()
    vdisk_pools: frozenset[int] = frozenset()

    @property
    def reserve_mru(self) -> int:
        return zos_reserve_mru(self.mru)


_SCHEMA = """
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
    vdisk_pools TEXT NOT NULL DEFAULT '[]'
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


class SimulatedGrid:
    """The Grid interface over a simulated ZOS fleet; `can_deploy` is True."""

    name = "simulator"
    can_deploy = True

    def __init__(self, path: str | PathLike[str], *, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
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
    ) -> NodeCapacity:
        """Put a node on the simulated grid. With replace=True an existing node and its VMs are dropped first."""
        node_id = _positive(node_id, "node id")
        cru = _bounded(cru, "cru", low=1, high=MAX_NODE_CRU, unit="cores")
        mru = _bounded(mru, "mru", low=1, high=MAX_NODE_MRU)
        sru = _bounded(sru, "sru", low=ZOS_CACHE_SRU, high=MAX_NODE_SRU, why_low="the 20 GiB zos-cache ZOS keeps")
        pool_sizes = _pools(pools, sru)
        # At boot zos-cache goes to the pool with the most space (the first of equals).
        cache = pool_sizes.index(max(pool_sizes))
        farm_id = _positive(farm_id, "farm id")
        twin_id = _positive(twin_id, "twin id") if twin_id is not None else node_id + 1000
        status = _status(status)
        per_vm_overhead_mru = _bounded(per_vm_overhead_mru, "per-VM memory overhead", low=0, high=mru)
        if not isinstance(dedicated, bool):
            raise ValueError(f"dedicated must be true or false (got {dedicated!r})")
        farm_name, country, city = (
            _text(v, what, limit)
            for v, what, limit in ((farm_name, "farm name", 128), (country, "country", 64), (city, "city", 64))
        )
        with self._transaction() as conn:
            exists = conn.execute("SELECT 1 FROM sim_node WHERE node_id = ?", (node_id,)).fetchone()
            if exists and not replace:
                raise NodeAlreadyOnGrid(
                    f"node {node_id} is already on the simulated grid; replace it to overwrite it (its VMs are dropped)"
                )
            conn.execute("DELETE FROM sim_node WHERE node_id = ?", (node_id,))
            conn.execute(
                "INSERT INTO sim_node (node_id, farm_id, farm_name, twin_id, status, dedicated, cru, mru, sru, pools,"
                " per_vm_overhead_mru, country, city, status_changed_at, cache_pool, mounted)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    _now(),
                    cache,
                    json.dumps([cache]),
                ),
            )
            return self._capacity(self._node(conn, node_id), [])

    def set_status(self, node_id: int, status: str) -> None:
        status = _status(status)
        with self._transaction() as conn:
            self._node(conn, node_id)
            conn.execute(
                "UPDATE sim_node SET status = ?, status_changed_at = ? WHERE node_id = ? AND status <> ?",
                (status, _now(), node_id, status),
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

    def vms(self, node_id: int) -> list[SimVm]:
        with self._transaction(write=False) as conn:
            self._node(conn, node_id)
            return self._vms(conn, node_id)

    # --- the Grid interface -----------------------------------------------------------

    def node(self, node_id: int) -> NodeCapacity:
        """The node as the Grid Proxy would report it; down/standby is returned, not raised."""
        with self._transaction(write=False) as conn:
            node = self._node(conn, node_id)
            return self._capacity(node, self._vms(conn, node.node_id))

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
            nodes = [_node_from_row(row) for row in rows]
            vms = self._vms_by_node(conn, [n.node_id for n in nodes])
            return NodePage(nodes=tuple(self._capacity(n, vms.get(n.node_id, [])) for n in nodes), page=page, size=size)

    def statistics(self, node_id: int) -> NodeStatistics:
        with self._transaction(write=False) as conn:
            node = self._node(conn, node_id)
            _require_up(node, "answer for its statistics")
            vms = self._vms(conn, node.node_id)
        accounted = sum(vm.mru for vm in vms) + node.reserve_mru
        return NodeStatistics(
            system=Resources(mru=node.reserve_mru, sru=ZOS_CACHE_SRU),
            total=Resources(cru=node.cru, mru=node.mru, sru=node.sru),
            used=Resources(
                cru=sum(vm.cru for vm in vms),
                # GetCounters: the accounted use only; real use shows in refusals alone.
                mru=accounted,
                sru=sum(vm.disk for vm in vms) + ZOS_CACHE_SRU,
            ),
            deployments=len(vms),
            # network + zmachine, and the zmount when the VM has a data disk
            workloads=sum(3 if vm.sru else 2 for vm in vms),
        )

    def deploy_vm(self, node_id: int, size: SliceSize, *, name: str) -> VmDeployed:
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
            invalid = _invalid(size)
            if invalid:
                # The Go deployer validates before it creates a contract: no deployment id is spent.
                raise DeploymentFailed(f"deployment is invalid: {invalid}")
            deployment_id = self._next_deployment_id(conn)
            outcome = self._place(conn, node, size, name=name, deployment_id=deployment_id)
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
        self, conn: sqlite3.Connection, node: _Node, size: SliceSize, *, name: str, deployment_id: int
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
                for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _node(self, conn: sqlite3.Connection, node_id: int) -> _Node:
        node_id = _positive(node_id, "node id")
        row = conn.execute("SELECT * FROM sim_node WHERE node_id = ?", (node_id,)).fetchone()
        if row is None:
            raise NodeNotFound(f"node {node_id} is not on the simulated grid ({self.path})")
        return _node_from_row(row)

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

    def _capacity(self, node: _Node, vms: Sequence[SimVm]) -> NodeCapacity:
        return NodeCapacity(
            node_id=node.node_id,
            farm_id=node.farm_id,
            farm_name=node.farm_name,
            twin_id=node.twin_id,
            status=node.status,
            dedicated=node.dedicated,
            rented_by_twin_id=None,
            total=Resources(cru=node.cru, mru=node.mru, sru=node.sru),
            used=Resources(
                cru=sum(vm.cru for vm in vms),
                mru=sum(vm.mru for vm in vms) + node.reserve_mru,
                sru=sum(vm.disk for vm in vms) + ZOS_CACHE_SRU,
            ),
            country=node.country,
            city=node.city,
            # An up node reports in continuously; a down one was last heard when it went down.
            updated_at=_now() if node.status == "up" else node.status_changed_at,
            # A node reports its pools' sizes, not their device order.
            pools_sru=tuple(sorted(node.pools, reverse=True)),
        )


# --- ZOS's arithmetic ------------------------------------------------------------------


def _actual_mru(node: _Node, vms: Sequence[SimVm]) -> int:
    """Memory really in use on the host; the hidden per-VM overhead shows up only here."""
    return min(node.mru, sum(vm.mru + node.per_vm_overhead_mru for vm in vms) + node.reserve_mru)


def _usable_mru(node: _Node, vms: Sequence[SimVm]) -> int:
    accounted = sum(vm.mru for vm in vms) + node.reserve_mru
    # ZOS computes this in uint64; used never exceeds total here, the clamp only guards a shrunk node.
    return max(node.mru - max(accounted, _actual_mru(node, vms)), 0)


class ZosMachine:
    """One ZOS node in memory: its VMs and storaged's pools, deploying and releasing as ZOS does.

    SimulatedGrid places every VM through it; the traffic simulation drives thousands of them
    without a database. Reading it gives only what a real node tells (`reading()`: the
    accounted use); the memory really in use shows in a memory refusal alone.
    """

    def __init__(self, node: _Node, vms: Sequence[SimVm] = ()) -> None:
        self.node = node
        self.vms = list(vms)
        self.storaged = _Storaged(node, self.vms)

    @classmethod
    def boot(
        cls,
        node_id: int,
        *,
        cru: int,
        mru: int,
        sru: int,
        pools: Sequence[int] | None = None,
        per_vm_overhead_mru: int = 0,
        status: str = "up",
    ) -> ZosMachine:
        sizes = _pools(pools, sru)
        node = _Node(
            node_id=node_id,
            farm_id=1,
            farm_name="",
            twin_id=node_id + 1000,
            status=status,
            dedicated=False,
            cru=cru,
            mru=mru,
            sru=sru,
            pools=tuple(sizes),
            per_vm_overhead_mru=per_vm_overhead_mru,
            country="",
            city="",
            status_changed_at=0,
            cache_pool=sizes.index(max(sizes)),
        )
        return cls(node)

    def copy(self) -> ZosMachine:
        twin = ZosMachine.__new__(ZosMachine)
        twin.node, twin.vms = self.node, list(self.vms)
        twin.storaged = self.storaged.copy()
        return twin

    def place(self, size: SliceSize, *, name: str, deployment_id: int) -> tuple[SimVm | None, DeploymentFailed | None]:
        """Deploy one VM: (the VM, None) or (None, the refusal in ZOS's words)."""
        node, storaged = self.node, self.storaged
        # When memory and the data disk are both short, both workloads fail; the error the
        # deployer and the client surface is the VM's own (the Rust client's "vm deployment
        # entered error state" is about the zmachine), so memory is reported first.
        usable = _usable_mru(node, self.vms)
        if size.mru > usable:
            return None, _refused(
                name,
                deployment_id,
                "failed to satisfy required capacity: "
                f"cannot fulfil required memory size {size.mru} bytes out of usable {usable} bytes",
            )
        data_pool = None
        if size.sru:
            data_pool = storaged.allocate(size.sru, vdisk=True)
            if data_pool is None:
                return None, _refused(
                    f"{name}disk",
                    deployment_id,
                    f"failed to find a candidate to host vdisk of size '{size.sru}': {NO_SPACE}",
                )
        rootfs = max(size.rootfs, zos_rootfs(size.cru, size.mru))
        rootfs_pool = storaged.allocate(rootfs, vdisk=False)
        if rootfs_pool is None:
            if data_pool is not None:
                storaged.allocated[data_pool] -= size.sru  # the failed deployment's disk is removed
            return None, _refused(name, deployment_id, f"failed to create vm rootfs: {NO_SPACE}")
        vm = SimVm(
            workload_id=f"{node.twin_id}-{deployment_id}-{name}",
            name=name,
            cru=size.cru,
            mru=size.mru,
            sru=size.sru,
            rootfs=rootfs,
            deployment_id=deployment_id,
            data_pool=data_pool,
            rootfs_pool=rootfs_pool,
            created_at=_now(),
        )
        self.vms.append(vm)
        return vm, None

    def release(self, workload_id: str) -> None:
        """Cancel a VM: its memory and disks are free again (its pools stay mounted)."""
        for i, vm in enumerate(self.vms):
            if vm.workload_id == workload_id:
                del self.vms[i]
                if vm.data_pool is not None:
                    self.storaged.allocated[vm.data_pool] -= vm.sru
                self.storaged.allocated[vm.rootfs_pool] -= vm.rootfs
                return
        raise WorkloadNotFound(f"workload {workload_id} is not deployed on node {self.node.node_id}")

    def reading(self) -> tuple[Resources, Resources]:
        """(total, used) as the Grid Proxy and the node's statistics report them: the accounted use."""
        node, vms = self.node, self.vms
        return (
            Resources(cru=node.cru, mru=node.mru, sru=node.sru),
            Resources(
                cru=sum(vm.cru for vm in vms),
                mru=sum(vm.mru for vm in vms) + node.reserve_mru,
                sru=sum(vm.disk for vm in vms) + ZOS_CACHE_SRU,
            ),
        )


class _Storaged:
    """storaged's view of one node's SSD pools while it places a VM's disks.

    Allocation is counted in full for every disk (`used + size <= size`), the zos-cache
    included. Mounted pools and pools holding a vdisks volume persist in the node's row.
    """

    def __init__(self, node: _Node, vms: Sequence[SimVm]) -> None:
        self.sizes = list(node.pools)
        self.allocated = [0] * len(self.sizes)
        self.allocated[node.cache_pool] += ZOS_CACHE_SRU
        for vm in vms:
            if vm.data_pool is not None:
                self.allocated[vm.data_pool] += vm.sru
            self.allocated[vm.rootfs_pool] += vm.rootfs
        self.mounted = set(node.mounted) | {node.cache_pool}
        self.mounted |= {vm.rootfs_pool for vm in vms} | {vm.data_pool for vm in vms if vm.data_pool is not None}
        self.vdisk_pools = set(node.vdisk_pools) | {vm.data_pool for vm in vms if vm.data_pool is not None}

    def _holds(self, pool: int, size: int) -> bool:
        return self.allocated[pool] + size <= self.sizes[pool]

    def _candidates(self, size: int) -> list[int]:
        # findCandidates: mounted pools that hold it, most room left first; else the first
        # unmounted pool in device order that holds it (mounted for the purpose).
        mounted = [p for p in range(len(self.sizes)) if p in self.mounted and self._holds(p, size)]
        if mounted:
            return sorted(mounted, key=lambda p: self.sizes[p] - self.allocated[p] - size, reverse=True)
        for pool in range(len(self.sizes)):
            if pool not in self.mounted and self._holds(pool, size):
                return [pool]
        return []

    def allocate(self, size: int, *, vdisk: bool) -> int | None:
        candidates = self._candidates(size)
        if not candidates:
            return None
        pool = candidates[0]
        if vdisk:
            # vDiskFindCandidate: the first candidate that already has a vdisks volume.
            pool = next((p for p in candidates if p in self.vdisk_pools), pool)
            self.vdisk_pools.add(pool)
        self.mounted.add(pool)
        self.allocated[pool] += size
        return pool

    def copy(self) -> _Storaged:
        twin = _Storaged.__new__(_Storaged)
        twin.sizes, twin.allocated = self.sizes, list(self.allocated)
        twin.mounted, twin.vdisk_pools = set(self.mounted), set(self.vdisk_pools)
        return twin

    def free(self) -> list[int]:
        return [size - used for size, used in zip(self.sizes, self.allocated, strict=True)]


def zos_rootfs(cru: int, mru: int) -> int:
    """zmachine.go MinRootSize: cu = cpu * memory / 8 GiB in whole units; 500 MiB when it is 0, else 2 GiB."""
    return 500 * MiB if cru * mru // (8 * GiB) == 0 else 2 * GiB


ZOS_MIN_MRU = 250 * MiB  # zmachine.go: "mem capacity can't be less that 250M"


def _invalid(size: SliceSize) -> str:
    """ZOS's zmachine validation (pkg/gridtypes/zos/zmachine.go), its own words and typos."""
    if size.cru == 0:
        return "cpu capcity can't be 0"
    if size.mru < ZOS_MIN_MRU:
        return "mem capacity can't be less that 250M"
    minimum = zos_rootfs(size.cru, size.mru)
    if size.rootfs != 0 and size.rootfs < minimum:
        return f"disk size can't be less that {minimum}. Set to 0 for minimum"
    return ""


def _refused(workload: str, deployment_id: int, reason: str) -> DeploymentFailed:
    # The Go deployer's wrapping (tfgrid-sdk-go deployer.Wait); classify() unwraps it.
    return DeploymentFailed(f"workload {workload} within deployment {deployment_id} failed with error: {reason}")


def _require_up(node: _Node, doing: str) -> None:
    if node.status != "up":
        raise NodeOffline(f"node {node.node_id} is {node.status}: it cannot {doing} until it is up again")


# --- input checks ----------------------------------------------------------------------


def _node_from_row(row: sqlite3.Row) -> _Node:
    return _Node(
        node_id=row["node_id"],
        farm_id=row["farm_id"],
        farm_name=row["farm_name"],
        twin_id=row["twin_id"],
        status=row["status"],
        dedicated=bool(row["dedicated"]),
        cru=row["cru"],
        mru=row["mru"],
        sru=row["sru"],
        pools=tuple(json.loads(row["pools"])),
        per_vm_overhead_mru=row["per_vm_overhead_mru"],
        country=row["country"],
        city=row["city"],
        status_changed_at=row["status_changed_at"],
        cache_pool=row["cache_pool"],
        mounted=frozenset(json.loads(row["mounted"])),
        vdisk_pools=frozenset(json.loads(row["vdisk_pools"])),
    )


def _positive(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 2**32 - 1:
        raise ValueError(f"{what} must be a positive whole number (got {value!r})")
    return value


def _bounded(value: object, what: str, *, low: int, high: int, unit: str = "bytes", why_low: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be a whole number of {unit} (got {value!r})")
    shown = (lambda n: f"{n}") if unit == "cores" else format_size
    if value < low:
        reason = f" ({why_low})" if why_low else ""
        raise ValueError(f"{what} is {shown(value)}, must be at least {shown(low)}{reason}")
    if value > high:
        raise ValueError(f"{what} is {shown(value)}, more than any single node has (at most {shown(high)})")
    return value


def _pools(pools: Sequence[int] | None, sru: int) -> list[int]:
    if pools is None:
        return [sru]
    sizes = list(pools)
    if not sizes:
        raise ValueError("pools must list at least one SSD pool size")
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"every pool size must be a whole number of bytes above zero (got {size!r})")
    if sum(sizes) > sru:
        raise ValueError(
            f"the pools add up to {format_size(sum(sizes))}, more than the node's SSD total of {format_size(sru)}"
        )
    if max(sizes) < ZOS_CACHE_SRU:
        raise ValueError(f"the largest pool is {format_size(max(sizes))}; it must hold the 20 GiB zos-cache")
    return sizes


def _status(status: object) -> str:
    if status not in NODE_STATUSES:
        raise ValueError(f"status {status!r} is not one of {', '.join(NODE_STATUSES)}")
    return status  # type: ignore[return-value]


def _text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be text (got {value!r})")
    if len(value) > limit:
        raise ValueError(f"{what} is longer than {limit} characters")
    return value.strip()


def _now() -> int:
    return int(time.time())


__all__ = ["NodeAlreadyOnGrid", "SimVm", "SimulatedGrid", "ZOS_CACHE_SRU", "ZosMachine", "zos_reserve_mru"]
