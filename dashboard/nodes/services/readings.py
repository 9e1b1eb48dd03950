"""A node's live reading: what the grid last said about it, and the one writer of those columns.

Who owns which Node columns (one writer each, so two code paths never store two ideas of one fact):

- identity (grid_id, farm_id): nodes.services.registration, when the node is created (a farm change on
  the grid is not followed: the farm decides the policy, and moving a catalog is an admin's call);
- the reading (status, total_*, used_*, pools_sru, country, city, farm_name, twin_id, dedicated,
  rented_by_twin_id, rent_contract_id, rent_state, in_dedicated_farm, extra_fee, light, gpus, healthy, power_state, power_target, uptime, seen_at, prechecked_at,
  reported_at, and clearing refused_reading*): here, `readings_store`, called by the precheck, a deploy, a re-register, the grid
  onboarding and the fleet watch; it also writes the node events (NodeEvent) the readings show;
- how the catalog was carved (carved_*, catalog_generation): registration and re-register's apply;
- what refusals taught (hidden_mru_per_vm, pool_room_below*): lessons.services.observations;
- the stored figures (slice counts, deployable, stale, placeable_now, phantom*): figures.services.figures,
  recomputed from the columns above whenever one of them changes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from dashboard.capacity import node_events
from dashboard.figures.services.farm_totals import farm_totals_refresh_on_commit
from dashboard.grid.types import GridError, NodeCapacity
from dashboard.models import NODE_CAPACITY_FIELDS, Deployment, Node, NodeEvent
from dashboard.policies.selectors.carries import rented_by_marketplace
from dashboard.rows import rows_update

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveReading:
    """One node's capacity as the grid reported it (`live`), read at `read_at`.

    After a deploy, `live` is the reading taken just before it plus the new VM's charge: what
    the grid will report next, kept without another read.
    """

    node_pk: int
    live: NodeCapacity
    read_at: datetime

    @classmethod
    def of(cls, node: Node, live: NodeCapacity, *, read_at: datetime | None = None) -> LiveReading:
        return cls(node_pk=node.pk, live=live, read_at=read_at or timezone.now())

    @property
    def status(self) -> str:
        # A status the model does not know (a proxy newer than us) is stored as unknown, not refused.
        return self.live.status if self.live.status in Node.Status.values else Node.Status.UNKNOWN


# The columns a reading writes, with their PostgreSQL types; pools_sru is JSON text, None to keep the
# stored pools (the Grid Proxy does not report them).
_COLUMNS = (
    ("id", "bigint"),
    ("status", "text"),
    ("total_cru", "bigint"),
    ("total_mru", "bigint"),
    ("total_sru", "bigint"),
    ("total_hru", "bigint"),
    ("used_cru", "bigint"),
    ("used_mru", "bigint"),
    ("used_sru", "bigint"),
    ("used_hru", "bigint"),
    ("country", "text"),
    ("city", "text"),
    ("farm_name", "text"),
    ("twin_id", "bigint"),
    ("dedicated", "boolean"),
    ("rented_by_twin_id", "bigint"),
    ("rent_contract_id", "bigint"),
    ("rent_state", "text"),
    ("in_dedicated_farm", "boolean"),
    ("extra_fee", "bigint"),
    ("healthy", "boolean"),
    ("power_state", "text"),
    ("power_target", "text"),
    ("uptime", "bigint"),
    ("light", "boolean"),
    ("gpus", "bigint"),
    ("pools_sru", "text"),
    ("seen_at", "timestamptz"),
    ("prechecked_at", "timestamptz"),
    ("reported_at", "timestamptz"),
    # A good reading ends the refused one the node kept (lessons.services.refused_readings).
    ("refused_reading", "text"),
    ("refused_reading_by", "text"),
    ("refused_reading_at", "timestamptz"),
)


# What a reading is compared on ("changed"): the status and the capacity the node reports.
COMPARED = ("status", *NODE_CAPACITY_FIELDS)
# What the events compare besides (dashboard.capacity.node_events), and when the last reading was taken.
_BEFORE = (
    *COMPARED,
    "healthy",
    "power_state",
    "power_target",
    "uptime",
    "rented_by_twin_id",
    "rent_contract_id",
    "rent_state",
    "seen_at",
)


@dataclass(frozen=True)
class ReadingsStored:
    """What a store did: how many nodes reported another status or capacity than stored, and the events made."""

    changed: int = 0
    events: int = 0


def readings_store(readings: Sequence[LiveReading]) -> ReadingsStored:
    """Write each node's reading columns, in one statement for any number of nodes, and the node
    events the readings show against the stored ones (one more statement, when there are some).

    Call it inside the transaction that holds the nodes' locks, then figures.services.figures.figures_refresh
    for the same nodes (placeable and phantom follow the reading). Subscribers to the events
    (node_events.node_events_subscribe) are told once that transaction commits.
    """
    if not readings:
        return ReadingsStored()
    rows = Node.objects.filter(pk__in=[r.node_pk for r in readings]).values_list("pk", *_BEFORE)
    before = {row[0]: dict(zip(_BEFORE, row[1:], strict=True)) for row in rows}
    readings = [_rent_state_kept(r, before.get(r.node_pk)) for r in readings]
    changed = sum(1 for r in readings if r.node_pk in before and _compared_stored(before[r.node_pk]) != _compared(r))
    events = _events(readings, before)
    rows_update(Node, _COLUMNS, [_row(r) for r in readings], stamped=("updated_at",), json_kept_if_null=("pools_sru",))
    if events:
        NodeEvent.objects.bulk_create(events)
        _tell_subscribers(events)
    # Every reading writer comes through here: the farm totals follow on commit, whoever called.
    farm_totals_refresh_on_commit()
    return ReadingsStored(changed=changed, events=len(events))


def _rent_state_kept(reading: LiveReading, stored: dict | None) -> LiveReading:
    """A node page does not say the rent contract's state (only GET /contracts does): a reading that
    did not read it keeps the stored state while the rent contract is the same one."""
    live = reading.live
    if live.rent_state or not live.rent_contract_id or stored is None:
        return reading
    if stored["rent_contract_id"] != live.rent_contract_id or not stored["rent_state"]:
        return reading
    return replace(reading, live=replace(live, rent_state=stored["rent_state"]))


def _compared(reading: LiveReading) -> tuple:
    total, used = reading.live.total, reading.live.used
    return (reading.status, total.cru, total.mru, total.sru, total.hru, used.cru, used.mru, used.sru, used.hru)


def _compared_stored(stored: dict) -> tuple:
    return tuple(stored[name] for name in COMPARED)


def _events(readings: Sequence[LiveReading], before: dict[int, dict]) -> list[NodeEvent]:
    pairs = []
    for reading in readings:
        stored = before.get(reading.node_pk)
        if stored is None or stored["seen_at"] is None:  # a first reading is no change
            continue
        pairs.append((reading, _stored_reading(stored), _live_reading(reading), stored["seen_at"]))
    if not pairs:
        return []
    moved = [r.node_pk for r, old, new, _seen in pairs if old.used is not None and old.used[1:3] != new.used[1:3]]
    explained = _outcomes_since({r.node_pk: seen for r, _old, _new, seen in pairs if r.node_pk in moved})
    events = []
    for reading, old, new, _seen in pairs:
        for change in node_events.reading_changes(old, new, outcome_reported=reading.node_pk in explained):
            events.append(
                NodeEvent(
                    node_id=reading.node_pk,
                    kind=change.kind,
                    at=reading.read_at,
                    words=change.words[:300],
                    status_before=change.status_before,
                    status_after=change.status_after,
                    detail=change.detail,
                )
            )
    return events


def _outcomes_since(seen: dict[int, datetime]) -> set[int]:
    """The nodes with an outcome (a deploy, a release, a failure) recorded since their last reading."""
    if not seen:
        return set()
    since = min(seen.values())
    rows = Deployment.objects.filter(node_id__in=list(seen)).filter(
        Q(started_at__gte=since) | Q(finished_at__gte=since)
    )
    found = set()
    for node_pk, started, finished in rows.values_list("node_id", "started_at", "finished_at"):
        if started >= seen[node_pk] or (finished is not None and finished >= seen[node_pk]):
            found.add(node_pk)
    return found


def _stored_reading(stored: dict) -> node_events.Reading:
    used = (stored["used_cru"], stored["used_mru"], stored["used_sru"], stored["used_hru"])
    return node_events.Reading(
        status=stored["status"],
        total=(stored["total_cru"], stored["total_mru"], stored["total_sru"], stored["total_hru"]),
        used=None if stored["used_mru"] is None or stored["used_sru"] is None else tuple(v or 0 for v in used),
        healthy=stored["healthy"],
        power_state=stored["power_state"],
        power_target=stored["power_target"],
        uptime=stored["uptime"],
        rented_by_twin_id=stored["rented_by_twin_id"],
        rent_contract_id=stored["rent_contract_id"],
        rent_state=stored["rent_state"],
    )


def _live_reading(reading: LiveReading) -> node_events.Reading:
    live = reading.live
    return node_events.Reading(
        status=reading.status,
        total=(live.total.cru, live.total.mru, live.total.sru, live.total.hru),
        used=(live.used.cru, live.used.mru, live.used.sru, live.used.hru),
        healthy=live.healthy,
        power_state=live.power_state,
        power_target=live.power_target,
        uptime=live.uptime,
        rented_by_twin_id=live.rented_by_twin_id,
        rent_contract_id=live.rent_contract_id,
        rent_state=live.rent_state,
    )


def _tell_subscribers(events: list[NodeEvent]) -> None:
    by_kind: dict[str, list[NodeEvent]] = {}
    for event in events:
        by_kind.setdefault(event.kind, []).append(event)
    for kind, of_kind in by_kind.items():
        for callback in node_events.subscribers(kind):
            transaction.on_commit(partial(_tell, callback, kind, of_kind), robust=True)


def _tell(callback, kind: str, events: list[NodeEvent]) -> None:
    try:
        callback(events)
    except Exception:  # a subscriber's failure is its own: the readings are committed
        log.exception("a subscriber to %s node events failed", kind)


# The Node columns that say the chain's rent of the node, as a reading has them (same names on NodeCapacity).
RENT_FIELDS = ("rented_by_twin_id", "rent_contract_id", "rent_state", "in_dedicated_farm", "extra_fee")


def rent_state_read(grid, live: NodeCapacity) -> NodeCapacity:
    """The reading with its rent contract's state, read (one request) when the marketplace rents the node:
    a node page does not say it (GET /contracts does), and our rent in grace darkens the catalog. A grid
    error leaves it unread (the stored state is kept while the contract is the same one)."""
    if not rented_by_marketplace(live):
        return live
    try:
        contract = grid.rent_contract(live.node_id)
    except GridError as exc:
        log.warning("node %s: its rent contract's state was not read: %s", live.node_id, exc)
        return live
    return replace(live, rent_state=contract.state if contract is not None else "")


def rent_of(live: NodeCapacity) -> dict:
    """The rent columns of a reading, and what the node carries (ZOS-light, GPUs), for a row made from it
    (a registration)."""
    return {**{name: getattr(live, name) for name in RENT_FIELDS}, "light": live.light, "gpus": live.num_gpu}


def reported_at_of(live: NodeCapacity) -> datetime | None:
    """The node's last report to the grid (updatedAt, unix seconds) as a time; None when unknown."""
    if not live.updated_at:
        return None
    try:
        return datetime.fromtimestamp(live.updated_at, tz=UTC)
    except (OverflowError, OSError, ValueError):  # an absurd timestamp is no report time
        return None


def _row(reading: LiveReading) -> tuple:
    live = reading.live
    return (
        reading.node_pk,
        reading.status,
        live.total.cru,
        live.total.mru,
        live.total.sru,
        live.total.hru,
        live.used.cru,
        live.used.mru,
        live.used.sru,
        live.used.hru,
        live.country,
        live.city,
        live.farm_name,
        live.twin_id,
        live.dedicated,
        live.rented_by_twin_id,
        live.rent_contract_id,
        live.rent_state,
        live.in_dedicated_farm,
        live.extra_fee,
        live.healthy,
        live.power_state,
        live.power_target,
        live.uptime,
        live.light,
        live.num_gpu,
        json.dumps(list(live.pools_sru)) if live.pools_sru else None,
        # seen_at: when the grid was read; prechecked_at: the reading the figures now come from;
        # reported_at: when the node last reported to the grid (the proxy's updatedAt), if it says.
        reading.read_at,
        reading.read_at,
        reported_at_of(live),
        "",
        "",
        None,
    )
