"""Deterministic fleets for the bench: the simulated grid and the catalog database.

Every node is carved with the legacy policy (so every catalog is stale under the fleet's
"zos"-like default), about six slices each: four node shapes of five to seven legacy
slices. Every 4th node has a deployed VM (every 16th two), on the simulator too; every
5th has a failed deploy of its last slice (ZOS's memory refusal), every 20th also a disk
refusal; a few nodes are down or on standby; half were prechecked. Farm 2 has its own
8 GiB policy. The database is filled with COPY, the simulator through its public API.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from dashboard import capacity
from dashboard.capacity import GiB, MiB

# (cru, mru GiB, sru GiB, pools GiB or None): legacy carves 6, 7, 5 and 6 slices.
SHAPES = (
    (8, 26, 1000, None),
    (16, 29, 2000, None),
    (8, 22, 500, None),
    (12, 26, 1500, (750, 750)),
)
NODES_PER_FARM = 50
FLEET_POLICY = "fleet-default"
FARM_POLICY = ("farm-2-8gib", 2, 8 * GiB)  # name, farm, slice memory
ZOS_CACHE_SRU = 20 * GiB
SMALL_ROOTFS = 500 * MiB
ADMIN_USERNAME = "bench-admin"


@dataclass(frozen=True)
class NodeSpec:
    node_id: int
    farm_id: int
    cru: int
    mru: int
    sru: int
    pools: tuple[int, ...] | None
    status: str
    deployed: int  # slices with a VM, from index 0
    failed_memory: bool  # a failed deploy of the last slice: ZOS's memory refusal
    failed_disk: bool  # and a disk refusal before it
    prechecked: bool
    dedicated: bool

    @property
    def total(self) -> capacity.Resources:
        return capacity.Resources(cru=self.cru, mru=self.mru, sru=self.sru)

    @property
    def farm_name(self) -> str:
        return f"bench-farm-{self.farm_id}"


def fleet_specs(count: int) -> list[NodeSpec]:
    """Node ids 1..count; node i is the same node in every fleet size."""
    specs = []
    for i in range(1, count + 1):
        cru, mru, sru, pools = SHAPES[i % len(SHAPES)]
        status = "down" if i % 50 == 7 else "standby" if i % 100 == 13 else "up"
        specs.append(
            NodeSpec(
                node_id=i,
                farm_id=1 + (i - 1) // NODES_PER_FARM,
                cru=cru,
                mru=mru * GiB,
                sru=sru * GiB,
                pools=tuple(p * GiB for p in pools) if pools else None,
                status=status,
                deployed=(2 if i % 16 == 0 else 1) if i % 4 == 0 else 0,
                failed_memory=i % 5 == 0,
                failed_disk=i % 20 == 0,
                prechecked=i % 2 == 0,
                dedicated=i % 25 == 0,
            )
        )
    return specs


def legacy_carve(spec: NodeSpec) -> capacity.Carve:
    return capacity.carve(spec.total, capacity.PROFILES["legacy"])


def vm_size(spec: NodeSpec) -> capacity.SliceSize:
    carve = legacy_carve(spec)
    return capacity.SliceSize(cru=carve.slice.cru, mru=carve.slice.mru, sru=carve.slice.sru)


# --- the simulated grid -------------------------------------------------------------------------


def simulator_seed(grid, specs: Sequence[NodeSpec]) -> tuple[dict[tuple[int, int], str], dict]:
    """Put the nodes and their VMs on the simulated grid; (node id, slice index) -> workload id.

    The simulator has no bulk path, so this is one add_node / deploy_vm (one SQLite
    transaction each) per node and VM. A connection held open for the whole seeding stops
    SQLite from checkpointing its WAL every time the last connection closes (~2x faster).
    """
    grid.node_ids()  # creates the file and its schema
    holder = sqlite3.connect(grid.path)
    workloads: dict[tuple[int, int], str] = {}
    try:
        started = time.perf_counter()
        for spec in specs:
            grid.add_node(
                spec.node_id,
                cru=spec.cru,
                mru=spec.mru,
                sru=spec.sru,
                pools=list(spec.pools) if spec.pools else None,
                farm_id=spec.farm_id,
                farm_name=spec.farm_name,
                # Only even node ids hold VMs and only odd ones are down or on standby.
                status=spec.status,
                dedicated=spec.dedicated,
            )
        nodes_done = time.perf_counter()
        for spec in specs:
            for index in range(spec.deployed):
                vm = grid.deploy_vm(spec.node_id, vm_size(spec), name=f"bench{spec.node_id}s{index}")
                workloads[(spec.node_id, index)] = vm.workload_id
        vms_done = time.perf_counter()
    finally:
        holder.close()
    timings = {
        "nodes": len(specs),
        "vms": len(workloads),
        "add_node_s": round(nodes_done - started, 2),
        "deploy_vm_s": round(vms_done - nodes_done, 2),
        "per_node_ms": round((nodes_done - started) * 1000 / max(len(specs), 1), 2),
        "per_vm_ms": round((vms_done - nodes_done) * 1000 / max(len(workloads), 1), 2),
    }
    return workloads, timings


# --- the catalog database -----------------------------------------------------------------------


def database_seed(specs: Sequence[NodeSpec], workloads: dict[tuple[int, int], str]) -> dict:
    """Empty the catalog tables and fill them with these nodes, their slices and deployments."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from dashboard.models import AuditEvent, CapacitySample, Deployment, Job, Node, Policy, Slice

    started = time.perf_counter()
    tables = [m._meta.db_table for m in (AuditEvent, CapacitySample, Deployment, Job, Slice, Policy, Node)]
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")

    fleet = Policy.objects.create(name=FLEET_POLICY, scope=Policy.Scope.FLEET)
    farm_name, farm_id, farm_slice_mru = FARM_POLICY
    farm = Policy.objects.create(name=farm_name, scope=Policy.Scope.FARM, farm_id=farm_id, slice_mru=farm_slice_mru)
    policies = {"fleet": fleet.to_capacity(), farm_id: farm.to_capacity()}

    def policy_for(spec: NodeSpec) -> capacity.Policy:
        return policies.get(spec.farm_id, policies["fleet"])

    now = timezone.now()
    nodes, slices, deployments = [], [], []
    for spec in specs:
        node, node_slices, node_deployments = _node_rows(
            spec,
            policy_for(spec),
            workloads,
            now=now,
            first_slice_pk=len(slices) + 1,
            first_deployment_pk=len(deployments) + 1,
        )
        nodes.append(node)
        slices.extend(node_slices)
        deployments.extend(node_deployments)
    built = time.perf_counter()

    copy_rows(Node, nodes)
    copy_rows(Slice, slices)
    copy_rows(Deployment, deployments)
    copied_rows = time.perf_counter()
    # COPY bypasses the services, so the nodes' stored figures are written as the repair command does.
    from dashboard.figures.services.figures import figures_refresh_all

    figures_refresh_all()
    figured = time.perf_counter()
    with connection.cursor() as cursor:
        for model in (Node, Slice, Deployment):
            table = model._meta.db_table
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT MAX(id) FROM {table}))")
        # Fresh tables: give the planner its statistics, as autovacuum would soon after.
        cursor.execute(f"VACUUM (ANALYZE) {', '.join(tables)}")
    copied = time.perf_counter()

    user_model = get_user_model()
    if not user_model.objects.filter(username=ADMIN_USERNAME).exists():
        user_model.objects.create_superuser(ADMIN_USERNAME, "bench@example.invalid", None)
    return {
        "nodes": len(nodes),
        "slices": len(slices),
        "deployments": len(deployments),
        "build_s": round(built - started, 2),
        "copy_s": round(copied - built - (figured - copied_rows), 2),
        "figures_s": round(figured - copied_rows, 2),
    }


