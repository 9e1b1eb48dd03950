"""What changed between two readings (dashboard.capacity.node_events), case by case, against the rules as the domain states them."""

import pytest

from dashboard.capacity import node_events as ev
from dashboard.capacity.node_events import Reading, reading_changes

GIB = 1024**3
TOTAL = (8, 31 * GIB, 931 * GIB, 0)
USED = (0, 3 * GIB, 20 * GIB, 0)


def reading(**changes) -> Reading:
    values = {
        "status": "up",
        "total": TOTAL,
        "used": USED,
        "healthy": True,
        "power_state": "up",
        "power_target": "up",
        "uptime": 86_400,
    }
    values.update(changes)
    return Reading(**values)


def kinds(before, after, **options) -> list[str]:
    return [c.kind for c in reading_changes(before, after, **options)]


def test_a_first_reading_is_no_change():
    assert reading_changes(None, reading()) == []


def test_the_same_reading_again_is_no_change():
    assert kinds(reading(), reading(uptime=86_700)) == []


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        ("up", "down", ev.WENT_DOWN),
        ("standby", "down", ev.WENT_DOWN),
        ("up", "standby", ev.STANDBY),
        ("standby", "up", ev.WOKEN),
        ("down", "up", ev.BACK_UP),
        ("unknown", "up", ev.BACK_UP),
    ],
)
def test_each_status_change_is_its_event_with_both_statuses(before, after, kind):
    (change,) = reading_changes(
        reading(status=before, power_state="", power_target=""), reading(status=after, power_state="", power_target="")
    )
    assert (change.kind, change.status_before, change.status_after) == (kind, before, after)


def test_a_wake_asked_for_that_did_not_happen_is_told_once():
    asleep = reading(status="standby", power_state="down", power_target="down")
    asked = reading(status="standby", power_state="down", power_target="up")

    assert kinds(asleep, asked) == [ev.WAKE_NOT_WOKEN]
    assert kinds(asked, asked) == []  # still not woken: the same episode


def test_a_wake_that_happened_is_woken_not_a_failed_wake():
    asked = reading(status="standby", power_state="down", power_target="up")
    assert kinds(asked, reading(status="up")) == [ev.WOKEN]


def test_unhealthy_is_told_when_it_turns_false():
    assert kinds(reading(healthy=True), reading(healthy=False)) == [ev.UNHEALTHY]
    assert kinds(reading(healthy=None), reading(healthy=False)) == [ev.UNHEALTHY]
    assert kinds(reading(healthy=False), reading(healthy=False)) == []


def test_uptime_going_back_is_a_reboot_and_unknown_uptime_is_not():
    assert kinds(reading(uptime=900_000), reading(uptime=120)) == [ev.REBOOTED]
    assert kinds(reading(uptime=None), reading(uptime=120)) == []


def test_a_new_disk_is_a_total_change_that_says_the_catalog_is_stale():
    (change,) = reading_changes(reading(), reading(total=(8, 31 * GIB, 1862 * GIB, 0)))
    assert change.kind == ev.TOTAL_CHANGED
    assert "SSD 931.0 GiB -> 1862.0 GiB" in change.words and "carved on the old total" in change.words


def test_used_memory_moving_with_no_outcome_reported_is_an_event_and_with_one_it_is_not():
    more = reading(used=(1, 11 * GIB, 20 * GIB, 0))
    assert kinds(reading(), more) == [ev.USED_MOVED]
    assert kinds(reading(), more, outcome_reported=True) == []


def test_used_cores_alone_moving_is_no_event():
    # ZOS does not account cores at deploy time; the marketplace's slices are memory and disk.
    assert kinds(reading(), reading(used=(4, *USED[1:]))) == []


def test_subscribing_to_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown node event kind"):
        ev.node_events_subscribe("went-sideways", lambda events: None)
