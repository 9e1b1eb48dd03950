"""ZOS's vCPU bound: one VM may not have more vCPUs than the node has logical CPUs.

zosbase pkg/vm.go `VM.Validate` (vmd, since 2023-09, zos#2056 / #2057), run when vmd starts the VM:

    cpus, err := cpu.Counts(true)            // logical CPUs (threads); the proxy's `cru` is this count
    if vm.CPU == 0 || vm.CPU > uint8(cpus) {
        if cpus == 1 { return fmt.Errorf("invalid cpu must be 1") }
        return fmt.Errorf("invalid cpu must be between 1 and %d", cpus)
    }

`vm.CPU` is a uint8 (zos.MachineCapacity.CPU), so a slice asks at most 255 vCPUs, and the comparison is
against `uint8(cpus)`: a node of 256 threads compares against 0 and refuses every VM, one of 384 against
128. The rule is followed exactly, wrap included (the message still names the untruncated count).
The SUM of vCPUs over a node's VMs is checked by nobody (cores are over-provisioned): only each VM.

A node whose thread count is not known (`cru` 0: never read, or a test's bare Resources) is not judged:
ZOS would know it, the product does not, and nothing real reports 0.
"""

from __future__ import annotations

# zos.MachineCapacity.CPU is a uint8.
MAX_VM_CRU = 255


def zos_vcpu_limit(threads: int) -> int:
    """The most vCPUs VM.Validate lets one VM have on a node of `threads` logical CPUs: `uint8(cpus)`."""
    return threads % 256


def vcpus_refused(vcpus: int, threads: int) -> bool:
    """ZOS's vmd refuses a VM of `vcpus` on a node of `threads` logical CPUs (threads 0: not known, not judged)."""
    if threads <= 0:
        return False
    return vcpus == 0 or vcpus > zos_vcpu_limit(threads)


def zos_cpu_refusal(threads: int) -> str:
    """VM.Validate's own words for a node of `threads` logical CPUs (`%d` of the untruncated count)."""
    if threads == 1:
        return "invalid cpu must be 1"
    return f"invalid cpu must be between 1 and {threads}"
