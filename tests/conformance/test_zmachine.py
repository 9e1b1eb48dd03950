"""zosbase 063d895 pkg/gridtypes/zos/zmachine.go and its test:

    91  func (m *ZMachine) MinRootSize() gridtypes.Unit {
    94      cu := gridtypes.Unit(m.ComputeCapacity.CPU) * m.ComputeCapacity.Memory / (8 * gridtypes.Gigabyte)
    96      if cu == 0 { return 500 * gridtypes.Megabyte }
    100     return 2 * gridtypes.Gigabyte
    103 func (m *ZMachine) RootSize() ... if m.Size > min { return m.Size }; return min
    123 if v.ComputeCapacity.CPU == 0 { return fmt.Errorf("cpu capacity can't be 0") }
    126 if v.ComputeCapacity.Memory < 250*gridtypes.Megabyte { "mem capacity can't be less that 250M" }
    130 if v.Size != 0 && v.Size < minRoot { "disk size can't be less that %d. Set to 0 for minimum" }  // %d: bytes
    182 Capacity(): CRU = CPU, MRU = Memory, SRU = RootSize()  // the zmount (data disk) is its own workload

gridtypes units are 1024-based (pkg/gridtypes/common.go:30 Kilobyte Unit = 1024).
zmachine_test.go:11 TestZMachineSRU's cases, exactly: (CPU, Memory) -> RootSize with Size 0.
"""

from __future__ import annotations

import pytest

from dashboard import capacity
from dashboard.capacity import GiB, MiB, SliceSize
from dashboard.grid.classify import classify
from sim.grid import machine

ZMACHINE_TEST_SRU = [
    # zmachine_test.go lines 18-73, in its order
    (1, 8 * GiB, 2 * GiB),
    (1, 4 * GiB, 500 * MiB),
    (2, 4 * GiB, 2 * GiB),
    (3, 4 * GiB, 2 * GiB),
    (4, 5 * GiB, 2 * GiB),
    (1, 1 * GiB, 500 * MiB),
    (1, 250 * MiB, 500 * MiB),
]


@pytest.mark.parametrize(("cpu", "memory", "expected"), ZMACHINE_TEST_SRU)
def test_the_rootfs_of_zmachine_test_go(cpu, memory, expected):
    assert capacity.zos_rootfs(cpu, memory) == expected  # what the carve and the precheck charge
    assert machine.zos_rootfs(cpu, memory) == expected  # what the simulated node allocates
    assert capacity.vm_disks(capacity.profile("zos"), cpu, memory, 0) == (0, expected)


def test_a_vm_is_charged_its_memory_its_data_disk_and_its_rootfs():
    # Capacity(): SRU = RootSize() for the zmachine; the zmount's Size is charged as its own workload.
    charge = capacity.profile("zos").vm_charge(2, 4 * GiB, 100 * GiB)
    assert (charge.cru, charge.mru, charge.sru) == (2, 4 * GiB, 100 * GiB + 2 * GiB)


@pytest.mark.parametrize(
    ("size", "words"),
    [
        (SliceSize(cru=0, mru=4 * GiB, sru=GiB), "cpu capacity can't be 0"),  # zmachine.go:124
        (SliceSize(cru=1, mru=250 * MiB - 1, sru=GiB), "mem capacity can't be less that 250M"),  # :127
        # :131 with %d: 1 vCPU, 1 GiB: minimum 500 MiB = 524288000 bytes (zos#1818's numbers)
        (
            SliceSize(cru=1, mru=GiB, sru=0, rootfs=200 * MiB),
            "disk size can't be less that 524288000. Set to 0 for minimum",
        ),
        (
            SliceSize(cru=4, mru=16 * GiB, sru=0, rootfs=GiB),
            f"disk size can't be less that {2 * GiB}. Set to 0 for minimum",
        ),
    ],
)
def test_zmachine_valid_refuses_in_its_own_words_and_the_classifier_knows_them(size, words):
    assert machine.validation_error(size) == words
    assert classify(f"deployment is invalid: {words}").cause == "validation"


def test_zmachine_valid_takes_exactly_its_minimums():
    assert machine.validation_error(SliceSize(cru=1, mru=250 * MiB, sru=0, rootfs=500 * MiB)) == ""
    assert machine.validation_error(SliceSize(cru=1, mru=250 * MiB, sru=0, rootfs=0)) == ""  # 0: the minimum
    # The product's policies never make a slice below ZOS's 250 MiB (capacity.MIN_VM_MRU).
    with pytest.raises(capacity.PolicyError, match="250 MiB"):
        capacity.with_overrides(capacity.profile("zos"), slice_mru=250 * MiB - 1)


def test_the_typo_before_zosbase_fixed_it_is_still_known():
    # zos before zosbase wrote "cpu capcity can't be 0"; nodes on old builds still say it.
    assert classify("cpu capcity can't be 0").cause == "validation"
