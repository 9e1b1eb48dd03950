"""A node's own use apart from its build's (issue 44's worlds): a reading the count decided, the more
cautious lesson, the spread, plausibility within the reserve and the probes' order.

Cases are worked by hand from ZOS's rule (zosbase pkg/primitives/statistics.go: a VM of `s` is refused
when s > total - max(counted, actual)), not from the code under test."""

import pytest

from dashboard.capacity import GiB, MiB
from dashboard.capacity.lessons import Observed, memory_more_cautious, zos_reserve_mru
from dashboard.capacity.overhead import MemoryPoint, count_decided, overhead_fit, probe_need
from dashboard.capacity.spread import NOTHING_READ, Spread


def point(*, node=1, vms=4, beyond=6 * GiB, total=64 * GiB, vm_mru=None):
    vm_mru = vms * 4 * GiB if vm_mru is None else vm_mru
    return MemoryPoint(node=node, total_mru=total, vms=vms, vm_mru=vm_mru, actual_mru=vm_mru + beyond)


# --- a reading ZOS's count decided ----------------------------------------------------------------


def test_a_reading_the_count_decided_is_no_point_of_the_line():
    total = 64 * GiB
    counted = point(node=2, vms=4, beyond=zos_reserve_mru(total), total=total)  # usable = total - counted
    told = point(node=3, vms=4, beyond=zos_reserve_mru(total) + 2 * GiB, total=total)
    assert count_decided(counted) and not count_decided(told)
    fit = overhead_fit([counted, told])
    assert fit is not None and fit.points == 1


# --- memory_more_cautious: never mix a reading over the reserve with a group's own use ------------


def test_a_nodes_own_reading_is_not_counted_off_by_a_group_own_use_below_the_reserve():
    total = 64 * GiB  # reserve 6.4 GiB
    group = Observed(hidden_mru_per_vm=460 * MiB, zos_own_mru=int(4.76 * GiB))  # own 1.64 GiB below the reserve
    mine = memory_more_cautious(group, 512 * MiB, running=12, total_mru=total)
    # Mixed, the lesson would be 4.76 - 6.4 + 12 x 0.5 = 4.36 GiB; the reading alone tells 12 x 0.5 = 6 GiB.
    assert (mine.hidden_mru_per_vm, mine.zos_own_mru) == (512 * MiB, None)
    assert mine.hidden_mru(12, total) == 6 * GiB


def test_the_group_stays_where_it_holds_back_more():
    total = 64 * GiB
    group = Observed(hidden_mru_per_vm=GiB, zos_own_mru=8 * GiB, pool_room_below=100 * GiB)
    assert memory_more_cautious(group, 256 * MiB, running=4, total_mru=total) is group
    # The disk lesson is kept either way.
    assert memory_more_cautious(group, 4 * GiB, running=4, total_mru=total).pool_room_below == 100 * GiB


# --- the spread: how often a node never read has a use of its own --------------------------------


@pytest.mark.parametrize(
    ("read", "own", "share"),
    [(0, 0, 0.5), (8, 0, 0.1), (8, 2, 0.3), (98, 19, 0.2)],
)
def test_the_share_is_laplaces_rule_over_the_nodes_read(read, own, share):
    assert Spread(nodes_read=read, nodes_own=own).share == pytest.approx(share)


def test_an_unread_nodes_own_unknown_grows_with_its_vms_and_vanishes_without():
    spread = Spread(nodes_read=8, nodes_own=2)
    assert spread.own_unknown_mru(0) == 0
    assert 0 < spread.own_unknown_mru(2) < spread.own_unknown_mru(6)
    assert spread.own_unknown_mru(6) == pytest.approx(3 * spread.own_unknown_mru(2))
    with pytest.raises(ValueError):
        Spread(nodes_read=1, nodes_own=2)


def test_a_probe_of_an_unread_node_is_worth_more_where_its_group_differs():
    fit = overhead_fit([point(node=n, vms=2 + n, beyond=2 * GiB + (2 + n) * GiB) for n in range(6)])
    alike, _ = probe_need(fit, build="b", running=6, node=99, own_unknown_mru=Spread(30, 0).own_unknown_mru(6))
    differ, why = probe_need(fit, build="b", running=6, node=99, own_unknown_mru=Spread(30, 8).own_unknown_mru(6))
    assert differ > alike
    assert "differ" in why and "never read" in why
    assert probe_need(fit, build="b", running=6, node=99, own_unknown_mru=NOTHING_READ.own_unknown_mru(0))[0] > 0


def test_a_reading_the_count_decided_is_never_far_below_a_line():
    from dashboard.capacity.plausible import Expected, usable_judged

    total, vms_mru = 64 * GiB, 16 * GiB
    line = Expected(beyond_mru=24 * GiB, sd_mru=256 * MiB, measured=True)  # a line deviant nodes drew
    counted = usable_judged(
        total_mru=total, usable_mru=total - vms_mru - zos_reserve_mru(total), vm_mru=vms_mru, vms=4, expected=line
    )
    assert counted.plausible  # it says only that the host used no more than ZOS counted
    # Nor far above a line below the reserve (ZOS keeps 10% of a big node: 6.4 GiB of 64 GiB).
    low_line = Expected(beyond_mru=2 * GiB, sd_mru=128 * MiB, measured=True)
    assert usable_judged(
        total_mru=total, usable_mru=total - vms_mru - zos_reserve_mru(total), vm_mru=vms_mru, vms=1, expected=low_line
    ).plausible
    below = usable_judged(
        total_mru=total, usable_mru=total - vms_mru - zos_reserve_mru(total) - GiB, vm_mru=vms_mru, vms=4, expected=line
    )
    assert not below.plausible and "far below" in below.why


def test_a_node_near_full_is_probed_before_one_with_room():
    from dashboard.capacity.spread import probe_rank

    unknown = GiB
    assert probe_rank(unknown, free_slices=1) > probe_rank(unknown, free_slices=5) > 0
    assert probe_rank(unknown, free_slices=0) == 0  # a full node offers nothing to refuse until a slice frees
    # More unknown at one free slice still ranks first.
    assert probe_rank(2 * unknown, free_slices=2) == probe_rank(unknown, free_slices=1)


def test_a_use_within_the_reserve_and_a_deviation_is_never_far_above_a_lower_line():
    from dashboard.capacity.plausible import Expected, usable_judged

    # A 64 GiB node (reserve 6.4 GiB) running one 4 GiB VM with 256 MiB of its own: the host used the
    # reserve and 256 MiB beyond the VM, above a line of 2.36 GiB drawn on small nodes, yet plausible.
    total, vm = 64 * GiB, 4 * GiB
    line = Expected(beyond_mru=2.36 * GiB, sd_mru=180 * MiB, measured=True)
    used = zos_reserve_mru(total) + 256 * MiB
    assert usable_judged(total_mru=total, usable_mru=total - vm - used, vm_mru=vm, vms=1, expected=line).plausible
    # The absurd report stays far above: usable 1 byte.
    assert not usable_judged(total_mru=total, usable_mru=1, vm_mru=vm, vms=1, expected=line).plausible
