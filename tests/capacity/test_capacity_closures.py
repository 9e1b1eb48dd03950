"""Node closures (capacity.closures): one entry a reason, decided from the facts handed in."""

import pytest

from dashboard import capacity
from dashboard.capacity import GiB, Resources, SliceSize

TOTAL = Resources(cru=8, mru=31 * GiB, sru=931 * GiB)
USED = Resources(cru=0, mru=3 * GiB, sru=20 * GiB)
SLICE = SliceSize(cru=1, mru=4 * GiB, sru=100 * GiB)


def test_an_up_node_is_open():
    assert capacity.node_closure(capacity.ClosureFacts(status="up")) is None


@pytest.mark.parametrize("status", ["down", "standby"])
def test_a_node_away_is_closed_for_its_status(status):
    assert capacity.node_closure(capacity.ClosureFacts(status=status)) == capacity.Closure(status)


def test_every_closure_reason_is_a_phantom_reason_before_the_shortfalls():
    keys = list(capacity.PHANTOM_REASONS)
    assert keys[: len(capacity.CLOSURE_REASONS)] == list(capacity.CLOSURE_REASONS)
    assert keys[len(capacity.CLOSURE_REASONS) :] == ["cpu", "memory", "disk", "pool"]


def test_a_closure_handed_to_the_precheck_makes_every_free_slice_phantom_for_its_key():
    closed = capacity.Closure("standby")
    check = capacity.precheck([(0, SLICE), (1, SLICE)], TOTAL, USED, capacity.profile("zos"), closure=closed)
    assert (check.placeable_now, check.phantom_by_reason) == (0, {"standby": 2})


def test_without_a_closure_the_status_still_decides():
    check = capacity.precheck([(0, SLICE)], TOTAL, USED, capacity.profile("zos"), status="down")
    assert check.phantom_by_reason == {"down": 1}


def test_a_closed_verdict_says_the_closure_in_words():
    verdict = capacity.fits(SLICE, TOTAL, USED, capacity.profile("zos"), closure=capacity.Closure("down"))
    assert (verdict.fits, verdict.words) == (
        False,
        "does not fit: the node is down; nothing can be placed until it is up again",
    )


def test_a_stored_key_no_longer_known_is_said_plainly():
    closed = capacity.stored_closure("gone-reason", "x")
    assert closed.label == "gone-reason" and "closed" in closed.sentence(free_slices=2)


def test_a_blank_stored_closure_is_open():
    assert capacity.stored_closure("") is None
