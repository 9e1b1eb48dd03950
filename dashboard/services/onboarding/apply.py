"""One page, one transaction: new nodes registered (node_register), known ones refreshed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone as dt_timezone

from django.db import connection, transaction
from django.utils import timezone

from dashboard import capacity
from dashboard.grid.types import NodeCapacity
from dashboard.models import Node
from dashboard.services.catalog import (
    CatalogError,
    NodeAlreadyRegistered,
    carve_memoised,
    node_register,
    policy_book,
    policy_named,
)
from dashboard.services.figures import figures_refresh, nodes_lock
from dashboard.services.onboarding.request import LISTED, OnboardRequest, OnboardResult

# The reading columns a refresh writes on a known node. Its catalog and pools are left alone:
# pools given by hand at registration are better than nothing the proxy says.
READING_FIELDS = (
    "farm_id", "farm_name", "twin_id", "status", "dedicated", "rented_by_twin_id", "country", "city",
    "total_cru", "total_mru", "total_sru", "total_hru", "used_cru", "used_mru", "used_sru", "used_hru",
)  # fmt: skip
# Written on every refresh, compared never: a new reading is always a new time.
TIME_FIELDS = ("seen_at", "reported_at", "updated_at")


def page_apply(
    nodes: Sequence[NodeCapacity], *, request: OnboardRequest, result: OnboardResult, by=None,
    source: str = "command", origin: str = "",
) -> None:  # fmt: skip
    """Register this page's new nodes and refresh its known ones, all or nothing."""
    if not nodes:
        return
    now = timezone.now()
    with transaction.atomic():
        known = dict(Node.objects.filter(node_id__in=[n.node_id for n in nodes]).values_list("node_id", "pk"))
        new = [n for n in nodes if n.node_id not in known]
        if request.dry_run:
            _preview_new(new, request=request, result=result)
        else:
            for live in new:
                _register(live, request=request, result=result, by=by, source=source, origin=origin, now=now)
        reread = [n for n in nodes if n.node_id in known]
        if reread:
            _refresh(reread, known, result=result, now=now, write=not request.dry_run)


def _register(live: NodeCapacity, *, request, result: OnboardResult, by, source, origin, now: datetime) -> None:
    try:
        node = node_register(
            node_id=live.node_id, total=live.total, farm_id=live.farm_id, farm_name=live.farm_name,
            twin_id=live.twin_id, status=live.status, dedicated=live.dedicated,
            pools=list(live.pools_sru) if live.pools_sru else None, policy_name=request.policy, by=by,
            source=source, used=live.used, seen_at=now, origin=origin, country=live.country, city=live.city,
        )  # fmt: skip
    except NodeAlreadyRegistered:
        # Registered by someone else since this page was looked up: known now, never carved twice.
        result.leave_out(live.node_id, "registered meanwhile by someone else; refreshed on the next run")
        return
    except (CatalogError, capacity.CapacityError) as exc:
        result.leave_out(live.node_id, f"not registered: {exc}")
        return
    # node_register takes no report time; written in the same transaction as the node.
    reported = reported_at(live)
    if reported is not None:
        Node.objects.filter(pk=node.pk).update(reported_at=reported)
    _count_new(result, live, deployable=node.carved_deployable, policy=node.carved_policy_name)


def _preview_new(new: Sequence[NodeCapacity], *, request: OnboardRequest, result: OnboardResult) -> None:
    book = policy_book(node_pks=[], farm_ids={n.farm_id for n in new}) if not request.policy else None
    named = policy_named(request.policy) if request.policy else None
    for live in new:
        policy = named or book.for_farm(live.farm_id)
        try:
            cut = carve_memoised(live.total, policy, pools=live.pools_sru)
        except capacity.CapacityError as exc:
            result.leave_out(live.node_id, f"would not be registered: {exc}")
            continue
        _count_new(result, live, deployable=cut.slices, policy=policy.name)


def _count_new(result: OnboardResult, live: NodeCapacity, *, deployable: int, policy: str) -> None:
    result.registered += 1
    result.deployable += deployable
    if len(result.new_nodes) < LISTED:
        result.new_nodes.append({"node_id": live.node_id, "farm_id": live.farm_id, "status": live.status,
                                 "deployable": deployable, "policy": policy})  # fmt: skip


def _refresh(reread: Sequence[NodeCapacity], known: dict[int, int], *, result: OnboardResult, now: datetime,
             write: bool) -> None:  # fmt: skip
    pks = [known[n.node_id] for n in reread]
    if write:
        nodes_lock(pks)  # as every writer does: the node before its figures
    stored = {row[0]: row[1:] for row in Node.objects.filter(pk__in=pks).values_list("node_id", *READING_FIELDS)}
    rows = []
    for live in reread:
        values = _reading_values(live)
        if values != tuple(stored.get(live.node_id, ())):
            result.changed += 1
        rows.append((*values, now, reported_at(live), now, known[live.node_id]))
    result.refreshed += len(reread)
    if not write:
        return
    # One parametrised UPDATE per node, pipelined (as services.figures stores figures): bulk_update's
    # CASE WHEN statements cost far more to build than to run.
    table = connection.ops.quote_name(Node._meta.db_table)
    columns = ", ".join(f"{connection.ops.quote_name(name)} = %s" for name in (*READING_FIELDS, *TIME_FIELDS))
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {table} SET {columns} WHERE id = %s", rows)
    # A new total, status, farm or used capacity moves stale, deployable, placeable and phantom.
    figures_refresh(pks)


def _reading_values(live: NodeCapacity) -> tuple:
    """The reading in READING_FIELDS' order."""
    total, used = live.total, live.used
    return (live.farm_id, live.farm_name, live.twin_id, live.status, live.dedicated, live.rented_by_twin_id,
            live.country, live.city, total.cru, total.mru, total.sru, total.hru, used.cru, used.mru, used.sru,
            used.hru)  # fmt: skip


def reported_at(live: NodeCapacity) -> datetime | None:
    """The node's last report to the grid (updatedAt, unix seconds) as a time; None when unknown."""
    if not live.updated_at:
        return None
    try:
        return datetime.fromtimestamp(live.updated_at, tz=dt_timezone.utc)
    except (OverflowError, OSError, ValueError):  # an absurd timestamp is no report time
        return None
