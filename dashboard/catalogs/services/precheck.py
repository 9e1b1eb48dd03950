"""The precheck: read a node's live capacity and say which of its free slices ZOS would really place now.

The reading is stored (nodes.services.readings) and the node's figures follow it (figures.services.figures), in
one transaction; the catalog itself is never touched. The report says, slice by slice, why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dashboard import capacity
from dashboard.figures.closure import closure_of
from dashboard.figures.services.node_writes import node_writes
from dashboard.grid import get_grid
from dashboard.grid.deadline import grid_step_deadline
from dashboard.grid.rmb import Target, get_rmb
from dashboard.grid.types import Grid, GridError, MalformedPayload, NodeCapacity, NodeStatistics
from dashboard.jobs.results import PrecheckResult
from dashboard.jobs.services.jobs import JobError, job_beating, job_progress, job_succeed
from dashboard.lessons.services.refused_readings import BY_PRECHECK, readings_refused
from dashboard.models import Job, Node, Slice, reading_max_age
from dashboard.nodes.selectors.stored_reading import node_stored_reading
from dashboard.nodes.services.pools import PoolsAnswer, pools_ask_node, pools_keep
from dashboard.nodes.services.readings import LiveReading, readings_store, rent_state_read
from dashboard.nodes.services.zos_cache import OVER_RMB, THROUGH_PROXY, statistics_heard
from dashboard.policies.selectors.policy_book import policy_for_node


@dataclass(frozen=True)
class PrecheckReport:
    node_id: int
    capacity: NodeCapacity
    precheck: capacity.Precheck
    policy: capacity.Policy
    checked_at: datetime  # when the reading it answers from was taken
    read_now: bool = True  # False: answered from the stored reading, young enough for the caller
    closure: capacity.Closure | None = None  # why the node offers nothing (capacity.closures); None: open
    # With an rmb-peer: the node's own counters (zos.statistics.get) beside the proxy's, in words; "" when not asked.
    counters_words: str = ""
    # The node's own pools answer, asked by this precheck and not taken: why ("" when taken or not asked).
    pools_words: str = ""

    @property
    def reading_age_seconds(self) -> float:
        return round(max((timezone.now() - self.checked_at).total_seconds(), 0.0), 3)

    @property
    def away(self) -> bool:
        """The node is closed (down, on standby, ...: capacity.closures): said in one line."""
        return self.closure is not None

    @property
    def cause(self) -> str:
        """node-offline (down, standby), node-closed (rented by another twin, ...), "" when open."""
        if self.closure is None:
            return ""
        return "node-offline" if capacity.node_is_away(self.closure.key) else "node-closed"

    @property
    def words(self) -> str:
        p = self.precheck
        if not p.free_slices:
            return f"node {self.node_id} ({self.capacity.status}) has no free slice to place"
        if self.closure is not None:
            return self.closure.sentence(free_slices=p.free_slices, node_id=self.node_id)
        if not p.phantom_slices:
            return f"node {self.node_id}: all {p.free_slices} free slices can be placed now"
        phantom = ", ".join(str(i) for i in p.phantom_slices)
        return (
            f"node {self.node_id}: {p.placeable_now} of {p.free_slices} free slices can be placed now; "
            f"phantom: slice {phantom}"
        )

    def as_dict(self) -> dict:
        return {
            "node_id": self.node_id,
            "status": self.capacity.status,
            "cause": self.cause,
            "closure": self.closure.key if self.closure else "",
            "closure_detail": self.closure.detail if self.closure else "",
            "policy": {"name": self.policy.name, "version": self.policy.version},
            "checked_at": self.checked_at.isoformat(),
            "read_now": self.read_now,
            "reading_age_seconds": self.reading_age_seconds,
            "total": self.capacity.total.as_dict(),
            "used": self.capacity.used.as_dict(),
            **self.precheck.as_dict(),
            "words": self.words,
            "counters_words": self.counters_words,
            "pools_words": self.pools_words,
        }


class Counters(NamedTuple):
    """The node's own counters as a precheck read them: the words beside the proxy's reading, and the
    answer (or the error that came instead) with where it came from, for nodes.services.zos_cache to keep."""

    words: str = ""
    answer: NodeStatistics | GridError | None = None
    source: str = ""


@dataclass(frozen=True)
class PrecheckRead:
    """What a precheck reads from outside before it writes anything: the grid's reading (at `read_at`),
    the node's own pools answer where it can be asked, and its own counters beside the proxy's."""

    live: NodeCapacity
    read_at: datetime
    pools: PoolsAnswer | None = None
    counters: Counters = Counters()


def precheck_read(*, node: Node, grid: Grid | None = None) -> PrecheckRead:
    """Every call out a precheck makes (the Grid Proxy, the node over RMB), and nothing written: called
    outside any transaction, so a silent node or a slow grid never holds a row lock (issue 44)."""
    grid = grid or get_grid()
    try:
        read = grid.node(node.grid_id)
    except MalformedPayload as exc:
        # Nothing of it is written; the node keeps its reading, and its page says this one was refused.
        readings_refused({node.grid_id: str(exc)}, by=BY_PRECHECK)
        raise
    live = rent_state_read(grid, read)  # our rent contract's state: one more request
    read_at = timezone.now()
    # Where the node itself can be asked (rmb-peer, the simulated grid; never the Grid Proxy), its pools too.
    return PrecheckRead(
        live=live,
        read_at=read_at,
        pools=pools_ask_node(node=node),
        counters=counters_read(live, node=node, grid=grid),
    )


def precheck_write(*, node: Node, read: PrecheckRead) -> PrecheckReport:
    """Store what `precheck_read` read: the pools answer, the reading and the node's figures. No call out."""
    if read.pools is not None and pools_keep(node=node, answer=read.pools) is not None:
        node.refresh_from_db()
    # Before the store: a node that lost its zos-cache is closed by what it says now (nodes.services.zos_cache).
    counters = read.counters
    if counters.answer is not None and statistics_heard(node=node, answer=counters.answer, source=counters.source):
        node.refresh_from_db()
    policy = policy_for_node(node)
    result = precheck_store(node=node, reading=LiveReading.of(node, read.live, read_at=read.read_at), policy=policy)
    return PrecheckReport(
        node_id=node.grid_id,
        capacity=read.live,
        precheck=result,
        policy=policy,
        checked_at=node.prechecked_at,
        closure=node.closed,  # as the figures writer stored it from this reading
        counters_words=read.counters.words,
        pools_words=node.pools_refused if read.pools is not None and read.pools.refused else "",
    )


