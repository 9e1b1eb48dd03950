"""Adding whole farms (or a list of node ids) from the grid: read by pages, one commit per page.

New nodes are registered through catalog.node_register with the chosen policy; nodes already
known get their capacity reading refreshed and their figures (stale, placeable, phantom)
recomputed, and are never carved again. Each page is one transaction, so a read that fails on
page 3 leaves pages 1 and 2 committed and consistent; the run stops there and says so, and
running it again reads everything again: known nodes are refreshed, the rest are registered.

The reading has two ages, both kept on the node: when it was read (seen_at) and when the node
last reported to the grid (reported_at, the proxy's updatedAt).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone as dt_timezone

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from dashboard import capacity
from dashboard.grid.deadline import grid_step_deadline
from dashboard.grid.paging import PageRead, ReadFailed, farm_pages, id_pages
from dashboard.grid.types import NODE_STATUSES, Grid, GridError, NodeCapacity
from dashboard.models import AuditEvent, Node
from dashboard.services.catalog import (
    CatalogError,
    NodeAlreadyRegistered,
    carve_memoised,
    node_register,
    policy_book,
    policy_named,
)
from dashboard.services.figures import figures_refresh, nodes_lock

# Nodes listed by id in a result; the counts cover all of them (a result of 10,000 rows helps nobody).
LISTED = 200
# The reading columns a refresh writes on a known node. Its catalog and pools are left alone:
# pools given by hand at registration are better than nothing the proxy says.
READING_FIELDS = (
    "farm_name", "twin_id", "status", "dedicated", "rented_by_twin_id", "country", "city",
    "total_cru", "total_mru", "total_sru", "total_hru",
    "used_cru", "used_mru", "used_sru", "used_hru", "seen_at", "reported_at", "updated_at",
)  # fmt: skip


class OnboardError(ValueError):
    """The request itself is wrong (no farm and no node, an unknown policy or status)."""


@dataclass(frozen=True)
class OnboardRequest:
    farm_ids: tuple[int, ...] = ()
    node_ids: tuple[int, ...] = ()
    status: str | None = None  # only nodes the grid reports with this status
    policy: str | None = None  # for new nodes; default: each node's effective policy
    dry_run: bool = False

    def __post_init__(self) -> None:
        if not self.farm_ids and not self.node_ids:
            raise OnboardError("give at least one farm id or node id")
        for what, ids in (("farm id", self.farm_ids), ("node id", self.node_ids)):
            for value in ids:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise OnboardError(f"{what} {value!r} is not a whole number above zero")
        if self.status is not None and self.status not in NODE_STATUSES:
            raise OnboardError(f"status must be one of {', '.join(NODE_STATUSES)}, not {self.status!r}")
        if self.policy:
            try:
                policy_named(self.policy)
            except capacity.PolicyError as exc:
                raise OnboardError(str(exc)) from None

    def as_parameters(self) -> dict:
        return {"farm_ids": list(self.farm_ids), "node_ids": list(self.node_ids), "status": self.status,
                "policy": self.policy}  # fmt: skip

    @classmethod
    def from_parameters(cls, parameters: dict, *, dry_run: bool) -> OnboardRequest:
        return cls(farm_ids=tuple(parameters.get("farm_ids") or ()), node_ids=tuple(parameters.get("node_ids") or ()),
                   status=parameters.get("status"), policy=parameters.get("policy") or None, dry_run=dry_run)  # fmt: skip

    def words(self) -> str:
        parts = []
        if self.farm_ids:
            parts.append(f"farm{'s' if len(self.farm_ids) > 1 else ''} {', '.join(map(str, self.farm_ids))}")
        if self.node_ids:
            shown = ", ".join(map(str, self.node_ids[:10])) + (" …" if len(self.node_ids) > 10 else "")
            parts.append(f"node{'s' if len(self.node_ids) > 1 else ''} {shown}")
        return " and ".join(parts) + (f" ({self.status} only)" if self.status else "")


@dataclass
class OnboardResult:
    """What a run did (or, in a dry run, would do); the job's result, read back by the pages."""

    dry_run: bool = False
    finished: bool = False  # False: a read failed, `stopped` says where; running it again finishes
    stopped: str = ""
    reads: int = 0  # pages read, and nodes read one by one
    requests: int = 0
    registered: int = 0  # new nodes (would be, in a dry run)
    refreshed: int = 0  # known nodes whose reading was written
    changed: int = 0  # of those, how many reported other capacity or status than stored
    deployable: int = 0  # slices the new nodes' catalogs hold (would hold)
    new_nodes: list[dict] = field(default_factory=list)  # the first LISTED: node_id, farm_id, deployable, policy
    skipped: list[list[str]] = field(default_factory=list)  # malformed entries: [label, reason]
    skipped_total: int = 0
    not_found: list[int] = field(default_factory=list)
    left_out: list[list] = field(default_factory=list)  # [node_id, why]: wrong status, unreadable, refused
    pages_done: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict) -> OnboardResult:
        return cls(**{k: v for k, v in (data or {}).items() if k in cls.__dataclass_fields__})

    @property
    def nodes_read(self) -> int:
        return self.registered + self.refreshed

    def words(self) -> str:
        verb = "would register" if self.dry_run else "registered"
        text = (f"{verb} {self.registered} new node(s) with {self.deployable} deployable slice(s); "
                f"{'would refresh' if self.dry_run else 'refreshed'} {self.refreshed} known node(s)"
                f"{f' ({self.changed} changed)' if self.changed else ''}; {self.reads} read(s), {self.requests} request(s)")  # fmt: skip
        if self.skipped_total:
            text += f"; {self.skipped_total} malformed entr{'y' if self.skipped_total == 1 else 'ies'} skipped"
        if self.not_found:
            text += f"; {len(self.not_found)} id(s) not on the grid"
        if self.left_out:
            text += f"; {len(self.left_out)} left out"
        if not self.finished:
            text += f". Stopped at {self.stopped}; run it again to finish the rest (what was read is committed)"
        return text


