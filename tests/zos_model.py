"""An independent model of how ZOS places VMs, for the property tests of the capacity arithmetic.

`ZosNode` re-states ZOS's own rules from docs/domain.md and the zos sources, on purpose
without importing any arithmetic from dashboard.capacity: the carve is checked against
an independent reading of the rules, not against itself.

- memory: ZOS keeps max(total // 10, 2 GiB) (provisiond getNodeReserved); a VM is refused
  when its memory exceeds total - max(accounted, really used), accounted = sum of VM memory
  + that reserve, really used = accounted + the hidden use of each running VM
  (pkg/primitives/statistics.go).
- disk (pkg/storage findCandidates, vDiskFindCandidate): zos-cache (20 GiB) sits in the pool
  with the most space, the others start unmounted. A disk goes to the mounted pool with the
  most room left after it; if none holds it, to the first unmounted pool in device order
  that does. A data disk prefers a pool that already holds vdisks; the rootfs takes the best
  candidate. The device order is not reported, so every order is tried.
- rootfs: cu = cpu * memory / 8 GiB, in bytes; 500 MiB when cu is 0, else 2 GiB
  (pkg/gridtypes/zos/zmachine.go MinRootSize).
"""

from __future__ import annotations

from itertools import permutations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from dashboard import capacity
from tests.support import examples

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
TIB = 1024 * GIB

ZOS = capacity.PROFILES["zos"]
SETTINGS = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def zos_rootfs(cpu: int, memory: int) -> int:
    cu = cpu * memory // (8 * GIB)
    return 500 * MIB if cu == 0 else 2 * GIB


class ZosNode:
    """One node in one device order, deploying VMs as ZOS does."""

    def __init__(self, total_mru: int, pools: list[int], *, hidden_per_vm: int = 0, cache: int = 20 * GIB):
        self.total_mru = total_mru
        self.hidden_per_vm = hidden_per_vm
        self.size = list(pools)
        cache_at = max(range(len(pools)), key=lambda i: (pools[i], -i))
        self.cache_at = cache_at
        self.taken = [cache if i == cache_at else 0 for i in range(len(pools))]
        self.mounted = {cache_at}
        self.has_vdisks: set[int] = set()
        self.vms: list[int] = []  # memory of each running VM

    @property
    def reserve_mru(self) -> int:
        return max(self.total_mru // 10, 2 * GIB)

    def usable_mru(self) -> int:
        accounted = sum(self.vms) + self.reserve_mru
        really = accounted + self.hidden_per_vm * len(self.vms)
        return self.total_mru - max(accounted, really)

    def _pick(self, size: int, vdisk: bool) -> int | None:
        left = {i: self.size[i] - self.taken[i] - size for i in self.mounted if self.taken[i] + size <= self.size[i]}
        if left:
            best_first = sorted(left, key=lambda i: (-left[i], i))
            if vdisk:
                return next((i for i in best_first if i in self.has_vdisks), best_first[0])
            return best_first[0]
        for i in range(len(self.size)):
            if i not in self.mounted and self.taken[i] + size <= self.size[i]:
                return i
        return None

    def _allocate(self, size: int, vdisk: bool) -> bool:
        if size == 0:
            return True
        i = self._pick(size, vdisk)
        if i is None:
            return False
        self.taken[i] += size
        self.mounted.add(i)
        if vdisk:
            self.has_vdisks.add(i)
        return True

    def grow_cache(self) -> None:
        """zosbase checkAndResizeCache at 60% full: the zos-cache's quota grows by 5 GiB, room or not."""
        self.taken[self.cache_at] += 5 * GIB

    def deploy(self, cpu: int, memory: int, data_disk: int) -> str | None:
        """Deploy one VM; None when accepted, else the resource ZOS refuses it on."""
        if memory > self.usable_mru():
            return "memory"
        before = (list(self.taken), set(self.mounted), set(self.has_vdisks))
        if not self._allocate(data_disk, True) or not self._allocate(zos_rootfs(cpu, memory), False):
            self.taken, self.mounted, self.has_vdisks = before  # the test undoes a refused deployment
            return "disk"
        self.vms.append(memory)
        return None


def every_order(total_mru: int, pools: list[int] | None, sru: int, **kwargs) -> list[ZosNode]:
    return [ZosNode(total_mru, list(order), **kwargs) for order in sorted(set(permutations(pools or [sru])))]


@st.composite
def sane_nodes(draw):
    """Memory 4-512 GiB, SSD 120 GiB-8 TiB; a third with one SSD, a third with 2-4 pools of near-equal
    size, the others with 1-4 pools of any size. The pools are given to the carve (reported)."""
    cru = draw(st.integers(1, 128))
    mru = draw(st.integers(4 * GIB, 512 * GIB))
    sru = draw(st.integers(120 * GIB, 8 * TIB))
    kind = draw(st.sampled_from(["one", "near-equal", "any"]))
    pools = [sru]
    if kind == "near-equal":
        count = draw(st.integers(2, 4))
        base = sru // count
        pools = [base + draw(st.integers(-base // 50, base // 50)) for _ in range(count)]
    elif kind == "any":
        count = draw(st.integers(1, 4))
        rest = sru - 30 * GIB - 10 * GIB * (count - 1)
        cuts = sorted(draw(st.lists(st.integers(0, rest), min_size=count - 1, max_size=count - 1)))
        extra = [b - a for a, b in zip([0, *cuts], [*cuts, rest], strict=True)]
        pools = [extra[0] + 30 * GIB] + [e + 10 * GIB for e in extra[1:]]
        pools = draw(st.permutations(pools))
    sru = sum(pools)
    return capacity.Resources(cru=cru, mru=mru, sru=sru), pools


def deploy_all(node: ZosNode, size: capacity.SliceSize, count: int) -> list[str | None]:
    return [node.deploy(size.cru, size.mru, size.sru) for _ in range(count)]


def most_slices_by_memory(total_mru: int, hidden_per_vm: int = 0) -> int:
    """How many slices' memory ZOS accepts at once, with disks out of the way."""
    node = ZosNode(total_mru, [64 * TIB], hidden_per_vm=hidden_per_vm)
    count = 0
    while node.deploy(ZOS.slice_cru, ZOS.slice_mru, 0) is None:
        count += 1
    return count