def precheck_run(*, node: Node, grid: Grid | None = None) -> PrecheckReport:
    """Read the node's live capacity and say which of its free slices can really be placed now.

    Stores the reading and the node's figures; the catalog itself is never touched. A grid error
    propagates and nothing is written. Never inside a transaction: the reads come first (precheck_read).
    """
    return precheck_write(node=node, read=precheck_read(node=node, grid=grid))


def counters_read(live: NodeCapacity, *, node: Node, grid: Grid) -> Counters:
    """The node's own counters (`zos.statistics.get` over RMB) beside the proxy's reading; asked only of
    an up node, where it is cheap (an answer within the RMB deadline). Nothing is written here.

    A node without its zos-cache answers `subvolume 'zos-cache' not found`. Without an rmb-peer a node
    closed for that is asked through the proxy's /statistics instead, to open it once it answers again."""
    rmb = get_rmb()
    if rmb is None or live.status != "up" or not live.twin_id:
        if node.zos_cache_missing and live.status == "up":
            try:
                return Counters(answer=grid.statistics(node.grid_id), source=THROUGH_PROXY)
            except GridError as exc:
                return Counters(answer=exc, source=THROUGH_PROXY)
        return Counters()
    try:
        own = rmb.statistics(Target(node_id=live.node_id, twin_id=live.twin_id))
    except GridError as exc:
        return Counters(f"{exc}; the Grid Proxy's reading alone is used", exc, OVER_RMB)
    words = (
        f"node {live.node_id} says itself ({rmb.over}, now): {capacity.format_size(own.used.mru)} memory and "
        f"{capacity.format_size(own.used.sru)} SSD used, {own.deployments} deployment(s); the Grid Proxy: "
        f"{capacity.format_size(live.used.mru)} and {capacity.format_size(live.used.sru)}"
    )
    if (own.used.mru, own.used.sru) == (live.used.mru, live.used.sru):
        return Counters(words + " (they agree)", own, OVER_RMB)
    return Counters(
        words + " (the node's own counters are fresher: the proxy is a chain and an indexer hop behind)", own, OVER_RMB
    )


def precheck_job(*, job: Job, stop_on: tuple[type[BaseException], ...] = ()) -> PrecheckResult:
    """A precheck job (dashboard.jobs.kinds.precheck): the live precheck of its node, stored as the result.

    With parameters {"max_age_seconds": N} a stored reading up to N seconds old is answered from
    (never one past READING_MAX_AGE_MINUTES: that one is read again first; see precheck_answer).
    """
    if job.node is None:
        raise JobError("this precheck job has no node (was it deleted?)")
    job_progress(job=job, step=f"checking node {job.node.grid_id}'s live capacity")
    max_age = job.asked.max_age_seconds
    with grid_step_deadline(settings.GRID_STEP_DEADLINE), job_beating(job=job):
        if max_age is None:
            report = precheck_run(node=job.node)
        else:
            report = precheck_answer(node=job.node, max_age=timedelta(seconds=max_age))
    result = PrecheckResult.model_validate(report.as_dict())
    if report.pools_words:  # the job page lists a result's notes
        result.notes = [f"node {report.node_id}'s pools answer was not taken: {report.pools_words}"]
    with transaction.atomic():
        job_succeed(job=job, result=result)
    return result


