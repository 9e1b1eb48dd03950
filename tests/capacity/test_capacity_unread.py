"""A node no reading tells, in a group whose nodes probes read were seen to differ (capacity.odds.Unread,
capacity.spread.differs, excess_per_vm). Figures worked by hand from ZOS's rule (a VM of s is refused
when s > total - max(counted, actual)), not from the code under test."""

import pytest

from dashboard.capacity import GiB, MemoryPoint, MiB, OverheadFit
from dashboard.capacity.odds import Unread, memory_odds, unread_belief
from dashboard.capacity.spread import differs, excess_per_vm

# A line known exactly (no spread, no doubt): ZOS's own use 1.5 GiB and 1 GiB a VM, odds 1 or 0.
EXACT = OverheadFit(own_mru=1536 * MiB, per_vm_mru=GiB, own_sd=0, per_vm_sd=0, spread_mru=0, points=4, nodes=4)


def _odds(belief) -> float:
    # 16 GiB (reserve 2 GiB), two VMs of 4 GiB running, a third of 4 GiB asked: the count leaves
    # 16 - 2 - 8 = 6 GiB, it allows it. On the line the host uses 8 + 1.5 + 2 x 1 = 11.5 GiB: 4.5 GiB
    # left, the VM fits with 0.5 GiB to spare.
    return memory_odds(belief, total_mru=16 * GiB, vm_mru=8 * GiB, running=2, slice_mru=4 * GiB)


def test_a_node_on_its_groups_line_takes_the_slice():
    assert _odds(EXACT) == 1.0


def test_an_unread_node_may_differ_as_the_nodes_read_did():
    # 256 MiB more a VM: 0.5 GiB more with two VMs, the 0.5 GiB to spare; ZOS still takes it.
    assert _odds(Unread(EXACT, share=0.2, per_vm_mru=(256 * MiB,))) == 1.0
    # 512 MiB more a VM: 1 GiB more, 0.5 GiB short: refused. One node in five differs so: 0.8.
    assert _odds(Unread(EXACT, share=0.2, per_vm_mru=(512 * MiB,))) == pytest.approx(0.8)
    # The nodes that differed did by 256 and 512 MiB a VM, each as likely: 0.8 + 0.2 x 1/2.
    assert _odds(Unread(EXACT, share=0.2, per_vm_mru=(256 * MiB, 512 * MiB))) == pytest.approx(0.9)


def test_an_unread_nodes_first_vm_is_as_sure_as_its_groups():
    # No VM running: a use of its own per VM is nothing yet.
    odds = memory_odds(
        Unread(EXACT, share=0.5, per_vm_mru=(4 * GiB,)), total_mru=16 * GiB, vm_mru=0, running=0, slice_mru=4 * GiB
    )
    assert odds == 1.0


def test_a_group_never_seen_to_differ_is_judged_by_its_line():
    assert unread_belief(EXACT, None) is EXACT
    assert unread_belief(None, None) is None  # no belief: odds 1 where the count allows, as before
    unread = unread_belief(EXACT, (0.25, [GiB]))
    assert unread == Unread(EXACT, share=0.25, per_vm_mru=(GiB,))
    assert unread_belief(unread, (0.5, (GiB,))) is unread


def _point(*, vms: int, beyond: int, total: int = 64 * GiB) -> MemoryPoint:
    return MemoryPoint(node=1, total_mru=total, vms=vms, vm_mru=vms * 4 * GiB, actual_mru=vms * 4 * GiB + beyond)


