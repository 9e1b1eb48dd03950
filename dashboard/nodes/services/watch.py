"""The fleet watch: every registered node read again, a page at a time, so the figures stay true between clicks.

Without it a node's capacity is read only when someone prechecks, deploys, re-registers or
onboards it: an hour after the last click every figure is "uncertain", and a node that went
down, rebooted or got a new disk is seen only by chance. The beat asks for a watch every
FLEET_WATCH_EVERY seconds (nodes.services.watch.fleet_watch_request); one runs at a time, and a run that
would overlap the previous one is recorded as skipped, saying which is still running.

A run reads the registered nodes by id, GRID_PAGE_SIZE (100) a request (`GET /nodes?node_ids=`):
10,000 nodes are 100 requests, inside the request budget (grid/budget.py, as background work).
A proxy older than v0.15.6 refuses `node_ids` with a 400; the run then reads the same nodes by
farm pages (`farm_ids=`, grid.paging.farm_pages) and keeps only registered nodes. Each page is
one transaction: its nodes locked, their readings written by the one reading writer
(nodes.services.readings: one statement for the page, with the node events it sees), their figures
recomputed (placeable, phantom and the tiers follow the status). A page the grid fails is that
page's nodes' problem, not the run's: they are listed with the grid's words and the run goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Min, Q
from django.utils import timezone

from dashboard.capacity.node_events import TOTAL_CHANGED
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid import get_grid
from dashboard.grid.budget import background
from dashboard.grid.deadline import grid_step_deadline
from dashboard.grid.paging import PageRead, ReadFailed, farm_pages, ids_page, one_by_one, pages_ahead
from dashboard.grid.rmb import STATISTICS, Target, get_rmb
from dashboard.grid.types import Grid, GridError, NodeCapacity, QueryRefused
from dashboard.jobs.results import LISTED, WatchResult
from dashboard.jobs.services.jobs import JobError, job_beating, job_progress, job_request, job_succeed
from dashboard.lessons.services.refused_readings import BY_WATCH, readings_refused, refused_by_label
from dashboard.models import Job, Node, NodeEvent
from dashboard.nodes.selectors.farm_ips import farms_selling_ipv4
from dashboard.nodes.services.farm_ips import farm_ips_refresh
from dashboard.nodes.services.pools_heard import pools_hear_nodes
from dashboard.nodes.services.readings import (
    LiveReading,
    ReadingsStored,
    readings_store,
    rent_state_read,
)
from dashboard.nodes.services.zos_cache import OVER_RMB, THROUGH_PROXY, statistics_heard_many
from dashboard.policies.selectors.carries import rented_by_marketplace

log = logging.getLogger(__name__)

# Farms per farm-pages read when the proxy refuses node_ids (the query stays short).
FARMS_PER_READ = 20
READ_AHEAD = 2  # pages read before the writer takes them: enough to keep the network busy
# Nodes asked their pools over RMB in one run at most: a minute of the default RMB budget's calls.
POOLS_PER_WATCH = 600
# Nodes closed for a lost zos-cache asked again in one run (nodes.services.zos_cache): over RMB, or through the
# proxy's /statistics, which waits on the relay (up to GRID_STATISTICS_DEADLINE each), so fewer.
CACHE_RECHECK_OVER_RMB = 200
CACHE_RECHECK_THROUGH_PROXY = 10

Progress = Callable[[WatchResult, str], None]


class _Run:
    """One run's result and the nodes it has accounted for (read, or missed with a reason)."""

    def __init__(self, rows: list[tuple[int, int, int]]) -> None:
        self.known = {grid_id: pk for grid_id, pk, _farm in rows}
        self.farms = {grid_id: farm for grid_id, _pk, farm in rows}
        self.result = WatchResult(nodes=len(self.known))
        self.accounted: set[int] = set()

    def miss(self, node_id: int, why: str) -> None:
        if node_id in self.known and node_id not in self.accounted:
            self.accounted.add(node_id)
            self.result.miss(node_id, why)


@dataclass(frozen=True)
class _Read:
    """What the reader hands the writer: a page read (or the nodes a failed read left out), and a note."""

    page: PageRead
    note: str = ""
    by_farm: bool = False
    failed: bool = False  # a request that failed: its nodes are in page.left_out


