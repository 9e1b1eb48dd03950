"""What changed between two readings of a node, in the domain's words, and who wants to hear of it. Pure: no Django.

nodes.services.readings (the one writer of a node's reading) asks `reading_changes(before, after)` for
every node it writes and stores each change as a NodeEvent; the watch makes that happen for every
node every few minutes, and a precheck, a deploy, a re-register or an onboarding for the nodes they
read. A first reading (no `before`) is no change.

Kinds (the stored values, never renamed):
- went-down, standby: the status became down / standby;
- woken: standby -> up; back-up: down (or unknown) -> up;
- wake-not-woken: the farm's power manager asked the node up (power target up) and it is still
  off (power state down, status not up): a wake that did not happen, once per episode;
- unhealthy: the proxy's `healthy` went false;
- rebooted: `uptime` went back (the node restarted between the readings);
- total-changed: the total capacity moved (a disk added or gone, memory changed): the catalog was
  carved on the old total; one that no longer fits the new total is stale (figures.services.figures says why);
- used-moved: the used capacity moved and no outcome was reported for the node since the last
  reading (a VM deployed or released behind the catalog's back, or a release never reported);
- rent-grace: the node's rent contract went to its grace period (its twin could not pay: the node's
  contracts go to grace with it); rent-paid: back from grace to Created;
- rent-ended: the rent contract is gone (cancelled, or its grace ran out); rented: a rent contract appeared.
  Whether the renter is the marketplace is the alert's to judge (alerts.rules, MARKETPLACE_TWIN_ID).

Subscribers (`node_events_subscribe(kind, callback)`) are told after the writing transaction
commits, with the stored events of that kind: the audit subscribes to "used-moved".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

WENT_DOWN = "went-down"
STANDBY = "standby"
WOKEN = "woken"
BACK_UP = "back-up"
WAKE_NOT_WOKEN = "wake-not-woken"
UNHEALTHY = "unhealthy"
REBOOTED = "rebooted"
TOTAL_CHANGED = "total-changed"
USED_MOVED = "used-moved"
RENT_GRACE = "rent-grace"
RENT_PAID = "rent-paid"
RENT_ENDED = "rent-ended"
RENTED = "rented"

KINDS = {
    WENT_DOWN: "Went down",
    STANDBY: "Went to standby",
    WOKEN: "Woken",
    BACK_UP: "Back up",
    WAKE_NOT_WOKEN: "Wake asked, not woken",
    UNHEALTHY: "Unhealthy",
    REBOOTED: "Rebooted",
    TOTAL_CHANGED: "Total capacity changed",
    USED_MOVED: "Used capacity moved, no outcome reported",
    RENT_GRACE: "Rent contract in grace",
    RENT_PAID: "Rent contract paid again",
    RENT_ENDED: "Rent contract ended",
    RENTED: "Rented",
}
RENT_KINDS = (RENT_GRACE, RENT_PAID, RENT_ENDED, RENTED)
GRACE_PERIOD = "GracePeriod"
# Status changes: what uptime is counted from (nodes.selectors.uptime).
STATUS_KINDS = (WENT_DOWN, STANDBY, WOKEN, BACK_UP)

_UNITS = (("cru", "cores"), ("mru", "memory"), ("sru", "SSD"), ("hru", "HDD"))


@dataclass(frozen=True)
class Reading:
    """One node's reading as the events compare it: plain values (bytes, seconds)."""

    status: str
    total: tuple[int, int, int, int]  # cru, mru, sru, hru
    used: tuple[int, int, int, int] | None  # None: never read
    healthy: bool | None = None
    power_state: str = ""  # "up" / "down" / "" (not reported)
    power_target: str = ""
    uptime: int | None = None
    rented_by_twin_id: int | None = None
    rent_contract_id: int | None = None
    rent_state: str = ""  # "Created", "GracePeriod", "" (not read)


@dataclass(frozen=True)
class Change:
    kind: str
    words: str
    status_before: str = ""
    status_after: str = ""
    detail: dict = field(default_factory=dict)


def wake_pending(reading: Reading) -> bool:
    """The power manager asked the node up and it is not up yet."""
    return reading.power_target == "up" and reading.power_state == "down" and reading.status != "up"


def reading_changes(before: Reading | None, after: Reading, *, outcome_reported: bool = False) -> list[Change]:
    """The changes from `before` to `after`, in a fixed order; none for a first reading.

    `outcome_reported`: an outcome (deployed, released, failed) was recorded for the node since
    `before`, so a move of its used capacity is explained and is no event.
    """
    if before is None:
        return []
    return [
        *_life_changes(before, after),
        *_total_changes(before, after),
        *_rent_changes(before, after),
        *_used_changes(before, after, outcome_reported=outcome_reported),
    ]


def _life_changes(before: Reading, after: Reading) -> list[Change]:
    """The node's status moved, it was asked up and is still off, it turned unhealthy, or it rebooted."""
    changes: list[Change] = []
    if before.status != after.status:
        kind = _status_kind(before.status, after.status)
        if kind:
            changes.append(
                Change(
                    kind=kind,
                    words=f"{KINDS[kind]}: the grid said {before.status}, now {after.status}",
                    status_before=before.status,
                    status_after=after.status,
                )
            )
    if wake_pending(after) and not wake_pending(before):
        changes.append(
            Change(
                kind=WAKE_NOT_WOKEN,
                words=f"The farm's power manager asked the node up (power target up) but it is still off "
                f"(power state down, status {after.status})",
            )
        )
    if after.healthy is False and before.healthy is not False:
        changes.append(Change(kind=UNHEALTHY, words="The grid proxy reports the node unhealthy"))
    if before.uptime is not None and after.uptime is not None and after.uptime < before.uptime:
        changes.append(
            Change(
                kind=REBOOTED,
                words=f"Rebooted: uptime went back from {_duration(before.uptime)} to {_duration(after.uptime)}",
                detail={"uptime_before": before.uptime, "uptime_after": after.uptime},
            )
        )
    return changes


