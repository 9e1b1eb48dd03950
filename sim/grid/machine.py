"""One simulated ZOS node deploying and releasing VMs: ZOS's validation, memory check and disks.

- A deployment is one VM: a data disk (zmount, named `<name>disk` as grid-client names
  disks) and the zmachine. ZOS installs zmounts before zmachines (provisiond's
  WithStartupOrder(ZMountType, ...) and engine.installDeployment), and the zmachine's
  memory check runs before its rootfs volume is created. So the order of refusals is:
  validation (synchronous, before any contract), data disk, memory, rootfs.
- Deploy-time memory check (zosbase pkg/primitives/statistics.go, getUsableMemoryBytes and
  hasEnoughCapacity): counted = the running workloads' memory + the reserve, max(10%, 2 GiB);
  actual = MemTotal - MemAvailable; used = max(counted, actual); usable = total - used; refused
  when the VM's memory > usable. Here actual = ZOS's own use + each VM's memory and its per-VM
  overhead, from the node's ZOS build (records.ZOS_BUILDS, with the node's own spread), capped
  at the node's memory. A node with no build uses its reserve for ZOS and
  `per_vm_overhead_mru` per VM (zero by default). `test_vm` adds the daily provisiontest VM
  (1 vCPU / 512 MiB, outside the count: it shows in actual only).
- Disks are placed by storaged (storaged.py): data disk first, then the rootfs
  (max(requested, zos_rootfs(cpu, memory))).
- The sum of vCPUs is not checked (ZOS over-provisions cores), but vmd's `VM.Validate` (zosbase
  pkg/vm.go), run when the VM starts, after its disks, refuses a VM of more vCPUs than the node's
  logical CPUs, compared as `uint8(cpus)`: "machine configuration validation failed: invalid cpu must
  be between 1 and <N>" ("invalid cpu must be 1" on one thread); its disks are removed again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

# Sizes and types only: every decision below is ZOS's rule written here on its own.
from dashboard.capacity import GiB, MiB, Resources, SliceSize
from dashboard.grid.types import DeploymentFailed, PoolMetrics, WorkloadNotFound
from sim.grid.records import ZOS_CACHE_SRU, SimNode, SimVm, checked_pools, now
from sim.grid.storaged import Storaged

# zosbase pkg/storage/storage.go path(): errors.Wrapf(os.ErrNotExist, "subvolume '%s' not found", name).
CACHE_NOT_FOUND = "subvolume 'zos-cache' not found: file does not exist"

NO_SPACE = "not enough space left in pools of this type ssd"


# --- ZOS's arithmetic ------------------------------------------------------------------


PROVISION_TEST_VM_MRU = 512 * MiB  # zosbase's test VM: 1 vCPU / 512 MiB, daily or every 15 minutes by build


TEST_VM_HOURS = 3 / 60  # zosbase's test VM: about 30 s plus boot and teardown, up to ~3 minutes


def test_vm_running_at(zos_build: str, node_id: int, at_hours: float) -> bool:
    """Whether a node of `zos_build` runs ZOS's test VM at `at_hours`: TEST_VM_HOURS once a period of its
    build (daily, or every 15 minutes on v3.14.7/v3.14.8), at the node's own phase.
    A node of no build runs none. The month drives it (traffic.fleet); SimulatedGrid's nodes, which the
    tests deploy on at any time of day, run none (a test would fail three minutes a day)."""
    if not zos_build:
        return False
    period = 0.25 if _fifteen_minute_build(zos_build) else 24.0
    start = ((node_id * 2654435761) % 2**32) / 2**32 * period
    return (at_hours - start) % period < TEST_VM_HOURS


test_vm_running_at.__test__ = False  # type: ignore[attr-defined]  # a domain word, not a test


def _fifteen_minute_build(zos_build: str) -> bool:
    """zos v3.14.7 and v3.14.8 (zosbase v1.0.8) boot it every 15 minutes, v3.14.8-patch.1 on daily again
    (zosbase pkg/perf/healthcheck/, pkg/perf/provisiontest/). The simulator's own reading, apart from
    capacity.test_vm on purpose (tests/sim/test_traffic.py: two implementations of ZOS's rules)."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:-patch\.(\d+))?(?:-.*)?", zos_build.strip())
    if match is None or match.group(1, 2, 3) not in (("3", "14", "7"), ("3", "14", "8")):
        return False
    return not (match.group(3) == "8" and match.group(4) is not None and int(match.group(4)) >= 1)


def actual_mru(node: SimNode, vms: Sequence[SimVm], *, test_vm: bool = False) -> int:
    """Memory really in use on the host (MemTotal - MemAvailable); the hidden use shows up only here."""
    own, per_vm = node.hidden_use()
    test = PROVISION_TEST_VM_MRU + per_vm if test_vm else 0
    return min(node.mru, own + sum(vm.mru + per_vm for vm in vms) + test)


def usable_mru(node: SimNode, vms: Sequence[SimVm], *, test_vm: bool = False) -> int:
    """ZOS's usable memory: total - max(counted, actual)."""
    counted = sum(vm.mru for vm in vms) + node.reserve_mru
    # ZOS computes this in uint64; used never exceeds total here, the clamp only guards a shrunk node.
    return max(node.mru - max(counted, actual_mru(node, vms, test_vm=test_vm)), 0)


class ZosMachine:
    """One ZOS node in memory: its VMs and storaged's pools, deploying and releasing as ZOS does.

    SimulatedGrid places every VM through it; the traffic simulation drives thousands of them
    without a database. Reading it gives only what a real node tells (`reading()`: the
    accounted use); the memory really in use shows in a memory refusal alone.
    """

    def __init__(self, node: SimNode, vms: Sequence[SimVm] = (), *, test_vm: bool = False) -> None:
        self.node = node
        self.vms = list(vms)
        self.storaged = Storaged(node, self.vms)
        self.test_vm = test_vm  # the daily provisiontest VM is running now

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
        zos_build: str = "",
        cache_sru: int = ZOS_CACHE_SRU,
    ) -> ZosMachine:
        sizes = checked_pools(pools, sru)
        node = SimNode(
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
            zos_build=zos_build,
            cache_sru=cache_sru,
        )
        return cls(node)

    def copy(self) -> ZosMachine:
        twin = ZosMachine.__new__(ZosMachine)
        twin.node, twin.vms, twin.test_vm = self.node, list(self.vms), self.test_vm
        twin.storaged = self.storaged.copy()
        return twin

    def place(self, size: SliceSize, *, name: str, deployment_id: int) -> tuple[SimVm | None, DeploymentFailed | None]:
        """Deploy one VM: (the VM, None) or (None, the refusal in ZOS's words)."""
        node, storaged = self.node, self.storaged
        if node.cache_missing:
            # provisiond's reserve asks storaged for the zos-cache, which is gone (zos#2043): every workload
            # fails its capacity check before anything is made (primitives/statistics.go hasEnoughCapacity).
            return None, _refused(
                name,
                deployment_id,
                f"failed to satisfy required capacity: failed to get available memory: {CACHE_NOT_FOUND}",
            )
        # When memory and the data disk are both short, both workloads fail; the error the
        # deployer and the client surface is the VM's own (the Rust client's "vm deployment
        # entered error state" is about the zmachine), so memory is reported first.
        usable = usable_mru(node, self.vms, test_vm=self.test_vm)
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
        invalid = vm_validate(size.cru, node.cru)
        if invalid:
            # vmd refused to start it: the rootfs volume is deleted again, as is the data disk.
            storaged.allocated[rootfs_pool] -= rootfs
            if data_pool is not None:
                storaged.allocated[data_pool] -= size.sru
            return None, _refused(name, deployment_id, f"machine configuration validation failed: {invalid}")
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
            created_at=now(),
        )
        self.vms.append(vm)
        return vm, None

    def cache_check(self, in_use: int) -> int:
        """storaged's periodic cache check with `in_use` bytes in the zos-cache: its new quota."""
        size = self.storaged.resize_cache(in_use)
        self.node = replace(self.node, cache_sru=size)
        return size

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

    def storage_pools(self) -> tuple[PoolMetrics, ...]:
        """What the node answers to `zos.storage.pools`: its SSD pools in device order, each with
        its size and what is allocated in it, 0 for a pool not mounted (zosbase Metrics, poolUsage)."""
        storaged, node = self.storaged, self.node
        return tuple(
            PoolMetrics(
                name=pool_label(node.node_id, index),
                type="ssd",
                size=size,
                used=storaged.allocated[index] if index in storaged.mounted else 0,
            )
            for index, size in enumerate(storaged.sizes)
        )

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


