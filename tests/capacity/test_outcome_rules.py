"""dashboard.capacity.outcomes: the state machine of reported outcomes, checked entry by entry.

The table below is written out on its own, one line per case, from the rules in words (the
module's docstring and README "The marketplace reports outcomes"); it is not read from the code.
"""

import datetime as dt

import pytest

from dashboard.capacity.outcomes import (
    REFUSAL_FIELDS,
    RULES,
    VALID_HOLDERS,
    Holder,
    Move,
    Order,
    Record,
    Refusal,
    Report,
    moment_problem,
    outcome_move,
    report_order,
)

# record holder report: in-order / before-last-move / before-slice
EXPECTED = """
none     nobody   deployed : take      too-old   before-slice
none     other    deployed : held      held      held
none     unnamed  deployed : take      take      before-slice
none     nobody   failed   : record    history   before-slice
none     other    failed   : held      history   before-slice
none     unnamed  failed   : held      held      before-slice
none     nobody   released : unknown-id unknown-id unknown-id
none     other    released : unknown-id unknown-id unknown-id
none     unnamed  released : unknown-id unknown-id unknown-id
deployed this     deployed : repeat    repeat    repeat
deployed this     released : release   too-old   too-old
deployed this     failed   : final     final     final
failed   nobody   failed   : repeat    repeat    repeat
failed   other    failed   : repeat    repeat    repeat
failed   unnamed  failed   : repeat    repeat    repeat
failed   nobody   deployed : final     final     final
failed   other    deployed : final     final     final
failed   unnamed  deployed : final     final     final
failed   nobody   released : final     final     final
failed   other    released : final     final     final
failed   unnamed  released : final     final     final
released nobody   released : repeat    repeat    repeat
released other    released : repeat    repeat    repeat
released unnamed  released : repeat    repeat    repeat
released nobody   deployed : final     repeat    repeat
released other    deployed : final     repeat    repeat
released unnamed  deployed : final     repeat    repeat
released nobody   failed   : final     final     final
released other    failed   : final     final     final
released unnamed  failed   : final     final     final
"""


def _answer(word: str) -> Move | Refusal:
    return Move(word) if word in Move._value2member_map_ else Refusal(word)


CASES = []
for line in EXPECTED.strip().splitlines():
    left, right = line.split(":")
    record, holder, report = left.split()
    for order, word in zip(Order, right.split(), strict=True):
        CASES.append((Record(record), Holder(holder), Report(report), order, _answer(word)))


@pytest.mark.parametrize(("record", "holder", "report", "order", "expected"), CASES)
def test_each_case_does_what_the_rules_say(record, holder, report, order, expected):
    assert outcome_move(record=record, holder=holder, report=report, order=order) == expected


def test_the_table_covers_every_case_that_can_exist_and_no_other():
    possible = {
        (record, holder, report) for record, holders in VALID_HOLDERS.items() for holder in holders for report in Report
    }
    assert set(RULES) == possible == {(r, h, p) for r, h, p, _o, _e in CASES}
    assert all(set(orders) == set(Order) for orders in RULES.values())


def test_a_live_record_is_always_the_slices_holder():
    with pytest.raises(ValueError):
        outcome_move(record=Record.DEPLOYED, holder=Holder.NOBODY, report=Report.RELEASED, order=Order.IN_ORDER)
    with pytest.raises(ValueError):
        outcome_move(record=Record.NONE, holder=Holder.THIS, report=Report.DEPLOYED, order=Order.IN_ORDER)


def test_every_refusal_names_a_field():
    assert set(REFUSAL_FIELDS) == set(Refusal)


def test_no_report_moves_a_slice_another_id_holds():
    for (record, holder, report), orders in RULES.items():
        if holder in (Holder.OTHER, Holder.UNNAMED):
            assert Move.RELEASE not in orders.values()
        if holder == Holder.OTHER:
            assert Move.TAKE not in orders.values(), (record, report)


T0 = dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("at", "last_move", "slice_created", "order"),
    [
        (T0, None, None, Order.IN_ORDER),
        (T0, T0, T0, Order.IN_ORDER),  # the same second is in order
        (T0, T0 + dt.timedelta(seconds=1), None, Order.BEFORE_LAST_MOVE),
        (T0, None, T0 + dt.timedelta(seconds=1), Order.BEFORE_SLICE),
        (T0, T0 + dt.timedelta(hours=1), T0 + dt.timedelta(seconds=1), Order.BEFORE_SLICE),  # the slice first
    ],
)
def test_the_order_of_a_report(at, last_move, slice_created, order):
    assert report_order(at=at, last_move=last_move, slice_created=slice_created) == order


PAST, FUTURE = dt.timedelta(days=30), dt.timedelta(minutes=5)


@pytest.mark.parametrize(
    ("at", "fine"),
    [
        (T0, True),
        (T0 - PAST, True),
        (T0 + FUTURE, True),
        (T0 - PAST - dt.timedelta(seconds=1), False),
        (T0 + FUTURE + dt.timedelta(seconds=1), False),
        (dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))), False),  # year 0 in UTC
        (dt.datetime(1, 1, 1, 13, 59, tzinfo=dt.timezone(dt.timedelta(hours=14))), False),
        (dt.datetime(9999, 12, 31, 23, 59, tzinfo=dt.timezone(dt.timedelta(hours=-14))), False),  # year 10000 in UTC
        (dt.datetime(2026, 5, 1, 14, tzinfo=dt.timezone(dt.timedelta(hours=2))), True),  # T0, written in +02:00
        (dt.datetime(2026, 5, 1, 12), False),  # no offset
    ],
)
def test_a_reported_time_lies_in_its_window(at, fine):
    assert (moment_problem(at, now=T0, past=PAST, future=FUTURE) == "") is fine


def test_a_window_wider_than_the_calendar_bounds_nothing_on_that_side():
    assert (
        moment_problem(dt.datetime(1, 1, 2, tzinfo=dt.UTC), now=T0, past=dt.timedelta(days=999_999), future=FUTURE)
        == ""
    )
