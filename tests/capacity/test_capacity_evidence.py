"""Belief in proportion to evidence (issue 44): the plausibility of a `usable` figure, when a second
source corroborates a reading, and how far an admitted point may move its group. Tables of cases."""

import pytest

from dashboard.capacity import GiB, MiB
from dashboard.capacity.corroborate import (
    Witness,
    admitted_point,
    agree,
    group_expects,
    independent,
    second_source,
)
from dashboard.capacity.overhead import MemoryPoint, OverheadFit
from dashboard.capacity.plausible import Expected, usable_judged

# A build whose line is measured: ZOS uses 2 GiB, each VM 1 GiB beyond its memory, tight.
MEASURED = OverheadFit(
    own_mru=2 * GiB,
    per_vm_mru=GiB,
    own_sd=64 * MiB,
    per_vm_sd=16 * MiB,
    spread_mru=48 * MiB,
    points=6,
    nodes=4,
    mean_vms=4.0,
)


def point(*, node=1, vms=6, total=256 * GiB, beyond=8 * GiB, vm_mru=None):
    vm_mru = 6 * 4 * GiB if vm_mru is None else vm_mru
    return MemoryPoint(node=node, total_mru=total, vms=vms, vm_mru=vm_mru, actual_mru=vm_mru + beyond)


@pytest.mark.parametrize(
    ("usable", "fit", "plausible", "words"),
    [
        # The absurd report: usable 1 byte on a 256 GiB node.
        (1, MEASURED, False, "far above"),
        (1, None, False, "far above"),
        # Its plausible-looking one: usable 1 GiB with 6 VMs of 4 GiB.
        (GiB, MEASURED, False, "far above"),
        # ZOS's own figure beside its line (256 - 24 - 8 beyond).
        (224 * GiB, MEASURED, True, ""),
        # Beside the daily test VM: 512 MiB more used, still ZOS's word.
        (224 * GiB - 768 * MiB, MEASURED, True, ""),
        # A node with 1.5 GiB a VM of its own beyond its build: its own lesson, not held aside.
        (224 * GiB - 9 * GiB, MEASURED, True, ""),
        # More than ZOS ever leaves (it keeps its reserve, 10% of 256 GiB).
        (240 * GiB, MEASURED, False, "reserve"),
        (300 * GiB, None, False, "outside the node's total"),
    ],
)
def test_it_judges_a_usable_figure_against_the_node_and_its_group(usable, fit, plausible, words):
    expected = group_expects(fit, vms=6, total_mru=256 * GiB, per_vm_prior_sd=0)
    judged = usable_judged(total_mru=256 * GiB, usable_mru=usable, vm_mru=24 * GiB, vms=6, expected=expected)
    assert judged.plausible is plausible
    assert words in judged.why


def test_it_says_why_in_plain_words_with_the_figures():
    expected = group_expects(MEASURED, vms=6, total_mru=256 * GiB)
    judged = usable_judged(total_mru=256 * GiB, usable_mru=1, vm_mru=24 * GiB, vms=6, expected=expected)
    assert "usable 1 B says the host used" in judged.why and "its group's line expects 8 GiB" in judged.why


def test_nothing_expected_judges_only_the_node():
    judged = usable_judged(total_mru=64 * GiB, usable_mru=10 * GiB, vm_mru=0, vms=0, expected=None)
    assert judged.plausible


@pytest.mark.parametrize(
    ("a", "b", "independent_"),
    [
        (("n1", "account 1"), ("n1", "account 1"), False),  # one node, one account: one source
        (("n1", "account 1"), ("n2", "account 1"), True),  # another node
        (("n1", "account 1"), ("n1", "account 2"), True),  # another account on the node
        (("n1", "account 1"), ("n1", "a proposed probe"), True),  # the product's own question answered
    ],
)
def test_sources_are_independent_by_node_or_by_who_vouches(a, b, independent_):
    wa = Witness(observation=1, node=hash(a[0]), vouched_by=a[1], point=point())
    wb = Witness(observation=2, node=hash(b[0]), vouched_by=b[1], point=point())
    assert independent(wa, wb) is independent_


@pytest.mark.parametrize(
    ("a", "b", "agreeing"),
    [
        (point(vms=6, beyond=8 * GiB), point(vms=6, beyond=8 * GiB + 512 * MiB), True),  # beside the test VM
        (point(vms=6, beyond=8 * GiB), point(vms=6, beyond=10 * GiB), False),  # two stories at one count
        (point(vms=2, beyond=4 * GiB), point(vms=6, beyond=8 * GiB), True),  # one line: 2 GiB + 1 GiB a VM
        (point(vms=2, beyond=12 * GiB), point(vms=6, beyond=GiB), False),  # a VM would free memory
        (point(vms=1, beyond=GiB), point(vms=2, beyond=20 * GiB), False),  # 19 GiB a VM: no ZOS's
        (point(vms=4, beyond=30 * GiB), point(vms=6, beyond=31 * GiB), False),  # ZOS would use 28 GiB itself
    ],
)
def test_two_readings_agree_when_one_line_zos_could_draw_goes_through_both(a, b, agreeing):
    assert agree(a, b) is agreeing
    assert agree(b, a) is agreeing


def test_a_second_source_is_another_agreeing_one_and_never_the_same():
    mine = Witness(observation=1, node=1, vouched_by="account 1", point=point(node=1))
    again = Witness(observation=2, node=1, vouched_by="account 1", point=point(node=1))
    far = Witness(observation=3, node=2, vouched_by="account 1", point=point(node=2, beyond=20 * GiB))
    other = Witness(observation=4, node=3, vouched_by="account 2", point=point(node=3, beyond=8 * GiB + MiB))
    assert second_source(mine, [mine, again, far]) is None
    assert second_source(mine, [mine, again, far, other]) == other


def test_an_admitted_point_moves_its_group_no_further_than_its_doubt():
    expected = Expected(beyond_mru=8 * GiB, sd_mru=100 * MiB, measured=True)
    high = admitted_point(point(beyond=20 * GiB), expected)
    low = admitted_point(point(beyond=GiB), expected)
    assert high.beyond_vms == 8 * GiB + 300 * MiB
    assert low.beyond_vms == 8 * GiB - 300 * MiB
    near = point(beyond=8 * GiB + 50 * MiB)
    assert admitted_point(near, expected) is near
    assert admitted_point(near, None) is near


@pytest.mark.parametrize(
    ("beyond", "voices", "corroborated"),
    [
        (8 * GiB, ("account 1", "account 1"), True),  # one voice confirming the line
        (10 * GiB, ("account 1", "account 1"), True),  # one voice making the group more careful
        (4 * GiB, ("account 1", "account 1"), False),  # one voice may not lower the line on its own
        (4 * GiB, ("account 1", "account 2"), True),  # another voice may
        (4 * GiB, ("account 1", "a proposed probe"), True),
    ],
)
def test_one_voice_on_two_nodes_never_makes_its_group_less_careful(beyond, voices, corroborated):
    expected = Expected(beyond_mru=8 * GiB, sd_mru=100 * MiB, measured=True)
    first = Witness(observation=1, node=1, vouched_by=voices[0], point=point(node=1, beyond=beyond))
    second = Witness(observation=2, node=2, vouched_by=voices[1], point=point(node=2, beyond=beyond + MiB))
    found = second_source(second, [first], expects=lambda p: expected)
    assert (found == first) is corroborated
