"""A node's live reading: what the grid last said about it, and the one writer of those columns.

Who owns which Node columns (one writer each, so two code paths never store two ideas of one fact):

- identity (grid_id, farm_id): services.registration, when the node is created (a farm change on
  the grid is not followed: the farm decides the policy, and moving a catalog is an admin's call);
- the reading (status, total_*, used_*, pools_sru, country, city, farm_name, twin_id, dedicated,
  rented_by_twin_id, seen_at, prechecked_at, reported_at): here, `readings_store`, called by the
  precheck, a deploy, a re-register and the grid onboarding;
- how the catalog was carved (carved_*, catalog_generation): registration and re-register's apply;
- what refusals taught (hidden_mru_per_vm, pool_room_below*): services.observations;
- the stored figures (slice counts, deployable, stale, placeable_now, phantom*): services.figures,
  recomputed from the columns above whenever one of them changes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils import timezone

from dashboard.grid.types import NodeCapacity
from dashboard.models import Node
from dashboard.rows import rows_update


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
    ("pools_sru", "text"),
    ("seen_at", "timestamptz"),
    ("prechecked_at", "timestamptz"),
    ("reported_at", "timestamptz"),
)


# What a reading is compared on ("changed"): the status and the capacity the node reports.
COMPARED = (
    "status",
    "total_cru",
    "total_mru",
    "total_sru",
    "total_hru",
    "used_cru",
    "used_mru",
    "used_sru",
    "used_hru",
)


@dataclass(frozen=True)
class ReadingsStored:
    """What a store did: how many nodes reported another status or capacity than stored, and the events made."""

    changed: int = 0
    events: int = 0


def readings_store(readings: Sequence[LiveReading]) -> ReadingsStored:
    """Write each node's reading columns, in one statement for any number of nodes.

    Call it inside the transaction that holds the nodes' locks, then services.figures.figures_refresh
    for the same nodes (placeable and phantom follow the reading).
    """
    if not readings:
        return ReadingsStored()
    before = {
        row[0]: row[1:]
        for row in Node.objects.filter(pk__in=[r.node_pk for r in readings]).values_list("pk", *COMPARED)
    }
    changed = sum(1 for r in readings if before.get(r.node_pk) != _compared(r))
    rows_update(Node, _COLUMNS, [_row(r) for r in readings], stamped=("updated_at",), json_kept_if_null=("pools_sru",))
    return ReadingsStored(changed=changed)


def _compared(reading: LiveReading) -> tuple:
    total, used = reading.live.total, reading.live.used
    return (reading.status, total.cru, total.mru, total.sru, total.hru, used.cru, used.mru, used.sru, used.hru)


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
        json.dumps(list(live.pools_sru)) if live.pools_sru else None,
        # seen_at: when the grid was read; prechecked_at: the reading the figures now come from;
        # reported_at: when the node last reported to the grid (the proxy's updatedAt), if it says.
        reading.read_at,
        reading.read_at,
        reported_at_of(live),
    )
