"""The fleet overhead model's fit (capacity.overhead), checked against the simulated ZOS's own rule."""

from dashboard.capacity import GiB, MemoryPoint, MiB, SliceSize, overhead_fit, zos_reserve_mru
from dashboard.grid.simgrid import ZosMachine

SLICE = SliceSize(cru=1, mru=4 * GiB, sru=50 * GiB)


def _refused_at(node_id: int, mru: int, build: str) -> MemoryPoint:
    """Fill a simulated node of `build` until ZOS refuses; the refusal's point (actual = total - usable)."""
    machine = ZosMachine.boot(node_id, cru=64, mru=mru, sru=8000 * GiB, zos_build=build)
    for index in range(10_000):
        vm, refusal = machine.place(SLICE, name=f"vm{index}", deployment_id=index + 1)
        if refusal is not None:
            usable = int(str(refusal).split("out of usable ")[1].split(" ")[0])
            vms = machine.vms
            return MemoryPoint(node_id, mru, len(vms), sum(v.mru for v in vms), mru - usable)
    raise AssertionError("never refused")


def test_two_observations_on_two_nodes_predict_a_third_nodes_refusal_point_within_256_mib():
    # Two nodes where the hidden use decides ZOS's refusal (on a 31 GiB node its count refuses first).
    fit = overhead_fit([_refused_at(11, round(62.8 * GiB), "v3.14.0-sim"), _refused_at(12, 94 * GiB, "v3.14.0-sim")])
    third = _refused_at(13, 128 * GiB, "v3.14.0-sim")
    predicted_usable = third.total_mru - third.vm_mru - fit.predicted(vms=third.vms, total_mru=third.total_mru)
    assert abs(predicted_usable - (third.total_mru - third.actual_mru)) <= 256 * MiB


def test_one_observation_is_attributed_per_vm_over_the_reserve():
    point = MemoryPoint(
        1, 64 * GiB, vms=10, vm_mru=40 * GiB, actual_mru=40 * GiB + zos_reserve_mru(64 * GiB) + 10 * GiB
    )
    fit = overhead_fit([point])
    assert (fit.own_mru, fit.per_vm_mru) == (None, GiB)


def test_the_line_parts_zos_own_use_from_each_vms():
    points = [
        MemoryPoint(n, 64 * GiB, vms=v, vm_mru=v * 4 * GiB, actual_mru=v * 4 * GiB + 1536 * MiB + v * GiB)
        for n, v in ((1, 3), (2, 9), (3, 14))
    ]
    fit = overhead_fit(points)
    assert (fit.own_mru, fit.per_vm_mru) == (1536 * MiB, GiB)


def test_a_nodes_residual_counts_on_top_of_its_build():
    line = [MemoryPoint(n, 64 * GiB, vms=v, vm_mru=0, actual_mru=GiB + v * GiB) for n, v in ((1, 2), (2, 8), (3, 12))]
    heavy = [MemoryPoint(4, 64 * GiB, vms=v, vm_mru=0, actual_mru=GiB + v * GiB + 300 * MiB) for v in (4, 10)]
    fit = overhead_fit(line + heavy)
    assert fit.predicted(vms=6, total_mru=64 * GiB, node=4) - fit.predicted(vms=6, total_mru=64 * GiB) > 150 * MiB


def test_the_lesson_is_higher_than_the_line_by_its_uncertainty():
    points = [
        MemoryPoint(1, 64 * GiB, vms=4, vm_mru=0, actual_mru=5 * GiB),
        MemoryPoint(2, 64 * GiB, vms=9, vm_mru=0, actual_mru=10 * GiB),
    ]
    fit = overhead_fit(points)
    lesson = fit.observed_for(node=None, vms=14)
    assert lesson.zos_own_mru > fit.own_mru and lesson.hidden_mru_per_vm >= fit.per_vm_mru
    assert lesson.hidden_mru(14, 64 * GiB) > fit.predicted(vms=14, total_mru=64 * GiB) - zos_reserve_mru(64 * GiB)


def test_a_refusal_with_nothing_usable_tells_only_a_lower_bound_and_is_left_out():
    line = [MemoryPoint(n, 64 * GiB, vms=v, vm_mru=0, actual_mru=GiB + v * GiB) for n, v in ((1, 2), (2, 8))]
    full = MemoryPoint(3, 16 * GiB, vms=20, vm_mru=0, actual_mru=16 * GiB)
    assert overhead_fit([*line, full]).per_vm_mru == overhead_fit(line).per_vm_mru == GiB
