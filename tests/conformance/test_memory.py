"""ZOS's memory check and its reserve.

zos c556dc0 cmds/modules/provisiond/main.go:429 getNodeReserved:
    counter.SRU += fs.Usage.Size                                   // the zos-cache's quota
    counter.MRU += gridtypes.Max(available.MRU*10/100, 2*gridtypes.Gigabyte)   // integer division

zosbase 063d895 pkg/primitives/statistics.go:
    130 theoreticalUsed := cap.MRU                                  // the workloads' memory + the reserve
    131 actualUsed := m.Total - m.Available
    132 used := gridtypes.Max(theoreticalUsed, gridtypes.Unit(actualUsed))
    134 usable := gridtypes.Unit(m.Total) - used
    154 if required.MRU > usable {                                  // equal fits
    155     return used, fmt.Errorf("cannot fulfil required memory size %d bytes out of usable %d bytes", required.MRU, usable)
    171 errors.Wrap(err, "failed to satisfy required capacity")
"""

from __future__ import annotations

import pytest

from dashboard import capacity
from dashboard.capacity import GiB, MiB, SliceSize
from dashboard.grid.classify import classify
from sim.grid import records
from sim.grid.machine import ZosMachine, usable_mru

ZOS = capacity.profile("zos")


def go_reserve(total_mru: int) -> int:
    return max(total_mru * 10 // 100, 2 * GiB)


@pytest.mark.parametrize("total_gib", [1, 4, 8, 16, 20, 21, 31, 62, 125, 256, 1024])
def test_the_reserve_is_max_of_a_tenth_and_2_gib(total_gib):
    total = total_gib * GiB + (7 if total_gib == 31 else 0)  # an odd byte count: the division floors
    expected = go_reserve(total)
    assert capacity.zos_reserve_mru(total) == expected
    assert ZOS.reserve(capacity.Resources(mru=total)).mru == expected
    assert records.zos_reserve_mru(total) == expected


def test_a_vm_of_exactly_usable_memory_fits_and_one_byte_more_is_refused_in_zos_words():
    total = 31 * GiB
    machine = ZosMachine.boot(1774, cru=8, mru=total, sru=int(931.5 * GiB))
    for i in (1, 2):
        assert machine.place(SliceSize(cru=1, mru=4 * GiB, sru=10 * GiB), name=f"vm{i}", deployment_id=i)[0]
    usable = total - (8 * GiB + go_reserve(total))  # actual is no more than counted on this node
    assert usable_mru(machine.node, machine.vms) == usable
    over = SliceSize(cru=1, mru=usable + 1, sru=0)
    vm, refusal = machine.copy().place(over, name="big", deployment_id=3)
    assert vm is None
    reason = f"failed to satisfy required capacity: cannot fulfil required memory size {usable + 1} bytes out of usable {usable} bytes"
    assert refusal.raw.endswith(reason)
    diagnosis = classify(refusal.raw)
    assert (diagnosis.cause, diagnosis.needed_bytes, diagnosis.usable_bytes, diagnosis.reason) == (
        "memory",
        usable + 1,
        usable,
        reason,
    )
    assert machine.place(SliceSize(cru=1, mru=usable, sru=0), name="exact", deployment_id=4)[0] is not None


def test_the_product_judges_the_same_edge_on_the_counted_use():
    total = capacity.Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    used = capacity.Resources(mru=8 * GiB + go_reserve(total.mru), sru=20 * GiB + 2 * 10 * GiB + 2 * GiB)
    usable = total.mru - used.mru
    assert capacity.fits(capacity.Resources(cru=1, mru=usable, sru=0), total, used, ZOS).fits
    refused = capacity.fits(capacity.Resources(cru=1, mru=usable + 1, sru=0), total, used, ZOS)
    assert (refused.fits, refused.shortfalls[0].resource, refused.shortfalls[0].shortfall) == (False, "mru", 1)


def test_actual_use_above_the_count_is_what_a_refusal_reveals():
    # used = max(counted, actual): a node whose VMs really use 512 MiB each beyond their memory.
    machine = ZosMachine.boot(9, cru=8, mru=16 * GiB, sru=500 * GiB, per_vm_overhead_mru=512 * MiB)
    for i in (1, 2, 3):
        machine.place(SliceSize(cru=1, mru=2 * GiB, sru=0), name=f"vm{i}", deployment_id=i)
    counted = 6 * GiB + go_reserve(16 * GiB)
    actual = go_reserve(16 * GiB) + 3 * (2 * GiB + 512 * MiB)  # a node of no build: its reserve for ZOS
    assert usable_mru(machine.node, machine.vms) == 16 * GiB - max(counted, actual)
    _vm, refusal = machine.place(SliceSize(cru=1, mru=8 * GiB, sru=0), name="x", deployment_id=4)
    usable = classify(refusal.raw).usable_bytes
    assert 16 * GiB - usable == actual  # the host's real use, told only here (docs/zos.md)