class OnboardStopped(Exception):
    """A read failed part-way; every page before it is committed. `result` says how far it got."""

    def __init__(self, result: OnboardResult):
        super().__init__(result.words())
        self.result = result


Progress = Callable[[OnboardResult, str], None]


def grid_onboard(
    *, request: OnboardRequest, grid: Grid, by=None, source: str = "command", origin: str = "",
    progress: Progress | None = None, reads: Iterator[PageRead] | None = None,
) -> OnboardResult:  # fmt: skip
    """Read the farms and ids of `request` page by page and register or refresh what they hold.

    Raises OnboardStopped when a read fails; what was read before it is committed (not in a dry run).
    """
    result = OnboardResult(dry_run=request.dry_run)
    seen: set[int] = set()
    reads = reads if reads is not None else _reads(request, grid)
    while True:
        what = _next_read_words(result, request)
        try:
            with grid_step_deadline(settings.GRID_STEP_DEADLINE):
                read = next(reads, None)
        except ReadFailed as exc:
            result.stopped = str(exc)  # names the page, e.g. "page 3 of farm 4242: ..."
            _audit_run(result, request=request, by=by, source=source, origin=origin)
            raise OnboardStopped(result) from exc
        except GridError as exc:  # a read source of someone else's making (tests, a caller's own pages)
            result.stopped = f"{what}: {exc or type(exc).__name__}"
            _audit_run(result, request=request, by=by, source=source, origin=origin)
            raise OnboardStopped(result) from exc
        if read is None:
            break
        fresh = tuple(n for n in read.nodes if n.node_id not in seen)
        seen.update(n.node_id for n in fresh)
        page_apply(fresh, request=request, result=result, by=by, source=source, origin=origin)
        _count_read(result, read)
        if progress is not None:
            progress(result, read.what)
    result.finished = True
    _audit_run(result, request=request, by=by, source=source, origin=origin)
    return result


def _reads(request: OnboardRequest, grid: Grid) -> Iterator[PageRead]:
    size = settings.GRID_PAGE_SIZE
    seen: set[int] = set()
    if request.farm_ids:
        for read in farm_pages(grid, farm_ids=request.farm_ids, status=request.status, size=size):
            seen.update(n.node_id for n in read.nodes)
            yield read
    rest = [n for n in request.node_ids if n not in seen]
    if rest:
        yield from id_pages(grid, node_ids=rest, status=request.status, size=size)


def _next_read_words(result: OnboardResult, request: OnboardRequest) -> str:
    return f"read {result.reads + 1} ({request.words()}), after {len(result.pages_done)} read(s) were committed"


