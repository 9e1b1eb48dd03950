"""The fleet overhead model's fit (capacity.overhead), checked against the simulated ZOS's own rule."""

import pytest

from dashboard.capacity import GiB, MemoryPoint, MiB, SliceSize, overhead_fit, zos_reserve_mru
from dashboard.capacity.overhead import OWN_PRIOR_MRU, OWN_PRIOR_SD
from sim.grid import ZosMachine

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


def _zos_fills(total_mru: int, own_mru: int, per_vm_mru: int, slice_mru: int) -> tuple[int, int, bool]:
    """ZOS's rule written again here (zosbase getUsableMemoryBytes): VMs of `slice_mru` one after another
    until one is refused. (VMs running then, usable then, whether the host's actual use decided)."""
    reserve = max(total_mru * 10 // 100, 2 * GiB)
    running = 0
    while True:
        counted = running * slice_mru + reserve
        actual = min(total_mru, own_mru + running * (slice_mru + per_vm_mru))
        usable = total_mru - max(counted, actual)
        if slice_mru > usable:
            return running, usable, actual > counted
        running += 1


# Each node's own use and per-VM overhead: a build's (1.5 GiB, 1 GiB) with a node's spread on top.
NODES = {
    21: (round(62.8 * GiB), 1536 * MiB + 27 * MiB, GiB - 3 * MiB),
    22: (94 * GiB, 1536 * MiB - 30 * MiB, GiB + 4 * MiB),
}
THIRDS = {  # of other sizes and slices: where ZOS refuses on each, the fit must say within 256 MiB
    "128 GiB, 4 GiB VMs": (128 * GiB, 1536 * MiB + 11 * MiB, GiB + 2 * MiB, 4 * GiB),
    "31 GiB, 2 GiB VMs": (31 * GiB, 1536 * MiB - 20 * MiB, GiB - 4 * MiB, 2 * GiB),
    "15.6 GiB, 1 GiB VMs": (round(15.6 * GiB), 1536 * MiB + 32 * MiB, GiB + 1 * MiB, GiB),
    "250 GiB, 8 GiB VMs": (250 * GiB, 1536 * MiB - 5 * MiB, GiB - 1 * MiB, 8 * GiB),
}


@pytest.mark.parametrize("third", THIRDS, ids=list(THIRDS))
def test_two_refusals_predict_where_zos_refuses_on_a_node_of_another_size(third):
    points = []
    for node, (total, own, per_vm) in NODES.items():
        running, usable, hidden_decided = _zos_fills(total, own, per_vm, 4 * GiB)
        assert hidden_decided  # a refusal the count alone explains teaches nothing
        points.append(MemoryPoint(node, total, running, running * 4 * GiB, total - usable))
    fit = overhead_fit(points)
    total, own, per_vm, slice_mru = THIRDS[third]
    running, usable, _ = _zos_fills(total, own, per_vm, slice_mru)
    predicted_running, predicted_usable, _ = _zos_fills(total, fit.own_mru, fit.per_vm_mru, slice_mru)
    assert predicted_running == running
    assert abs(predicted_usable - usable) <= 256 * MiB


def test_one_observation_fits_the_per_vm_overhead_over_zos_own_prior():
    point = MemoryPoint(1, 64 * GiB, vms=10, vm_mru=40 * GiB, actual_mru=40 * GiB + OWN_PRIOR_MRU + 10 * GiB)
    fit = overhead_fit([point])
    assert (fit.own_mru, fit.per_vm_mru) == (OWN_PRIOR_MRU, GiB)


def test_one_observation_counts_zos_own_use_the_same_on_a_node_of_any_size():
    # ZOS's own use does not grow with the node: a 10% reserve taken for it would on a 500 GiB node.
    fit = overhead_fit([MemoryPoint(1, 16 * GiB, vms=3, vm_mru=6 * GiB, actual_mru=6 * GiB + 2 * GiB + 3 * GiB)])
    assert fit.predicted(vms=40, total_mru=500 * GiB) == 2 * GiB + 40 * GiB


def test_one_observation_under_a_prior_above_it_takes_the_observation():
    fit = overhead_fit([MemoryPoint(1, 64 * GiB, vms=4, vm_mru=16 * GiB, actual_mru=16 * GiB + GiB)])
    assert (fit.own_mru, fit.per_vm_mru) == (GiB, 0)


def test_the_prior_leaves_its_uncertainty_away_from_the_observation():
    fit = overhead_fit([MemoryPoint(1, 64 * GiB, vms=10, vm_mru=40 * GiB, actual_mru=52 * GiB)])
    assert fit.predicted_sd(vms=0) > OWN_PRIOR_SD * 0.9 > fit.predicted_sd(vms=10)


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


@pytest.mark.parametrize("vms", [1, 3, 10, 11, 14, 40])
def test_a_lesson_on_the_prior_never_refuses_what_a_zos_the_refusal_allows_would_take(vms):
    # One refusal at 10 VMs told 12 GiB beyond their memory: ZOS's own use anywhere from 0 to 12 GiB.
    fit = overhead_fit([MemoryPoint(1, 64 * GiB, vms=10, vm_mru=40 * GiB, actual_mru=52 * GiB)])
    lesson = fit.observed_for(node=None, vms=vms, margin_sd=0)
    for own in range(0, 12 * GiB + 1, GiB // 4):
        per_vm = (12 * GiB - own) / 10
        # (each VM's figure rounded up to the byte)
        assert lesson.zos_own_mru + vms * lesson.hidden_mru_per_vm <= own + vms * per_vm + vms


def test_a_refusal_where_zos_count_decided_is_no_point_of_the_line():
    # ZOS's rule on a simulated 64 GiB node: one 4 GiB VM, the reserve (6.4 GiB) above the actual use, so
    # a probe's `usable` tells the count; beside two refusals where the hidden use decided.
    from dashboard.capacity import SliceSize, zos_reserve_mru
    from sim.grid import ZosMachine

    def told(node_id, mru, vms):
        machine = ZosMachine.boot(node_id, cru=16, mru=mru, sru=1000 * GiB, zos_build="v3.14.0-sim")
        for i in range(vms):
            machine.place(SliceSize(cru=1, mru=4 * GiB, sru=0), name=f"v{i}", deployment_id=i + 1)
        _vm, refusal = machine.place(SliceSize(cru=1, mru=mru + GiB, sru=0), name="probe", deployment_id=99)
        usable = int(refusal.raw.rsplit("usable ", 1)[1].split()[0])
        return MemoryPoint(node=node_id, total_mru=mru, vms=vms, vm_mru=vms * 4 * GiB, actual_mru=mru - usable)

    counted = told(1, 64 * GiB, 1)
    assert counted.actual_mru == counted.vm_mru + zos_reserve_mru(64 * GiB)  # the count, not actual
    lines = [told(2, 32 * GiB, 2), told(3, 32 * GiB, 5)]
    assert overhead_fit([counted, *lines]).per_vm_mru == overhead_fit(lines).per_vm_mru
