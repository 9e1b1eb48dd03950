"""Numbers and words from public ZOS issues, run against the product (read with the `search` tool, corpus
`issues`; quoted as the issues have them).
"""

from __future__ import annotations

from dashboard import capacity
from dashboard.grid.classify import classify
from sim.grid.machine import ZosMachine, validation_error

GiB = capacity.GiB
MiB = capacity.MiB
ZOS = capacity.profile("zos")


# --- zos#2147 "failed to create flist mountpoint: disk quota exceeded" (testnet node 13, 2023-12-01) -------

FIRST = (
    "workload vm within deployment 26953 failed with error:\nfailed to write image to disk: failed to write disk "
    "image:\nread /var/cache/modules/flistd/mountpoint/81-26953-vm/image.raw: input/output error"
)
THEN = (
    "Error: Failed to deploy zmachine with name diskfulltest on node 13 due to: \nfailed to mount flist: "
    "81-27043-diskfulltest: ro mount of flist failed: \nfailed to create flist mountpoint: mkdir "
    "/var/cache/modules/flistd/ro/e4b87e423369bbd1a5550a1ca99a69a6: \ndisk quota exceeded"
)
# zos.statistics.get and zos.storage.pools of that node, as the issue quotes them
STATS_TOTAL = capacity.Resources(cru=24, mru=202800123904, sru=512110190592)
STATS_USED = capacity.Resources(cru=4, mru=37258554982, sru=192199786496)
STATS_SYSTEM_SRU = 10737418240  # the zos-cache's quota then: 10 GiB
POOL_SSD = (512110190592, 192241729536)  # size, used


def test_2147_both_errors_are_the_zos_cache_refusing_a_full_vm_image_transiently():
    for raw in (FIRST, THEN):
        diagnosis = classify(raw)
        assert diagnosis.cause == "cache-full", raw
        assert "transient" in diagnosis.words and "retry" in diagnosis.words
        assert "do not re-register" in diagnosis.words
    assert classify(THEN).reason.startswith("failed to mount flist: 81-27043-diskfulltest")


def test_2147_the_node_was_not_full_and_the_product_says_so():
    # "Node should have plenty of SSD available": 25 GB disk on a 512 GB pool with 192 GB used.
    verdict = capacity.fits(capacity.Resources(cru=2, mru=4 * GiB, sru=25 * 10**9), STATS_TOTAL, STATS_USED, ZOS)
    assert verdict.fits


def test_2147_the_cache_quota_a_pool_report_bounds_is_at_least_zos_own():
    # The pool holds the VMs' disks (statistics used less the cache's quota) and the quota, plus 40 MiB of
    # other subvolumes: the bound rounds that up to whole 5 GiB steps, so it is 15 GiB where ZOS kept 10.
    # Deliberate margin: a bound from above keeps room; it never offers room the cache holds.
    disks = STATS_USED.sru - STATS_SYSTEM_SRU
    bound = capacity.cache_bound([POOL_SSD[0]], [POOL_SSD[1]], disks_sru=disks)
    assert bound == (15 * GiB, 0)
    assert bound[0] >= STATS_SYSTEM_SRU and bound[0] - STATS_SYSTEM_SRU <= capacity.CACHE_STEP


# --- zos#2043 "Some nodes have no cache" (mainnet survey over RMB, 2023-08-30) -------------------------------


def test_2043_the_nodes_answer_is_a_node_without_its_cache():
    said = "subvolume 'zos-cache' not found: file does not exist"  # "responded with the error: ..."
    diagnosis = classify(said)
    assert diagnosis.cause == "cache-missing"
    assert "refuses every workload" in diagnosis.words
    # Such a node refuses every deploy in these words (the simulated node, as zos provisiond does it).
    machine = ZosMachine.boot(5616, cru=8, mru=32 * GiB, sru=512 * GiB)
    from dataclasses import replace

    machine.node = replace(machine.node, cache_missing=True)
    _vm, refusal = machine.place(capacity.SliceSize(cru=1, mru=2 * GiB, sru=0), name="vm", deployment_id=1)
    assert refusal.raw.endswith(f"failed to satisfy required capacity: failed to get available memory: {said}")
    assert classify(refusal.raw).cause == "cache-missing"


# --- zos#2351 "node can't deploy a workload even if it covers the required capacity" (node 11, 2024-06-04) ---

TOTAL_SRU, USED_SRU = 512110190592, 480436551680  # "free 31673638912 around 29GB"


def test_2351_the_rootfs_is_charged_beside_the_disk_as_zos_does():
    # "the script asks for sru with only the disk size ... deploying the machine required extra sru for
    # rootfs": 2 GiB for a VM of 1 CU or more (zmachine.go MinRootSize).
    total = capacity.Resources(cru=8, mru=64 * GiB, sru=TOTAL_SRU)
    used = capacity.Resources(mru=8 * GiB, sru=USED_SRU)
    free = TOTAL_SRU - USED_SRU
    just_disk = capacity.Resources(cru=2, mru=4 * GiB, sru=free - GiB)  # the disk alone fits the free SSD
    verdict = capacity.fits(just_disk, total, used, ZOS)
    assert not verdict.fits and verdict.shortfalls[0].needed == free - GiB + 2 * GiB
    assert capacity.fits(capacity.Resources(cru=2, mru=4 * GiB, sru=free - 2 * GiB), total, used, ZOS).fits
    diagnosis = classify("failed to create vm rootfs: not enough space left in pools of this type ssd")
    assert diagnosis.cause == "disk" and "root filesystem" in diagnosis.words


# --- zos#1818 "Rootfs sizing message and actual minimum inconsistent" (terraform, 2022-10-25) ---------------


def test_1818_the_minimum_rootfs_message_and_the_vdisk_that_did_not_fit():
    # cpu = 1, memory = 1024, rootfs_size = 200 -> "disk size can't be less that 524288000. Set to 0 for minimum"
    size = capacity.SliceSize(cru=1, mru=1024 * MiB, sru=0, rootfs=200 * MiB)
    assert validation_error(size) == "disk size can't be less that 524288000. Set to 0 for minimum"
    assert capacity.zos_rootfs(1, 1024 * MiB) == 524288000
    # "failed to find a candidate to host vdisk of size '214748364800'": the 200 GiB data disk, not the rootfs
    diagnosis = classify(
        "error: failed to find a candidate to host vdisk of size '214748364800': "
        "not enough space left in pools of this type ssd"
    )
    assert (diagnosis.cause, diagnosis.needed_bytes) == ("disk", 200 * GiB)


# --- zos#2355 "Failed to deploy a vm (no space left on device) (failed to spawn vm machine process)" ---------


def test_2355_a_vm_process_that_does_not_start_is_the_nodes_fault_not_the_slices():
    diagnosis = classify("failed to spawn vm machine process '26-121634-vmj3a98'")
    assert diagnosis.cause == "unknown" and "fault of the node" in diagnosis.words