def fleet_watch(
    *,
    grid: Grid,
    progress: Progress | None = None,
    page_size: int | None = None,
    now: Callable[[], datetime] = timezone.now,
) -> WatchResult:
    """Read every registered node once and write what the grid says; the run's result.

    The next page is read while this one is written (one page ahead, in a thread of its own that
    touches no database), so a run takes about the network's time, not the network's plus ours.
    A node the grid did not answer for keeps its last reading (and its age says so); it is listed
    in the result with the grid's words.
    """
    size = max(1, min(page_size or settings.GRID_PAGE_SIZE, 1000))
    started = now()
    run = _Run(list(Node.objects.values_list("grid_id", "pk", "farm_id")))
    result = run.result
    for read in pages_ahead(_reads(grid, sorted(run.known), run.farms, size=size), depth=READ_AHEAD):
        page = read.page
        if read.note:
            result.notes.append(read.note)
        result.by_farm = result.by_farm or read.by_farm
        nodes = [n for n in page.nodes if n.node_id in run.known and n.node_id not in run.accounted]
        # The marketplace's rented nodes: their rent contract's state too (one request each), so a rent
        # going to grace is an event and darkens the catalog at this reading.
        read_rent = [n for n in nodes if rented_by_marketplace(n)]  # rent_state_read asks for these
        nodes = [rent_state_read(grid, n) for n in nodes]
        result.pages += 1
        result.requests += page.requests + len(read_rent)  # each rent read is a request the proxy counts too
        if nodes:
            stored = watch_page_store(nodes, known=run.known, read_at=now())
            result.read += len(nodes)
            result.changed += stored.changed
            result.events += stored.events
            run.accounted.update(n.node_id for n in nodes)
        for label, why in page.skipped:
            # Refused, loudly: the node keeps its stored reading (nothing of this entry is written).
            result.refuse(label, why)
            if label.isdigit():
                run.miss(int(label), f"its answer could not be read: {why}")
        # ...and its own page says so (lessons.services.refused_readings).
        readings_refused(refused_by_label(page.skipped, registered=run.known), by=BY_WATCH, at=now())
        for node_id in page.not_found:
            run.miss(node_id, "the grid does not know this node any more (404)")
        for node_id, why in page.left_out:
            run.miss(node_id, why)
        if progress is not None:
            progress(result, page.what)
    for node_id in sorted(set(run.known) - run.accounted):
        run.miss(node_id, "the grid's pages did not list it")
    # The farms that sell IPv4 slices: their public IPs read again (one request a farm), as background work.
    with background():
        result.requests += farm_ips_refresh(farm_ids=farms_selling_ipv4(), grid=grid).requests
    _pools_ask(result, now(), since=started)
    _cache_recheck(grid, result)
    oldest = Node.objects.aggregate(oldest=Min("seen_at"))["oldest"]
    result.oldest_reading_at = oldest.isoformat() if oldest else None
    return result


def _pools_ask(result: WatchResult, at: datetime, *, since: datetime) -> None:
    """With an rmb-peer, the up nodes whose pools are unknown or older than POOLS_MAX_AGE, or whose total
    capacity changed in this run (a disk added or gone), asked for them (the oldest reports first;
    POOLS_PER_WATCH a run at most, as background work); what they say is a pool report."""
    if get_rmb() is None:
        return
    stale = at - timedelta(hours=settings.POOLS_MAX_AGE)
    moved = NodeEvent.objects.filter(kind=TOTAL_CHANGED, at__gte=since).values("node_id")
    nodes = list(
        Node.objects.filter(status=Node.Status.UP, twin_id__isnull=False)
        .filter(Q(pools_reported_at__isnull=True) | Q(pools_reported_at__lt=stale) | Q(pk__in=moved))
        .order_by(F("pools_reported_at").asc(nulls_first=True), "grid_id")[:POOLS_PER_WATCH]
    )
    if not nodes:
        return
    # The round's own deadline: a peer whose Redis fails ends it within one call's deadline (the round
    # stops asking); a slow one within GRID_STEP_DEADLINE, whatever POOLS_PER_WATCH asks.
    with background(), grid_step_deadline(settings.GRID_STEP_DEADLINE):
        heard = pools_hear_nodes(nodes)
    result.pools_asked, result.pools_heard = len(nodes), len(heard.pools)
    if heard.peer_failed:
        result.notes.append(f"pools: the round stopped asking: {heard.peer_failed}")
    for node_id in sorted(heard.refused)[: max(LISTED - len(result.notes), 0)]:
        result.notes.append(heard.why_not[node_id])


def _cache_recheck(grid: Grid, result: WatchResult) -> None:
    """The up nodes closed for a lost zos-cache asked for their statistics again (over RMB, else the proxy's
    /statistics, which goes through the relay: fewer), the longest closed first, as background work; each
    that answers is open again (nodes.services.zos_cache)."""
    rmb = get_rmb()
    limit = CACHE_RECHECK_OVER_RMB if rmb is not None else CACHE_RECHECK_THROUGH_PROXY
    nodes = list(
        Node.objects.filter(status=Node.Status.UP)
        .exclude(zos_cache_missing="")
        .order_by(F("zos_cache_missing_at").asc(nulls_first=True), "grid_id")[:limit]
    )
    if not nodes:
        return
    answers: dict[int, object] = {}
    with background():
        if rmb is not None:
            targets = [Target(node_id=n.grid_id, twin_id=n.twin_id) for n in nodes if n.twin_id]
            answers, source = rmb.ask_many(STATISTICS, targets), OVER_RMB
        else:
            source = THROUGH_PROXY
            for n in nodes:
                try:
                    with grid_step_deadline(settings.GRID_STEP_DEADLINE):
                        answers[n.grid_id] = grid.statistics(n.grid_id)
                except GridError as exc:
                    answers[n.grid_id] = exc
    opened = statistics_heard_many(answers, source=source)
    still = len(nodes) - opened
    result.notes.append(
        f"{len(nodes)} node(s) closed for a lost zos-cache asked again ({source}): {opened} answered and opened, "
        f"{still} still refuse everything"
    )