def pool_label(node_id: int, index: int) -> str:
    """A pool's name: ZOS names a pool by its filesystem's label, a uuid; a stable one here."""
    return f"{node_id:08x}-0000-4000-8000-{index:012x}"


def zos_rootfs(cru: int, mru: int) -> int:
    """zmachine.go MinRootSize: cu = cpu * memory / 8 GiB in whole units; 500 MiB when it is 0, else 2 GiB."""
    return 500 * MiB if cru * mru // (8 * GiB) == 0 else 2 * GiB


ZOS_MIN_MRU = 250 * MiB  # zmachine.go: "mem capacity can't be less that 250M"


def vm_validate(vcpus: int, threads: int) -> str:
    """vmd's VM.Validate on the CPU (zosbase pkg/vm.go): `vm.CPU == 0 || vm.CPU > uint8(cpus)`, its own
    words ("%d" of the untruncated count); "" when it starts."""
    if vcpus == 0 or vcpus > threads & 0xFF:
        return "invalid cpu must be 1" if threads == 1 else f"invalid cpu must be between 1 and {threads}"
    return ""


def validation_error(size: SliceSize) -> str:
    """ZOS's zmachine validation (pkg/gridtypes/zos/zmachine.go), its own words and typos; "" when valid."""
    if size.cru == 0:
        return "cpu capacity can't be 0"  # "cpu capcity" before zosbase fixed the typo
    if size.mru < ZOS_MIN_MRU:
        return "mem capacity can't be less that 250M"
    minimum = zos_rootfs(size.cru, size.mru)
    if size.rootfs != 0 and size.rootfs < minimum:
        return f"disk size can't be less that {minimum}. Set to 0 for minimum"
    return ""


def _refused(workload: str, deployment_id: int, reason: str) -> DeploymentFailed:
    # The Go deployer's wrapping (tfgrid-sdk-go deployer.Wait); classify() unwraps it.
    return DeploymentFailed(f"workload {workload} within deployment {deployment_id} failed with error: {reason}")
