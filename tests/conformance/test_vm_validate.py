"""zosbase 063d895 pkg/vm.go `VM.Validate` (lines 158-199), run by vmd (pkg/vm/manager.go:425 `Run`):

    171  if vm.Memory < 250*gridtypes.Megabyte { return fmt.Errorf("invalid memory must not be less than 250M") }
    175  cpus, err := cpu.Counts(true)
    180  if vm.CPU == 0 || vm.CPU > uint8(cpus) {
    181      if cpus == 1 { return fmt.Errorf("invalid cpu must be 1") }
    184      return fmt.Errorf("invalid cpu must be between 1 and %d", cpus)      // %d: the untruncated count
    426  errors.Wrap(err, "machine configuration validation failed")          // manager.go

zos#2056 (2023-09, verified on the TS client and the playground): "this limitation is done per VM so a
node with 8 cores can still has 2 VMs each with 8 VCPUs". The Grid Proxy's `cru` is `cpu.Counts(true)`.
"""

from __future__ import annotations

import pytest

from dashboard import capacity
from dashboard.grid.classify import classify
from sim.grid.machine import ZosMachine, vm_validate

GiB = capacity.GiB
ZOS = capacity.profile("zos")


def go_validate(vcpus: int, threads: int) -> str:
    """VM.Validate's CPU branch, transcribed line by line (Go's uint8() conversion truncates mod 256)."""
    if vcpus == 0 or vcpus > threads % 256:
        if threads == 1:
            return "invalid cpu must be 1"
        return f"invalid cpu must be between 1 and {threads}"
    return ""


# (vCPUs of the VM, the node's logical CPUs)
CASES = [
    (1, 1),
    (2, 1),
    (1, 2),
    (2, 2),
    (4, 2),  # the case: a 4-vCPU policy on a 2-thread node
    (8, 8),
    (9, 8),
    (16, 24),
    (255, 255),
    (1, 256),  # uint8(256) == 0: ZOS refuses every VM on a 256-thread node
    (128, 384),  # uint8(384) == 128
    (129, 384),
    (0, 8),  # vm.CPU == 0 (zmachine.Valid refuses it first: "cpu capacity can't be 0")
]


@pytest.mark.parametrize(("vcpus", "threads"), CASES)
def test_the_product_and_the_simulated_vmd_refuse_as_vm_validate_does(vcpus, threads):
    expected = go_validate(vcpus, threads)
    assert capacity.vcpus_refused(vcpus, threads) == bool(expected)
    assert vm_validate(vcpus, threads) == expected
    if expected:
        assert capacity.zos_cpu_refusal(threads) == expected  # the words, %d of the untruncated count


@pytest.mark.parametrize(("vcpus", "threads"), [c for c in CASES if c[0] > 0])
def test_the_carve_carves_no_slice_zos_would_refuse_and_says_why(vcpus, threads):
    policy = capacity.with_overrides(ZOS, slice_cru=vcpus)
    carve = capacity.carve(capacity.Resources(cru=threads, mru=64 * GiB, sru=1000 * GiB), policy)
    if go_validate(vcpus, threads):
        assert (carve.new_slices, carve.limited_by) == (0, "cru")
        assert f'"{go_validate(vcpus, threads)}"' in carve.notes[0]
    else:
        assert carve.new_slices > 0


def test_the_sum_over_vms_is_not_limited_as_zos_2056_says():
    # "a node with 8 cores can still has 2 VMs each with 8 VCPUs": the precheck places both.
    total = capacity.Resources(cru=8, mru=64 * GiB, sru=1000 * GiB)
    size = capacity.SliceSize(cru=8, mru=4 * GiB, sru=50 * GiB)
    used = capacity.Resources(mru=capacity.zos_reserve_mru(total.mru), sru=20 * GiB)
    assert capacity.placeable_count(size, total, used, ZOS, limit=2) == 2
    machine = ZosMachine.boot(1, cru=8, mru=64 * GiB, sru=1000 * GiB)
    assert all(machine.place(size, name=f"vm{i}", deployment_id=i)[0] for i in (1, 2))


def test_a_vm_over_the_threads_is_refused_by_the_precheck_and_by_zos_in_its_words():
    total = capacity.Resources(cru=2, mru=16 * GiB, sru=465 * GiB)
    size = capacity.SliceSize(cru=4, mru=2 * GiB, sru=50 * GiB)
    verdict = capacity.fits(size, total, capacity.Resources(mru=2 * GiB, sru=20 * GiB), ZOS)
    assert (verdict.fits, verdict.shortfalls[0].resource) == (False, "cru")
    vm, refusal = ZosMachine.boot(1, cru=2, mru=16 * GiB, sru=465 * GiB).place(size, name="vm", deployment_id=7)
    assert vm is None
    assert refusal.raw == (
        "workload vm within deployment 7 failed with error: "
        "machine configuration validation failed: invalid cpu must be between 1 and 2"
    )
    diagnosis = classify(refusal.raw)
    assert (diagnosis.cause, diagnosis.reason) == (
        "validation",
        "machine configuration validation failed: invalid cpu must be between 1 and 2",
    )
    assert "2 logical CPUs" in diagnosis.words


def test_vmd_refuses_memory_below_250m_in_its_own_words():
    # pkg/vm.go:171; zmachine.Valid refuses it first with "mem capacity can't be less that 250M".
    diagnosis = classify("machine configuration validation failed: invalid memory must not be less than 250M")
    assert diagnosis.cause == "validation"


def test_a_policy_cannot_ask_more_vcpus_than_zos_can_express():
    # zos.MachineCapacity.CPU is a uint8: 255 at most.
    assert capacity.with_overrides(ZOS, slice_cru=255).slice_cru == 255
    with pytest.raises(capacity.PolicyError, match="at most 255"):
        capacity.with_overrides(ZOS, slice_cru=256)