def _node_used(spec: NodeSpec, size: capacity.SliceSize) -> tuple[capacity.Resources, int]:
    """What the node uses (its VMs, ZOS's reserve and cache) and the memory ZOS keeps back."""
    reserve_mru = max(spec.mru * 10 // 100, 2 * GiB)
    used = capacity.Resources(
        cru=spec.deployed * size.cru,
        mru=spec.deployed * size.mru + reserve_mru,
        sru=spec.deployed * (size.sru + capacity.zos_rootfs(size.cru, size.mru)) + ZOS_CACHE_SRU,
    )
    return used, reserve_mru


def _slice_rows(spec: NodeSpec, carve: capacity.Carve, *, now: datetime, first_slice_pk: int) -> list:
    """The legacy carve's slices, the first `deployed` of them holding a VM."""
    from dashboard.models import Slice

    size = carve.slice
    return [
        Slice(
            pk=first_slice_pk + index,
            node_id=spec.node_id,
            index=index,
            cru=size.cru,
            mru=size.mru,
            sru=size.sru,
            state=Slice.State.DEPLOYED if index < spec.deployed else Slice.State.FREE,
            generation=1,
            created_at=now,
            updated_at=now,
        )
        for index in range(carve.slices)
    ]


def _node_row(spec: NodeSpec, carve: capacity.Carve, used: capacity.Resources, check, free: list, *, now: datetime):
    """The node as registered 90 days ago and seen within the last 90 minutes; the precheck's figures
    when it was prechecked (none placeable and every free slice a phantom when it is not up)."""
    from dashboard.models import Node

    away = spec.status != "up"
    seen_at = now - timedelta(minutes=spec.node_id % 90)
    return Node(
        pk=spec.node_id,
        grid_id=spec.node_id,
        farm_id=spec.farm_id,
        farm_name=spec.farm_name,
        twin_id=spec.node_id + 1000,
        status=spec.status,
        dedicated=spec.dedicated,
        country="Belgium",
        city="Ghent",
        total_cru=spec.cru,
        total_mru=spec.mru,
        total_sru=spec.sru,
        total_hru=0,
        pools_sru=list(spec.pools) if spec.pools else None,
        used_cru=used.cru,
        used_mru=used.mru,
        used_sru=used.sru,
        used_hru=0,
        seen_at=seen_at,
        placeable_now=(0 if away else check.placeable_now) if spec.prechecked else None,
        phantom_slices=(len(free) if away else len(check.phantom_slices)) if spec.prechecked else None,
        prechecked_at=seen_at if spec.prechecked else None,
        carved_policy_name="legacy",
        carved_policy_version=1,
        carved_slice_sru=carve.slice.sru,
        carved_deployable=carve.slices,
        catalog_generation=1,
        registered_at=now - timedelta(days=90),
        updated_at=now,
    )


def _deployment_rows(
    spec: NodeSpec,
    carve: capacity.Carve,
    slices: list,
    used: capacity.Resources,
    reserve_mru: int,
    workloads: dict,
    *,
    now: datetime,
    first_deployment_pk: int,
) -> list:
    """The VMs deployed 30 days ago, then the last slice's failed deploys (disk, then memory) with
    ZOS's own error texts, when that slice is free."""
    from dashboard.models import Deployment

    size = carve.slice
    deployments = []

    def deployment(index: int, **fields) -> None:
        deployments.append(
            Deployment(
                pk=first_deployment_pk + len(deployments),
                node_id=spec.node_id,
                slice_id=slices[index].pk,
                slice_index=index,
                cru=size.cru,
                mru=size.mru,
                sru=size.sru,
                requested_by=None,
                started_at=now - timedelta(days=30, minutes=index),
                finished_at=now - timedelta(days=30),
                capacity_seen={"total": spec.total.as_dict(), "used": used.as_dict(), "status": spec.status},
                **fields,
            )
        )

    for index in range(spec.deployed):
        deployment(index, state=Deployment.State.DEPLOYED, grid_workload_id=workloads[(spec.node_id, index)])
    last = carve.slices - 1
    if spec.failed_disk and last >= spec.deployed:
        deployment(
            last,
            state=Deployment.State.FAILED,
            cause=Deployment.Cause.DISK,
            raw_error=(
                f"workload bench{spec.node_id}disk within deployment {spec.node_id * 7} failed with error: "
                f"failed to find a candidate to host vdisk of size '{size.sru}': "
                "not enough space left in pools of this type ssd"
            ),
            needed_bytes=size.sru,
        )
    if spec.failed_memory and last >= spec.deployed:
        usable = max(spec.mru - reserve_mru - last * size.mru, 0)
        deployment(
            last,
            state=Deployment.State.FAILED,
            cause=Deployment.Cause.MEMORY,
            raw_error=(
                f"workload bench{spec.node_id} within deployment {spec.node_id * 7 + 1} failed with error: "
                "failed to satisfy required capacity: "
                f"cannot fulfil required memory size {size.mru} bytes out of usable {usable} bytes"
            ),
            needed_bytes=size.mru,
            usable_bytes=usable,
        )
    return deployments


def _node_rows(
    spec: NodeSpec,
    policy: capacity.Policy,
    workloads: dict,
    *,
    now: datetime,
    first_slice_pk: int,
    first_deployment_pk: int,
):
    """One node's rows as a legacy carve left them: the node, its slices, its deployments."""
    from dashboard.models import Slice

    carve = legacy_carve(spec)
    used, reserve_mru = _node_used(spec, carve.slice)
    slices = _slice_rows(spec, carve, now=now, first_slice_pk=first_slice_pk)
    free = [(s.index, s.size) for s in slices if s.state == Slice.State.FREE]
    check = capacity.precheck(free, spec.total, used, policy) if spec.prechecked and spec.status == "up" else None
    node = _node_row(spec, carve, used, check, free, now=now)
    deployments = _deployment_rows(
        spec, carve, slices, used, reserve_mru, workloads, now=now, first_deployment_pk=first_deployment_pk
    )
    return node, slices, deployments


def copy_rows(model, objects: Iterable, *, with_pk: bool = True) -> None:
    """COPY unsaved model instances into their table, every concrete field (the pk too when with_pk)."""
    from django.db import connection

    fields = [f for f in model._meta.concrete_fields if with_pk or not f.primary_key]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {quote(model._meta.db_table)} ({columns}) FROM STDIN") as copy:
            prep: list[Callable] = [f.get_db_prep_save for f in fields]
            attnames = [f.attname for f in fields]
            for obj in objects:
                copy.write_row([p(getattr(obj, a), connection) for p, a in zip(prep, attnames, strict=True)])