def _total_changes(before: Reading, after: Reading) -> list[Change]:
    changes: list[Change] = []
    if before.total != after.total:
        moved = _moves(before.total, after.total)
        changes.append(
            Change(
                kind=TOTAL_CHANGED,
                words=f"Total capacity changed ({moved}): the catalog was carved on the old total; its figures "
                "now rest on the new one, and a catalog that no longer fits it is stale (re-register the node)",
                detail={"total_before": list(before.total), "total_after": list(after.total)},
            )
        )
    return changes


def _used_changes(before: Reading, after: Reading, *, outcome_reported: bool) -> list[Change]:
    """Used capacity moved with no outcome reported to explain it (on the same total)."""
    changes: list[Change] = []
    if (
        not outcome_reported
        and before.used is not None
        and after.used is not None
        and before.total == after.total
        and before.used[1:3] != after.used[1:3]
    ):
        moved = _moves(before.used, after.used)
        changes.append(
            Change(
                kind=USED_MOVED,
                words=f"Used capacity moved ({moved}) and no outcome was reported for the node since the last "
                "reading: a VM came or went behind the catalog's back",
                detail={"used_before": list(before.used), "used_after": list(after.used)},
            )
        )
    return changes


def _rent_changes(before: Reading, after: Reading) -> list[Change]:
    """The rent contract appeared, ended, went to grace or was paid again between the readings."""
    old, new = before.rent_contract_id, after.rent_contract_id
    detail = {
        "rent_contract_id": new or old,
        "twin_id": after.rented_by_twin_id or before.rented_by_twin_id,
        "state_before": before.rent_state,
        "state_after": after.rent_state,
    }
    if old and old != new:
        ended = Change(
            kind=RENT_ENDED,
            words=f"Rent contract {old} of twin {before.rented_by_twin_id} ended: the node is no longer rented by it"[
                :300
            ],
            detail={**detail, "rent_contract_id": old, "twin_id": before.rented_by_twin_id},
        )
        if not new:
            return [ended]
        return [
            ended,
            Change(kind=RENTED, words=f"Rented by twin {after.rented_by_twin_id} (rent contract {new})", detail=detail),
        ]
    if new and not old:
        return [
            Change(kind=RENTED, words=f"Rented by twin {after.rented_by_twin_id} (rent contract {new})", detail=detail)
        ]
    if new and after.rent_state == GRACE_PERIOD and before.rent_state != GRACE_PERIOD:
        return [
            Change(
                kind=RENT_GRACE,
                words=f"Rent contract {new} of twin {after.rented_by_twin_id} went to its grace period (unpaid): "
                "the node's contracts are in grace with it and its catalog is dark",
                detail=detail,
            )
        ]
    if new and before.rent_state == GRACE_PERIOD and after.rent_state and after.rent_state != GRACE_PERIOD:
        return [Change(kind=RENT_PAID, words=f"Rent contract {new} is paid again ({after.rent_state})", detail=detail)]
    return []


def _status_kind(before: str, after: str) -> str:
    if after == "down":
        return WENT_DOWN
    if after == "standby":
        return STANDBY
    if after == "up":
        return WOKEN if before == "standby" else BACK_UP
    return ""


def _moves(before: Sequence[int], after: Sequence[int]) -> str:
    parts = []
    for (key, name), old, new in zip(_UNITS, before, after, strict=True):
        if old != new:
            shown = (lambda v: str(v)) if key == "cru" else _gib
            parts.append(f"{name} {shown(old)} -> {shown(new)}")
    return ", ".join(parts)


def _gib(value: int) -> str:
    return f"{value / 1024**3:.1f} GiB"


def _duration(seconds: int) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds} s"


# --- who wants to hear of which kind ------------------------------------------------------------

_subscribers: dict[str, list[Callable[[Sequence], None]]] = {}


def node_events_subscribe(kind: str, callback: Callable[[Sequence], None]) -> None:
    """Call `callback(events)` with the stored NodeEvent rows of `kind` after each write that made some.

    Called after the writing transaction commits; a callback that raises is logged by the caller and
    does not undo the readings. Subscribing the same callback twice calls it once.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown node event kind {kind!r}; one of {', '.join(KINDS)}")
    callbacks = _subscribers.setdefault(kind, [])
    if callback not in callbacks:
        callbacks.append(callback)


def node_events_unsubscribe(kind: str, callback: Callable[[Sequence], None]) -> None:
    if callback in _subscribers.get(kind, []):
        _subscribers[kind].remove(callback)


def subscribers(kind: str) -> tuple[Callable[[Sequence], None], ...]:
    return tuple(_subscribers.get(kind, ()))


__all__ = [
    "BACK_UP",
    "KINDS",
    "REBOOTED",
    "STANDBY",
    "STATUS_KINDS",
    "TOTAL_CHANGED",
    "UNHEALTHY",
    "USED_MOVED",
    "WAKE_NOT_WOKEN",
    "WENT_DOWN",
    "WOKEN",
    "Change",
    "Reading",
    "node_events_subscribe",
    "node_events_unsubscribe",
    "reading_changes",
    "subscribers",
    "wake_pending",
]
