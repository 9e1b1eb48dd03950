"""The rules of reported outcomes, pure: what a report does to a slice's deployment record.

A slice has at most one live deployment (the database holds it too: a partial unique index on
the deployed state per node and slice number). A report names a marketplace id and says what
happened to it on one slice: `deployed`, `failed` or `released`. What it does depends on three
things the service reads under the node's lock, and on nothing else:

- the record of that id (`Record`): none yet, deployed, failed, released;
- who holds the slice (`Holder`): nobody, this id, another (another marketplace id, or the
  dashboard's own deploy in flight), or nobody named (the catalog says deployed, by hand or from
  before reports, and no record says who);
- when the report says it happened (`Order`): in order; before the last move it could follow (the
  deploy of the id it releases, the release of an id it repeats, the deploy of the slice's holder,
  the slice's last release); or before the slice existed.

The answer (`outcome_move`) is a `Move` (what to write) or a `Refusal` (why not: the API answers
409 and writes nothing). Which way each case goes, and why:

- A report that would change the slice's state (a deploy, a release) is refused when it is older
  than the move it would follow: applying it would rewrite the order of what happened (a release
  before its deploy, a deploy while the previous holder still ran). Recording it without moving
  would leave a record saying "deployed" that is not true now.
- A failure never changes the slice's state, so a failure older than the slice's last move is
  recorded as history (`Move.HISTORY`): support sees it, its lesson is dated by its own time and
  ages from it. Only a failure dated before the slice existed is refused: it cannot be this slice's.
- A repeat (the same id, the outcome it already has) writes nothing, whenever it is dated; so does a
  late `deployed` for an id released since (the record already holds that deploy in its history).
- `released` for an id never recorded is refused: the dashboard cannot free a slice on the word of
  an id it has never seen hold it; the answer names the live id, if any.
- A slice the catalog marks rented is held by its renter (`Holder.OTHER`, the words name the twin):
  a `deployed` report on it is refused, so no `released` can later free it; only an admin's act
  gives a rented slice back.
- A slice the catalog says is deployed with no record of who holds it (a legacy catalog) is handed
  over by a `deployed` report of its id (`Move.TAKE`, the slice stays deployed); its `released`
  then frees it. Any other report on it is refused as held.

Nothing here imports Django: the state machine is a table (`RULES`), and tests/capacity/test_outcome_rules.py
checks every entry and that the table covers every case.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

# The dashboard's own deploy (slice_deploy) holds its slice this long while it is in flight: a deploy row older
# than this is a process that died, and the slice is free again. One figure for the deploy, the re-register's
# stale slices and the reported outcomes.
DEPLOY_IN_FLIGHT = timedelta(minutes=15)


class Report(StrEnum):
    DEPLOYED = "deployed"
    FAILED = "failed"
    RELEASED = "released"


class Record(StrEnum):
    """The stored record of the reported marketplace id."""

    NONE = "none"
    DEPLOYED = "deployed"
    FAILED = "failed"
    RELEASED = "released"


class Holder(StrEnum):
    """Who holds the slice now (its live deployment)."""

    NOBODY = "nobody"
    THIS = "this"  # the reported id is the slice's live deployment
    OTHER = "other"  # another id, or the dashboard's own deploy in flight
    UNNAMED = "unnamed"  # the catalog says deployed and no record says who (by hand, or from before reports)


class Order(StrEnum):
    IN_ORDER = "in-order"
    BEFORE_LAST_MOVE = "before-last-move"
    BEFORE_SLICE = "before-slice"


class Move(StrEnum):
    """What a report that is taken does."""

    TAKE = "take"  # a new deployed record; the slice becomes deployed
    RELEASE = "release"  # the record goes deployed -> released; the slice becomes free
    RECORD = "record"  # a new failed record; the slice is unchanged (a failed deploy takes nothing)
    HISTORY = "history"  # a new failed record older than the slice's last move; the slice is unchanged
    REPEAT = "repeat"  # already recorded: nothing is written


class Refusal(StrEnum):
    """Why a report is refused; each names the input at fault (`REFUSAL_FIELDS`)."""

    HELD = "held"  # the slice is held by another id
    UNKNOWN_ID = "unknown-id"  # a release for an id never recorded
    TOO_OLD = "too-old"  # older than the move it would follow
    BEFORE_SLICE = "before-slice"  # dated before the slice existed
    FINAL = "final"  # the record's state cannot become this outcome (failed stays failed, released stays released)


REFUSAL_FIELDS = {
    Refusal.HELD: "slice_index",
    Refusal.UNKNOWN_ID: "marketplace_id",
    Refusal.TOO_OLD: "at",
    Refusal.BEFORE_SLICE: "at",
    Refusal.FINAL: "outcome",
}

# A record in the deployed state is the slice's live deployment (the unique index): its holder is
# always THIS, and no other record's holder is.
VALID_HOLDERS = {
    Record.NONE: (Holder.NOBODY, Holder.OTHER, Holder.UNNAMED),
    Record.DEPLOYED: (Holder.THIS,),
    Record.FAILED: (Holder.NOBODY, Holder.OTHER, Holder.UNNAMED),
    Record.RELEASED: (Holder.NOBODY, Holder.OTHER, Holder.UNNAMED),
}

_ANY_ORDER = tuple(Order)
_NOT_THIS = (Holder.NOBODY, Holder.OTHER, Holder.UNNAMED)
IN, OLD, EARLY = Order.IN_ORDER, Order.BEFORE_LAST_MOVE, Order.BEFORE_SLICE

# (record, holder, report) -> {order: move or refusal}. Read it a line at a time.
RULES: dict[tuple[Record, Holder, Report], dict[Order, Move | Refusal]] = {
    # A new id deploys: on a free slice, in order; never on a held one.
    (Record.NONE, Holder.NOBODY, Report.DEPLOYED): {IN: Move.TAKE, OLD: Refusal.TOO_OLD, EARLY: Refusal.BEFORE_SLICE},
    (Record.NONE, Holder.OTHER, Report.DEPLOYED): dict.fromkeys(_ANY_ORDER, Refusal.HELD),
    # A slice deployed with no record of who holds it: the report names its holder.
    (Record.NONE, Holder.UNNAMED, Report.DEPLOYED): {IN: Move.TAKE, OLD: Move.TAKE, EARLY: Refusal.BEFORE_SLICE},
    # A new id failed: recorded; older than the slice's last move, as history; on a slice another id
    # holds, only as history from before that id's deploy (otherwise the two stories contradict).
    (Record.NONE, Holder.NOBODY, Report.FAILED): {IN: Move.RECORD, OLD: Move.HISTORY, EARLY: Refusal.BEFORE_SLICE},
    (Record.NONE, Holder.OTHER, Report.FAILED): {IN: Refusal.HELD, OLD: Move.HISTORY, EARLY: Refusal.BEFORE_SLICE},
    (Record.NONE, Holder.UNNAMED, Report.FAILED): {IN: Refusal.HELD, OLD: Refusal.HELD, EARLY: Refusal.BEFORE_SLICE},
    # A new id released: never seen holding the slice, so nothing to free.
    (Record.NONE, Holder.NOBODY, Report.RELEASED): dict.fromkeys(_ANY_ORDER, Refusal.UNKNOWN_ID),
    (Record.NONE, Holder.OTHER, Report.RELEASED): dict.fromkeys(_ANY_ORDER, Refusal.UNKNOWN_ID),
    (Record.NONE, Holder.UNNAMED, Report.RELEASED): dict.fromkeys(_ANY_ORDER, Refusal.UNKNOWN_ID),
    # The live deployment: a repeat changes nothing; its release frees the slice, after its deploy.
    (Record.DEPLOYED, Holder.THIS, Report.DEPLOYED): dict.fromkeys(_ANY_ORDER, Move.REPEAT),
    (Record.DEPLOYED, Holder.THIS, Report.RELEASED): {IN: Move.RELEASE, OLD: Refusal.TOO_OLD, EARLY: Refusal.TOO_OLD},
    (Record.DEPLOYED, Holder.THIS, Report.FAILED): dict.fromkeys(_ANY_ORDER, Refusal.FINAL),
    # A failure stays failed: a later deploy or release of the same id is another id's business.
    **{(Record.FAILED, holder, Report.FAILED): dict.fromkeys(_ANY_ORDER, Move.REPEAT) for holder in _NOT_THIS},
    **{(Record.FAILED, holder, Report.DEPLOYED): dict.fromkeys(_ANY_ORDER, Refusal.FINAL) for holder in _NOT_THIS},
    **{(Record.FAILED, holder, Report.RELEASED): dict.fromkeys(_ANY_ORDER, Refusal.FINAL) for holder in _NOT_THIS},
    # Released: a repeat, or a late report of the deploy it already holds, changes nothing; the id
    # deployed again after its release is refused (a new deployment takes a new id).
    **{(Record.RELEASED, holder, Report.RELEASED): dict.fromkeys(_ANY_ORDER, Move.REPEAT) for holder in _NOT_THIS},
    **{
        (Record.RELEASED, holder, Report.DEPLOYED): {IN: Refusal.FINAL, OLD: Move.REPEAT, EARLY: Move.REPEAT}
        for holder in _NOT_THIS
    },
    **{(Record.RELEASED, holder, Report.FAILED): dict.fromkeys(_ANY_ORDER, Refusal.FINAL) for holder in _NOT_THIS},
}


def outcome_move(*, record: Record, holder: Holder, report: Report, order: Order) -> Move | Refusal:
    """What this report does, by the table; ValueError for a combination that cannot exist."""
    if holder not in VALID_HOLDERS[record]:
        raise ValueError(f"a {record} record cannot have holder {holder}")
    return RULES[(record, holder, report)][order]


def report_order(*, at, last_move, slice_created) -> Order:
    """Where the report's time falls: before the slice existed, before the move it follows, or in order.

    `last_move` is the time of the move the report would follow (None: there is none); any
    comparable values (datetimes) will do.
    """
    if slice_created is not None and at < slice_created:
        return Order.BEFORE_SLICE
    if last_move is not None and at < last_move:
        return Order.BEFORE_LAST_MOVE
    return Order.IN_ORDER


def moment_problem(at, *, now, past, future, planned: bool = False) -> str:
    """Why `at` (an aware datetime) is not a time a report may carry ("" when it is fine).

    It must lie within [now - past, now + future]: `future` is the clocks' skew allowed, `past` how
    far back a report may go. Computed without overflow at the ends of the calendar (year 1, 9999).
    `planned`: a moment planned ahead (a maintenance window's edge), where the future is the point and
    `future` how far ahead one may plan.
    """
    if at.tzinfo is None or at.utcoffset() is None:
        return "it has no UTC offset; send e.g. 2026-05-01T12:00:00Z"
    earliest, latest = _shifted(now, -past), _shifted(now, future)
    try:
        if earliest is not None and at < earliest:
            return f"it is more than {_span(past)} ago (the oldest {'a window' if planned else 'a report'} may be)"
        if latest is not None and at > latest and planned:
            return f"it is more than {_span(future)} ahead (the furthest a window may be planned)"
        if latest is not None and at > latest:
            return f"it is in the future (more than {_span(future)} ahead of this server's clock)"
    except OverflowError:  # comparing converts to UTC: a moment past the calendar's ends in UTC
        return "it is outside the calendar once converted to UTC"
    return ""


def _shifted(now, delta):
    try:
        return now + delta
    except OverflowError:  # a window wider than the calendar: nothing to bound on that side
        return None


def _span(delta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 86400 == 0:
        days = seconds // 86400
        return f"{days} day{'s' if days != 1 else ''}"
    if seconds % 60 == 0:
        return f"{seconds // 60} minutes"
    return f"{seconds} s"