def precheck_answer(*, node: Node, max_age: timedelta, grid: Grid | None = None) -> PrecheckReport:
    """The precheck a caller content with a reading up to `max_age` old gets: from the stored reading
    when it is that young (no grid request, nothing written), else from a fresh read.

    `max_age` is capped at READING_MAX_AGE_MINUTES: past it the stored figures are "uncertain" and
    are never answered from. The fresh read is bounded in time (PRECHECK_REREAD_DEADLINE, retries
    included); past it the grid's error says so and nothing is written.
    """
    prepared = precheck_prepare(node=node, max_age=max_age, grid=grid)
    return prepared if isinstance(prepared, PrecheckReport) else precheck_write(node=node, read=prepared)


def precheck_prepare(
    *, node: Node, max_age: timedelta | None, grid: Grid | None = None
) -> PrecheckReport | PrecheckRead:
    """Everything a precheck does before it writes: the answer from the stored reading when one up to
    `max_age` old is there (None: always read), else the fresh read (bounded by PRECHECK_REREAD_DEADLINE
    when a stored one was acceptable), for `precheck_write` to store inside the caller's transaction."""
    if max_age is None:
        return precheck_read(node=node, grid=grid)
    stored = precheck_from_stored(node=node, max_age=max_age)
    if stored is not None:
        return stored
    with grid_step_deadline(settings.PRECHECK_REREAD_DEADLINE):
        return precheck_read(node=node, grid=grid)


def precheck_from_stored(*, node: Node, max_age: timedelta) -> PrecheckReport | None:
    """The precheck on the stored reading when it is at most `max_age` old (capped at
    READING_MAX_AGE_MINUTES); None when it is older, or there is none."""
    limit = min(max_age, reading_max_age())
    read_at = node.prechecked_at or node.seen_at
    used = node.used
    if used is None or read_at is None or timezone.now() - read_at > limit:
        return None
    policy = policy_for_node(node)
    live = node_stored_reading(node, used=used)
    closed = closure_of(node)
    result = free_slices_precheck(node, live, policy, closure=closed)
    return PrecheckReport(
        node_id=node.grid_id,
        capacity=live,
        precheck=result,
        policy=policy,
        checked_at=read_at,
        read_now=False,
        closure=closed,
    )


def precheck_store(*, node: Node, reading: LiveReading, policy: capacity.Policy) -> capacity.Precheck:
    """Precheck the node's free slices on `reading`, store the reading and refresh the node's figures.

    The stored placeable/phantom are figures.services.figures' (the same precheck, on the stored reading);
    the verdicts returned are for the report. `node` is refreshed from what was stored.
    """
    live = reading.live
    result = free_slices_precheck(node, live, policy, closure=closure_of(node, live=live))
    with node_writes([node.pk]):
        readings_store([reading])
    node.refresh_from_db()
    return result


def free_slices_precheck(
    node: Node, live: NodeCapacity, policy: capacity.Policy, *, closure: capacity.Closure | None
) -> capacity.Precheck:
    """The node's free slices, by index, placed one after another on `live` (a reading just taken, or the
    stored one): the one precheck of the report, whichever reading it stands on."""
    free = [(s.index, s.size) for s in node.slices.filter(state=Slice.State.FREE).order_by("index")]
    facts = node_live_facts(node, policy, used_sru=live.used.sru)
    return capacity.precheck(free, live.total, live.used, policy, live=facts, closure=closure)


def node_live_facts(node: Node, policy: capacity.Policy, *, used_sru: int | None) -> capacity.LiveNode:
    """Its pools, the VMs it holds (by the catalog, in slice order) and what refusals taught."""
    occupied = [s.size.resources for s in node.slices.filter(state__in=Slice.OCCUPIED_STATES).order_by("index")]
    return capacity.live_node(
        policy=policy,
        pools=node.pools,
        occupied=occupied,
        observed=node.observed_on(used_sru),
        pools_used=capacity.pools_used_agreeing(node.pools_used, used_sru, cache=node.zos_cache),
        cache=node.zos_cache,
        light=bool(node.light),
    )
