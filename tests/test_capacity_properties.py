"""Property tests: a zos carve is exactly what ZOS will accept, on any sane node.

`ZosNode` below re-states ZOS's own rules from docs/domain.md and the zos sources, on purpose
without importing any arithmetic from dashboard.capacity: the carve is checked against
an independent reading of the rules, not against itself.

- memory: ZOS keeps max(total // 10, 2 GiB) (provisiond getNodeReserved); a VM is refused
  when its memory exceeds total - used, where used = sum of VM memory + that reserve
  (pkg/primitives/statistics.go).
- disk: zos-cache takes 20 GiB of the first SSD pool; each disk is placed whole in the first
  pool with room for it (pkg/storage), the VM's data disk first, then its rootfs.
- rootfs: cu = cpu * memory / 8 GiB, in bytes; 500 MiB when cu is 0, else 2 GiB
  (pkg/gridtypes/zos/zmachine.go MinRootSize).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard import capacity

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
TIB = 1024 * GIB

ZOS = capacity.PROFILES["zos"]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def zos_rootfs(cpu: int, memory: int) -> int:
    cu = cpu * memory // (8 * GIB)
    return 500 * MIB if cu == 0 else 2 * GIB


@dataclass
class ZosNode:
    total_mru: int
    pools: list[int]
    vm_mru: int = 0
    free: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.free = list(self.pools)
        self.free[0] -= 20 * GIB

    @property
    def reserve_mru(self) -> int:
        return max(self.total_mru // 10, 2 * GIB)

    def _place(self, size: int) -> bool:
        for i, room in enumerate(self.free):
            if room >= size:
                self.free[i] = room - size
                return True
        return False

    def deploy(self, cpu: int, memory: int, data_disk: int) -> str | None:
        """Deploy one VM; None when accepted, else the resource ZOS refuses it on."""
        usable = self.total_mru - (self.vm_mru + self.reserve_mru)
        if memory > usable:
            return "memory"
        before = list(self.free)
        if not self._place(data_disk) or not self._place(zos_rootfs(cpu, memory)):
            self.free = before  # a refused deployment leaves nothing behind
            return "disk"
        self.vm_mru += memory
        return None


@st.composite
def sane_nodes(draw):
    cru = draw(st.integers(1, 128))
    mru = draw(st.integers(4 * GIB, 1024 * GIB))
    sru = draw(st.integers(50 * GIB, 16 * TIB))
    pools = None
    if draw(st.booleans()):
        # 1-4 SSDs adding up to the node's SSD; the first holds zos-cache, so give it room for it.
        count = draw(st.integers(1, min(4, 1 + (sru - 30 * GIB) // (10 * GIB))))
        rest = sru - 30 * GIB - 10 * GIB * (count - 1)
        cuts = sorted(draw(st.lists(st.integers(0, rest), min_size=count - 1, max_size=count - 1)))
        extra = [b - a for a, b in zip([0, *cuts], [*cuts, rest])]
        pools = [extra[0] + 30 * GIB] + [e + 10 * GIB for e in extra[1:]]
        assert sum(pools) == sru
    return capacity.Resources(cru=cru, mru=mru, sru=sru), pools


def deploy_all(node: ZosNode, size: capacity.SliceSize, count: int) -> list[str | None]:
    return [node.deploy(size.cru, size.mru, size.sru) for _ in range(count)]


def one_more_size(result: capacity.Carve) -> capacity.SliceSize:
    # With no slice carved, "one more" is the smallest slice the policy would offer.
    if result.new_slices:
        return result.slice
    return capacity.SliceSize(cru=ZOS.slice_cru, mru=ZOS.slice_mru, sru=ZOS.min_slice_sru)


@SETTINGS
@given(sane_nodes())
def test_it_carves_only_slices_that_zos_deploys_all_together(node):
    total, pools = node
    result = capacity.carve(total, ZOS, pools=pools)
    zos = ZosNode(total.mru, pools or [total.sru])
    assert deploy_all(zos, result.slice, result.new_slices) == [None] * result.new_slices


@SETTINGS
@given(sane_nodes())
def test_it_leaves_no_room_for_one_more_slice(node):
    total, pools = node
    result = capacity.carve(total, ZOS, pools=pools)
    zos = ZosNode(total.mru, pools or [total.sru])
    deploy_all(zos, result.slice, result.new_slices)
    size = one_more_size(result)
    assert zos.deploy(size.cru, size.mru, size.sru) in ("memory", "disk")


@SETTINGS
@given(sane_nodes())
def test_it_says_which_resource_limits_the_carve(node):
    total, pools = node
    result = capacity.carve(total, ZOS, pools=pools)
    zos = ZosNode(total.mru, pools or [total.sru])
    deploy_all(zos, result.slice, result.new_slices)
    size = one_more_size(result)
    refused_on = zos.deploy(size.cru, size.mru, size.sru)
    assert {"memory": "mru", "disk": "sru"}[refused_on] == result.limited_by


@SETTINGS
@given(sane_nodes(), st.data())
def test_it_re_carves_around_deployed_slices_so_that_all_still_deploy(node, data):
    total, pools = node
    first = capacity.carve(total, ZOS, pools=pools)
    deployed = data.draw(st.integers(0, first.new_slices), label="deployed")
    zos = ZosNode(total.mru, pools or [total.sru])
    deploy_all(zos, first.slice, deployed)
    again = capacity.carve(total, ZOS, occupied=[first.slice.resources] * deployed, pools=pools)
    assert (again.overcommitted, again.slices) == (False, first.slices)
    assert deploy_all(zos, again.slice, again.new_slices) == [None] * again.new_slices


@SETTINGS
@given(sane_nodes())
def test_it_finds_no_phantom_in_a_fresh_zos_catalog(node):
    total, pools = node
    result = capacity.carve(total, ZOS, pools=pools)
    # The Grid Proxy's view of an empty node: only the reserve is used.
    used = capacity.Resources(mru=max(total.mru // 10, 2 * GIB), sru=20 * GIB)
    free = [(i, result.slice) for i in range(result.new_slices)]
    assert capacity.precheck(free, total, used, ZOS).phantom_slices == ()


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 1024 * TIB))
def test_it_parses_any_plain_byte_count(n):
    assert capacity.parse_size(str(n)) == n


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 1024 * TIB))
def test_it_formats_sizes_within_half_a_percent(n):
    # Two decimals of the largest unit: what an operator reads is close to the truth. Rounding
    # to 0.01 of a unit that n holds at least once is at most 0.5%, and parsing back rounds down
    # to a whole byte (1111 B reads "1.08 KiB", which parses to 1105 B).
    assert abs(capacity.parse_size(capacity.format_size(n).replace(" ", "")) - n) <= n * 0.005 + 1
