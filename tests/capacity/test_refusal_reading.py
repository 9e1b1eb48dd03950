"""capacity.refusal_reading: a memory refusal as calibration's sample, worked by hand (zosbase
pkg/primitives/statistics.go: usable = total - max(counted, actual); the counted reserve is
max(10% of total, 2 GiB), the proxy's SSD reserve a fixed 20 GiB)."""

from dashboard.capacity import GiB, MiB, RefusalReading, refusal_reading


def test_a_big_node_keeps_a_tenth_of_its_memory_for_zos():
    # 256 GiB: ZOS counts 25.6 GiB for itself; 100 GiB accounted is 74.4 GiB of VMs; usable 140 GiB says
    # the host used 116 GiB; 500 GiB of SSD accounted is 480 GiB of VM disks past the proxy's 20 GiB.
    reading = refusal_reading(
        vm_count=10, total_mru=256 * GiB, accounted_mru=100 * GiB, usable_mru=140 * GiB, used_sru=500 * GiB
    )
    tenth = 256 * GiB // 10
    assert reading == RefusalReading(10, 100 * GiB - tenth, 116 * GiB, 480 * GiB, 500 * GiB)


def test_a_small_node_keeps_the_2_gib_floor_and_nothing_goes_below_zero():
    # 8 GiB: a tenth is 819 MiB, under the 2 GiB floor; 1 GiB accounted is under it (no VM memory), a usable
    # above the total is no use at all, and 10 GiB of SSD is under the proxy's reserve.
    reading = refusal_reading(vm_count=1, total_mru=8 * GiB, accounted_mru=GiB, usable_mru=9 * GiB, used_sru=10 * GiB)
    assert reading == RefusalReading(1, 0, 0, 0, 10 * GiB)
    assert 8 * GiB // 10 < 2 * GiB - MiB


def test_a_reading_kept_before_its_ssd_was_has_memory_only():
    reading = refusal_reading(
        vm_count=2, total_mru=32 * GiB, accounted_mru=12 * GiB, usable_mru=16 * GiB, used_sru=None
    )
    assert reading == RefusalReading(2, 12 * GiB - 32 * GiB // 10, 16 * GiB, None, None)