def test_a_reading_tells_a_use_of_its_own_where_it_is_two_stories_from_the_line():
    # The line expects 2 GiB + 4 x 1 GiB = 6 GiB beyond four VMs of 4 GiB.
    expected = 6 * GiB
    # Read 7 GiB: 1 GiB more, beyond the 768 MiB two readings agree within: 256 MiB more a VM.
    assert excess_per_vm(_point(vms=4, beyond=7 * GiB), expected) == 256 * MiB
    # Read 6.5 GiB: within 768 MiB of the line, the same story.
    assert excess_per_vm(_point(vms=4, beyond=6 * GiB + 512 * MiB), expected) == 0
    # Below the line: nothing of its own.
    assert excess_per_vm(_point(vms=4, beyond=5 * GiB), expected) == 0
    # ZOS's count decided (actual = the VMs and the 6.4 GiB reserve to the byte): only a bound, no figure.
    counted = _point(vms=4, beyond=64 * GiB * 10 // 100)
    assert excess_per_vm(counted, 0) == 0
    # No VM running: no per-VM use to tell.
    assert excess_per_vm(_point(vms=0, beyond=3 * GiB), 1536 * MiB) == 0


def test_how_often_and_how_much_the_nodes_read_differ():
    assert differs([]) is None
    assert differs([0, 0, 0]) is None  # all on their line: the line alone
    # Five nodes read, two differ (by 512 MiB and 1 GiB a VM): Laplace's (2 + 1) / (5 + 2).
    share, figures = differs([0, GiB, 0, 512 * MiB, 0])
    assert share == pytest.approx(3 / 7)
    assert figures == (512 * MiB, GiB)
    # One node that differs is one voice (a forged probe report, a one-off): never enough, however few were read.
    assert differs([GiB]) is None
    assert differs([GiB, 0]) is None
    # Two of 58 read differ: (2 + 1) / (58 + 2) = 1/20, it counts; two of 59: below 1/20, as readings beside the
    # daily test VM may now and then on a build whose nodes are alike. Nothing says its nodes differ.
    assert differs([GiB, GiB] + [0] * 56)[0] == pytest.approx(3 / 60)
    assert differs([GiB, GiB] + [0] * 57) is None
    # Seven that differ, five figures at even quantiles: the 1st, 3rd, 4th, 5th and 7th of them.
    share, figures = differs([i * 100 * MiB for i in range(1, 8)], figures=5)
    assert share == pytest.approx(8 / 9)
    assert figures == tuple(i * 100 * MiB for i in (1, 3, 4, 5, 7))


def test_an_unread_belief_is_a_probability_over_figures():
    with pytest.raises(ValueError):
        Unread(EXACT, share=1.5, per_vm_mru=(GiB,))
    with pytest.raises(ValueError):
        Unread(EXACT, share=0.5, per_vm_mru=())


def test_a_probe_goes_first_only_where_the_want_of_a_reading_lowers_the_odds():
    from dashboard.capacity import probe_first
    from dashboard.capacity.spread import PROBE_FIRST_BELOW

    assert probe_first(0.5, unread=True) and probe_first(PROBE_FIRST_BELOW - 1e-9, unread=True)
    assert not probe_first(PROBE_FIRST_BELOW, unread=True) and not probe_first(1.0, unread=True)
    # A node read with the VMs it runs is judged on its reading: its odds are what they are, no probe asked.
    assert not probe_first(0.5, unread=False)


def test_nodes_that_share_no_line_are_judged_against_zos_count():
    """The fleet-wide group's nodes (no version told) share no build: once probes read them apart, an unread one
    is judged by ZOS's count alone, or with the chance they differed, a use of its own on top of it."""
    assert unread_belief(None, (0.5, (GiB,))) == Unread(None, share=0.5, per_vm_mru=(GiB,))
    # 16 GiB, two VMs of 4 GiB, a third asked: the count leaves 16 - 2 - 8 = 6 GiB, it takes it (odds 1). With a
    # use of 1 GiB a VM on the two running, 6 - 2 = 4 GiB: still fits; with 1.5 GiB, 6 - 3 = 3 GiB: refused.
    assert _odds(Unread(None, share=0.5, per_vm_mru=(GiB,))) == 1.0
    assert _odds(Unread(None, share=0.5, per_vm_mru=(1536 * MiB,))) == pytest.approx(0.5)
    # The count alone refuses what it refuses, whatever the doubt.
    assert memory_odds(Unread(None, share=0.1, per_vm_mru=(GiB,)), total_mru=16 * GiB, vm_mru=12 * GiB, running=3,
                       slice_mru=4 * GiB) == 0.0  # fmt: skip
