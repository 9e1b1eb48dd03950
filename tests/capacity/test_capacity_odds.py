"""The odds a free slice deploys at the first try (capacity.odds), checked against ZOS's rule written here."""

import random
from statistics import NormalDist

import pytest

from dashboard.capacity import GiB, MemoryPoint, MiB, OverheadFit, overhead_fit
from dashboard.capacity.odds import memory_odds, odds_calibration, slices_odds, sure_slices
from sim.grid.records import ZOS_BUILDS, build_spread

LINE = OverheadFit(own_mru=GiB, per_vm_mru=0, own_sd=0, per_vm_sd=0, spread_mru=64 * MiB, points=2, nodes=2)


def test_a_group_never_refused_has_odds_one_where_the_count_allows():
    assert memory_odds(None, total_mru=16 * GiB, vm_mru=8 * GiB, running=2, slice_mru=4 * GiB) == 1.0


def test_what_the_count_refuses_has_odds_zero():
    # 16 GiB, its 2 GiB reserve and 12 GiB of VMs: 2 GiB left, a 4 GiB VM never fits.
    assert memory_odds(LINE, total_mru=16 * GiB, vm_mru=12 * GiB, running=3, slice_mru=4 * GiB) == 0.0


@pytest.mark.parametrize("room_sd", [-1.0, 0.0, 0.5, 1.645, 3.0])
def test_the_odds_are_the_normal_tail_of_the_room_the_line_leaves(room_sd):
    sd = LINE.predicted_sd(vms=4)
    total, vms, slice_mru = 64 * GiB, 4 * 4 * GiB, 4 * GiB
    # Choose ZOS's own use so that actual leaves `room_sd` standard deviations of room for the VM.
    own = total - slice_mru - vms - round(room_sd * sd)
    fit = OverheadFit(own, 0, 0, 0, LINE.spread_mru, 2, 2)
    odds = memory_odds(fit, total_mru=total, vm_mru=vms, running=4, slice_mru=slice_mru)
    assert odds == pytest.approx(NormalDist().cdf(room_sd), abs=1e-6)


def test_each_free_slice_is_judged_with_the_ones_before_it_running():
    odds = slices_odds(LINE, total_mru=31 * GiB, vm_mru=0, running=0, sizes_mru=[4 * GiB] * 8)
    assert odds[:6] == (1.0,) * 6 and odds[7] == 0.0  # 31 GiB less its 3.1 GiB reserve holds 6 of 4 GiB
    assert sure_slices(odds, 0.95) == 6


def test_brier_and_ece_of_hand_counted_outcomes():
    pairs = [(0.9, True), (0.9, False), (0.2, False), (0.2, False), (1.0, True)]
    outcomes, brier, ece = odds_calibration(pairs)
    assert outcomes == 5
    assert brier == pytest.approx((0.01 + 0.81 + 0.04 + 0.04 + 0.0) / 5)
    # bins: 0.9 -> |0.9 - 0.5| x 2, 0.2 -> |0.2 - 0| x 2, 1.0 -> |1.0 - 1| x 1
    assert ece == pytest.approx((0.4 * 2 + 0.2 * 2) / 5)


def _zos_takes(total: int, own: int, per_vm: int, vms: int, vm_mru: int, slice_mru: int) -> bool:
    """ZOS's rule written again (zosbase getUsableMemoryBytes): does it take one more VM?"""
    counted = vm_mru + max(total * 10 // 100, 2 * GiB)
    actual = min(total, own + vm_mru + vms * per_vm)
    return slice_mru <= total - max(counted, actual)


def test_the_odds_are_calibrated_on_a_seeded_month_of_fills():
    """Two refusals teach the build; then a month of nodes of every size are filled one VM after another
    until ZOS refuses, each VM's odds kept beside what ZOS did (the simulated fleet's own spread)."""
    build = ZOS_BUILDS["v3.14.0-sim"]

    def hidden(node):
        own, per_vm = build_spread(node)
        return build.own_mru + own, build.per_vm_mru + per_vm

    points = []
    for node, total in ((1, round(62.8 * GiB)), (2, 94 * GiB)):
        own, per_vm = hidden(node)
        vms = 0
        while _zos_takes(total, own, per_vm, vms, vms * 4 * GiB, 4 * GiB):
            vms += 1
        usable = total - max(vms * 4 * GiB + max(total // 10, 2 * GiB), own + vms * (4 * GiB + per_vm))
        points.append(MemoryPoint(node, total, vms, vms * 4 * GiB, total - usable))
    fit = overhead_fit(points)
    pick = random.Random(7)
    pairs = []
    for node in range(10, 310):
        total = pick.choice([round(15.6 * GiB), 31 * GiB, round(62.8 * GiB), 94 * GiB, 128 * GiB])
        slice_mru = pick.choice([2 * GiB, 4 * GiB, 8 * GiB])
        own, per_vm = hidden(node)
        vms = 0
        while True:
            odds = memory_odds(fit, total_mru=total, vm_mru=vms * slice_mru, running=vms, slice_mru=slice_mru)
            if odds == 0.0:
                break  # the count refuses it: nobody offers it
            took = _zos_takes(total, own, per_vm, vms, vms * slice_mru, slice_mru)
            pairs.append((odds, took))
            if not took:
                break
            vms += 1
    outcomes, brier, ece = odds_calibration(pairs)
    assert outcomes > 1000
    assert ece <= 0.03, (ece, brier)
    assert brier < 0.05
