"""One page, one transaction: new nodes registered (node_register), known ones refreshed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from dashboard import capacity
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid.types import NodeCapacity
from dashboard.jobs.results import LISTED, OnboardResult
from dashboard.models import Node
from dashboard.nodes.services.onboarding.request import OnboardRequest
from dashboard.nodes.services.pools_heard import Heard, lives_with_pools, pools_hear, pools_heard_store
from dashboard.nodes.services.readings import COMPARED, LiveReading, readings_store
from dashboard.nodes.services.registration import CatalogError, NodeAlreadyRegistered, node_register_from_grid
from dashboard.nodes.services.registration_page import nodes_register_from_grid, page_planned


class OnboardLimit(Exception):
    """This page would take the new nodes past the onboarding's limit; nothing of it was written."""


def page_apply(
    nodes: Sequence[NodeCapacity],
    *,
    request: OnboardRequest,
    result: OnboardResult,
    by=None,
    source: str = "command",
    origin: str = "",
) -> None:
    """Register this page's new nodes and refresh its known ones, all or nothing.

    OnboardLimit (nothing of the page written) when its new nodes would take the run past
    request.new_nodes_limit(); a dry run counts past it (the preview says how many, to confirm).
    """
    if not nodes:
        return
    now = timezone.now()
    # The new nodes asked for their pools over RMB (one paced round, before the page's transaction:
    # a silent node holds the page for the deadline, never a lock), so the carve knows them.
    heard = Heard()
    if not request.dry_run:
        registered = set(Node.objects.filter(grid_id__in=[n.node_id for n in nodes]).values_list("grid_id", flat=True))
        # Pools only: a second round for the build would halve the pace; the watch asks it with the
        # node's pools again, once they are older than POOLS_MAX_AGE.
        heard = pools_hear([n for n in nodes if n.node_id not in registered], version=False)
        nodes = lives_with_pools(nodes, heard)
    with transaction.atomic():
        known = dict(Node.objects.filter(grid_id__in=[n.node_id for n in nodes]).values_list("grid_id", "pk"))
        new = [n for n in nodes if n.node_id not in known]
        limit = request.new_nodes_limit()
        if not request.dry_run and result.registered + len(new) > limit:
            raise OnboardLimit(
                f"its {len(new)} new node(s) would take this run to {result.registered + len(new)}, past the "
                f"{limit} allowed ({request.limit_words()}); nothing of it was registered. Preview the onboarding "
                f"and confirm the number of new nodes (the page, or node_register --max-new-nodes N)"
            )
        if request.dry_run:
            _preview_new(new, request=request, result=result, now=now)
        elif new:
            _register_page(new, request=request, result=result, by=by, source=source, origin=origin, now=now)
            _pools_refused_heard(new, heard)
        reread = [n for n in nodes if n.node_id in known]
        if reread:
            _refresh(reread, known, result=result, now=now, write=not request.dry_run)
    if heard.pools or heard.versions or heard.refused:
        asked = [*heard.pools, *heard.versions, *heard.refused]
        pools_heard_store(list(Node.objects.filter(grid_id__in=asked)), heard, at=now)
    result.pools_heard += len(heard.pools)
    # Each node whose own pools answer was not taken (carved as for unknown pools): why, in the result too.
    for node_id in sorted(heard.refused):
        if len(result.notes) < LISTED:
            result.notes.append(heard.why_not[node_id])


def _pools_refused_heard(new: Sequence[NodeCapacity], heard: Heard) -> None:
    """New nodes whose pools answer the registration's checks refused (carved as for unknown pools):
    their answer is not kept after the page."""
    refused = Node.objects.filter(grid_id__in=[n.node_id for n in new if n.pools_sru]).exclude(pools_refused="")
    for grid_id, why in refused.values_list("grid_id", "pools_refused"):
        heard.refuse(grid_id, why)


def _register_page(new: Sequence[NodeCapacity], *, request, result: OnboardResult, by, source, origin, now) -> None:
    """The page's new nodes registered together (a few statements); one by one if someone registered one meanwhile."""
    try:
        with transaction.atomic():
            nodes, refused = nodes_register_from_grid(
                lives=new, read_at=now, policy_name=request.policy, by=by, source=source, origin=origin
            )
    except IntegrityError:
        for live in new:
            _register(live, request=request, result=result, by=by, source=source, origin=origin, now=now)
        return
    lives = {live.node_id: live for live in new}
    for node in nodes:
        _count_new(result, lives[node.grid_id], deployable=node.carved_deployable, policy=node.carved_policy_name)
    for node_id, why in refused:
        result.leave_out(node_id, why)


def _register(live: NodeCapacity, *, request, result: OnboardResult, by, source, origin, now: datetime) -> None:
    try:
        # Inside the page's transaction, and the page asked over RMB already: never ask again here.
        node = node_register_from_grid(
            live=live, read_at=now, policy_name=request.policy, by=by, source=source, origin=origin, ask_rmb=False
        )
    except NodeAlreadyRegistered:
        # Registered by someone else since this page was looked up: known now, never carved twice.
        result.leave_out(live.node_id, "registered meanwhile by someone else; refreshed on the next run")
        return
    except (CatalogError, capacity.CapacityError) as exc:
        result.leave_out(live.node_id, f"not registered: {exc}")
        return
    _count_new(result, live, deployable=node.carved_deployable, policy=node.carved_policy_name)


def _preview_new(new: Sequence[NodeCapacity], *, request: OnboardRequest, result: OnboardResult, now) -> None:
    # The registration's own plan of the page (its checks, its prudent carve of refused pools, its carve):
    # what the operator confirms is what the run will register.
    planned, refused = page_planned(new, policy_name=request.policy, read_at=now)
    for entry in planned:
        _count_new(result, entry.live, deployable=entry.carve.slices, policy=entry.policy.name)
    for node_id, why in refused:
        result.leave_out(node_id, f"would not be registered: {why}")


def _count_new(result: OnboardResult, live: NodeCapacity, *, deployable: int, policy: str) -> None:
    result.registered += 1
    result.deployable += deployable
    if len(result.new_nodes) < LISTED:
        result.new_nodes.append(
            {
                "node_id": live.node_id,
                "farm_id": live.farm_id,
                "status": live.status,
                "deployable": deployable,
                "policy": policy,
            }
        )


def _refresh(
    reread: Sequence[NodeCapacity], known: dict[int, int], *, result: OnboardResult, now: datetime, write: bool
) -> None:
    """A known node gets a fresh reading (nodes.services.readings, its one writer) and its figures, never a carve."""
    pks = [known[n.node_id] for n in reread]
    # A dry run locks and stores nothing; a write locks the nodes before it compares (as every writer does).
    with node_writes(pks if write else ()):
        stored = {row[0]: row[1:] for row in Node.objects.filter(pk__in=pks).values_list("grid_id", *COMPARED)}
        for live in reread:
            total, used = live.total, live.used
            values = (live.status, total.cru, total.mru, total.sru, total.hru, used.cru, used.mru, used.sru, used.hru)
            if values != tuple(stored.get(live.node_id, ())):
                result.changed += 1
        result.refreshed += len(reread)
        if write:
            readings_store([LiveReading(known[live.node_id], live, now) for live in reread])
            # A new total, status or used capacity moves stale, deployable, placeable and phantom: stored on exit.