def _count_read(result: OnboardResult, read: PageRead) -> None:
    result.reads += 1
    result.requests += read.requests
    result.pages_done.append(read.what)
    del result.pages_done[:-LISTED]
    result.skipped_total += len(read.skipped)
    room = LISTED - len(result.skipped)
    result.skipped.extend([label, reason] for label, reason in read.skipped[: max(room, 0)])
    result.not_found.extend(read.not_found)
    result.left_out.extend([node_id, why] for node_id, why in read.left_out)


# --- one page, one transaction ---------------------------------------------------------------


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
        result.left_out.append([live.node_id, "registered meanwhile by someone else; refreshed on the next run"])
        return
    except (CatalogError, capacity.CapacityError) as exc:
        result.left_out.append([live.node_id, f"not registered: {exc}"])
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
            result.left_out.append([live.node_id, f"would not be registered: {exc}"])
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
    stored = {row[0]: row[1:] for row in Node.objects.filter(pk__in=pks).values_list("node_id", *READING_FIELDS[:15])}
    rows = []
    for live in reread:
        values = _reading_values(live, now=now)
        if tuple(values[:15]) != tuple(stored.get(live.node_id, ())):
            result.changed += 1
        rows.append((*values, known[live.node_id]))
    result.refreshed += len(reread)
    if not write:
        return
    # One parametrised UPDATE per node, pipelined (as services.figures stores figures): bulk_update's
    # CASE WHEN statements cost far more to build than to run.
    table = connection.ops.quote_name(Node._meta.db_table)
    columns = ", ".join(f"{connection.ops.quote_name(name)} = %s" for name in READING_FIELDS)
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE {table} SET {columns} WHERE id = %s", rows)
    # A new total, status or used capacity moves stale, deployable, placeable and phantom.
    figures_refresh(pks)


def _reading_values(live: NodeCapacity, *, now: datetime) -> tuple:
    total, used = live.total, live.used
    return (live.farm_name, live.twin_id, live.status, live.dedicated, live.rented_by_twin_id, live.country, live.city,
            total.cru, total.mru, total.sru, total.hru, used.cru, used.mru, used.sru, used.hru,
            now, reported_at(live), now)  # fmt: skip


def reported_at(live: NodeCapacity) -> datetime | None:
    """The node's last report to the grid (updatedAt, unix seconds) as a time; None when unknown."""
    if not live.updated_at:
        return None
    try:
        return datetime.fromtimestamp(live.updated_at, tz=dt_timezone.utc)
    except (OverflowError, OSError, ValueError):  # an absurd timestamp is no report time
        return None


def _audit_run(result: OnboardResult, *, request: OnboardRequest, by, source: str, origin: str) -> None:
    """One event for the run (each new node has its own from node_register)."""
    if request.dry_run:
        return
    AuditEvent.objects.create(
        actor=by, source=source, action="nodes onboarded" if result.finished else "nodes onboarded (stopped)",
        message=f"{request.words()}: {result.words()}",
        detail={"origin": origin, "request": request.as_parameters(), "registered": result.registered,
                "refreshed": result.refreshed, "reads": result.reads, "stopped": result.stopped},
    )  # fmt: skip


# --- the job ---------------------------------------------------------------------------------


def onboard_job(*, job) -> dict:
    """The worker's side of a Job of kind onboard: progress after every committed read."""
    from dashboard.grid import get_grid
    from dashboard.services.jobs import JobError, job_beating, job_progress, job_succeed

    try:
        request = OnboardRequest.from_parameters(job.parameters or {}, dry_run=job.dry_run)
    except OnboardError as exc:
        raise JobError(f"cannot add these nodes: {exc}") from None
    job_progress(job=job, step=f"reading {request.words()} from the grid")

    def progress(result: OnboardResult, what: str) -> None:
        job_progress(job=job, step=f"{what} done: {result.nodes_read} node(s) so far", done=result.nodes_read)

    try:
        with job_beating(job=job):
            result = grid_onboard(request=request, grid=get_grid(), by=job.requested_by, source=job.source,
                                  origin=f"job {job.pk}", progress=progress)  # fmt: skip
    except OnboardStopped as stopped:
        raise JobError(stopped.result.words(), result=stopped.result.as_dict()) from None
    with transaction.atomic():
        job_succeed(job=job, result=result.as_dict(), message=f"{request.words()}: {result.words()}")
    return result.as_dict()


__all__ = ["OnboardError", "OnboardRequest", "OnboardResult", "OnboardStopped", "grid_onboard", "onboard_job", "page_apply", "reported_at"]