def watch_page_store(nodes: list[NodeCapacity], *, known: dict[int, int], read_at: datetime) -> ReadingsStored:
    """One page in one transaction: the nodes locked, their readings written (one statement), their figures."""
    pks = [known[n.node_id] for n in nodes]
    with node_writes(pks):
        stored = readings_store([LiveReading(known[n.node_id], n, read_at) for n in nodes])
    return stored


def _reads(grid: Grid, ids: list[int], farms: dict[int, int], *, size: int) -> Iterator[_Read]:
    """The registered nodes by id pages; by farm pages from the first page the proxy refuses node_ids."""
    for start in range(0, len(ids), size):
        chunk = ids[start : start + size]
        try:
            with grid_step_deadline(settings.GRID_STEP_DEADLINE):
                read = ids_page(grid, node_ids=chunk)
        except ReadFailed as exc:
            if isinstance(exc.__cause__, QueryRefused):
                yield from _farm_reads(
                    grid,
                    ids[start:],
                    farms,
                    size=size,
                    note=f"the grid proxy refused node_ids ({exc}); the nodes were read by farm pages",
                )
                return
            yield _Read(PageRead(what=exc.what, nodes=(), left_out=tuple((n, str(exc)) for n in chunk)), failed=True)
            continue
        yield _Read(read)
        # A node whose entry the page had but the parser refused is not lacked: asked alone, it is refused again.
        got = {node.node_id for node in read.nodes} | set(refused_by_label(read.skipped))
        lacked = [n for n in chunk if n not in got]
        if lacked:
            yield _Read(one_by_one(grid, lacked, step_seconds=settings.GRID_STEP_DEADLINE))


def _farm_reads(grid: Grid, ids: list[int], farms: dict[int, int], *, size: int, note: str) -> Iterator[_Read]:
    by_farm: dict[int, list[int]] = {}
    for node_id in ids:
        by_farm.setdefault(farms[node_id], []).append(node_id)
    groups = sorted(by_farm)
    for start in range(0, len(groups), FARMS_PER_READ):
        group = groups[start : start + FARMS_PER_READ]
        pages = farm_pages(grid, farm_ids=group, size=size, max_pages=settings.GRID_MAX_PAGES)
        try:
            while True:
                with grid_step_deadline(settings.GRID_STEP_DEADLINE):
                    read = next(pages, None)
                if read is None:
                    break
                yield _Read(read, note=note, by_farm=True)
                note = ""
        except ReadFailed as exc:
            # The rest of these farms' nodes keep their readings; the run says which and why.
            left = tuple((n, str(exc)) for farm in group for n in by_farm[farm])
            yield _Read(
                PageRead(what=exc.what, nodes=(), left_out=left), note=note or str(exc), by_farm=True, failed=True
            )
            note = ""


# --- the job and the beat ----------------------------------------------------------------------


def fleet_watch_job(
    *, job: Job, stop_on: tuple[type[BaseException], ...] = (), grid: Grid | None = None
) -> WatchResult:
    """The worker's side of a fleet-watch job: progress after every page."""
    total = Node.objects.count()
    job_progress(job=job, step=f"reading {total} registered node(s) from the grid", done=0, total=total)

    def progress(result: WatchResult, what: str) -> None:
        job_progress(
            job=job,
            step=f"{what} done: {result.read} of {result.nodes} node(s) read",
            done=result.read + result.missed_total,
            failed=result.missed_total,
        )

    try:
        with job_beating(job=job):
            result = fleet_watch(grid=grid or get_grid(), progress=progress)
    except GridError as exc:
        raise JobError(f"the fleet watch could not read the grid: {exc}") from None
    if result.refused_total and not result.read:
        # Every answer refused is a grid this dashboard cannot read, not a quiet run.
        raise JobError(f"the fleet watch read no node: {result.words()}", result=result)
    with transaction.atomic():
        job_succeed(job=job, result=result)
    return result


def fleet_watch_request(*, source: str = Job.Source.BEAT, by=None, now: datetime | None = None) -> Job:
    """Queue a fleet watch; when one is still active, a finished job that says it was skipped and why."""
    request = job_request(kind=Job.Kind.FLEET_WATCH, source=source, by=by)
    if request.created:
        return request.job
    running = request.job
    now = now or timezone.now()
    since = running.started_at or running.created_at
    skipped = WatchResult(
        skipped=(
            f"the previous watch (job #{running.pk}, {running.state} since {since:%Y-%m-%d %H:%M:%S} UTC, "
            f"{running.step or 'no step yet'}) had not finished"
        )
    )
    return Job.objects.create(
        kind=Job.Kind.FLEET_WATCH,
        source=source,
        requested_by=by,
        state=Job.State.SUCCEEDED,
        step="skipped",
        result=skipped.stored(),
        started_at=now,
        finished_at=now,
    )


__all__ = ["fleet_watch", "fleet_watch_job", "fleet_watch_request", "watch_page_store"]
