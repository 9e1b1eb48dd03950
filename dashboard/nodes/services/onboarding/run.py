"""The reads of an onboarding in order, one committed page at a time; where a run stops; the job."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from django.conf import settings
from django.db import transaction

from dashboard.access.services.audit_trail import audit_record
from dashboard.figures.services.farm_totals import farm_totals_deferred
from dashboard.grid import get_grid
from dashboard.grid.paging import PageRead, ReadFailed, farm_pages, id_pages, pages_ahead
from dashboard.grid.types import Grid, GridError
from dashboard.jobs.results import LISTED, OnboardResult
from dashboard.jobs.services.jobs import JobError, job_beating, job_progress, job_succeed
from dashboard.lessons.services.refused_readings import BY_ONBOARDING, readings_refused, refused_by_label
from dashboard.nodes.services.onboarding.apply import OnboardLimit, page_apply
from dashboard.nodes.services.onboarding.request import OnboardError, OnboardRequest, OnboardStopped

Progress = Callable[[OnboardResult, str], None]

# Once page 1 has said how many nodes the farms hold, the pages after it are asked for two at a time:
# read one by one they take the latency times the pages (20 pages of 100 nodes at 100 ms: 2 s and more),
# longer than writing them (issue 43). Each request still asks the shared request budget (grid.budget),
# which holds every process to GRID_RATE_LIMIT a second however many are in flight.
PAGES_IN_FLIGHT = 2


def grid_onboard(
    *,
    request: OnboardRequest,
    grid: Grid,
    by=None,
    source: str = "command",
    origin: str = "",
    progress: Progress | None = None,
    reads: Iterator[PageRead] | None = None,
) -> OnboardResult:
    """Read the farms and ids of `request` page by page and register or refresh what they hold.

    Raises OnboardStopped when a read fails or stops (grid.paging: a repeated page, more nodes than
    the proxy announced, GRID_MAX_PAGES), or when a page would take the new nodes past the limit
    (request.new_nodes_limit(): ONBOARD_MAX_NEW_NODES, or the number an admin confirmed); what was
    read before it is committed (not in a dry run), nothing of the page that stopped it.
    """
    # The farm totals summed once at the end, not after every page (services.farm_totals_deferred).
    with farm_totals_deferred():
        return _onboard(request=request, grid=grid, by=by, source=source, origin=origin, progress=progress, reads=reads)


def _onboard(
    *, request: OnboardRequest, grid: Grid, by, source: str, origin: str, progress: Progress | None, reads
) -> OnboardResult:
    result = OnboardResult(dry_run=request.dry_run)
    seen: set[int] = set()
    # The next page is read while this one is written (grid.paging.pages_ahead: no database there),
    # each read within its own GRID_STEP_DEADLINE.
    reads = pages_ahead(reads if reads is not None else _reads(request, grid), step_seconds=settings.GRID_STEP_DEADLINE)
    while True:
        what = _next_read_words(result, request)
        try:
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
        try:
            page_apply(fresh, request=request, result=result, by=by, source=source, origin=origin)
        except OnboardLimit as exc:
            result.stopped = f"{read.what}: {exc}"
            _audit_run(result, request=request, by=by, source=source, origin=origin)
            raise OnboardStopped(result) from exc
        if not request.dry_run:
            # A known node whose entry was refused keeps its reading, and its page says so.
            readings_refused(refused_by_label(read.skipped), by=BY_ONBOARDING)
        _count_read(result, read)
        if progress is not None:
            progress(result, read.what)
    result.finished = True
    if result.skipped_total and not result.nodes_read and not result.left_out_total:
        # Every node the grid sent was refused: not a run that found nothing, a grid we cannot read.
        result.refused_all = True
        result.stopped = (
            f"every node the grid sent ({result.skipped_total}) was refused; the first: "
            f"{result.skipped[0][0]}: {result.skipped[0][1]}"
        )
        _audit_run(result, request=request, by=by, source=source, origin=origin)
        raise OnboardStopped(result)
    _audit_run(result, request=request, by=by, source=source, origin=origin)
    return result


def _reads(request: OnboardRequest, grid: Grid) -> Iterator[PageRead]:
    size = settings.GRID_PAGE_SIZE
    seen: set[int] = set()
    if request.farm_ids:
        pages = farm_pages(
            grid,
            farm_ids=request.farm_ids,
            status=request.status,
            size=size,
            max_pages=settings.GRID_MAX_PAGES,
            in_flight=PAGES_IN_FLIGHT,
        )
        for read in pages:
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
    result.not_found_total += len(read.not_found)
    result.not_found.extend(read.not_found[: max(LISTED - len(result.not_found), 0)])
    for node_id, why in read.left_out:
        result.leave_out(node_id, why)


def _audit_run(result: OnboardResult, *, request: OnboardRequest, by, source: str, origin: str) -> None:
    """One event for the run (each new node has its own from node_register)."""
    if request.dry_run:
        return
    audit_record(
        actor=by,
        source=source,
        action="nodes onboarded" if result.finished else "nodes onboarded (stopped)",
        message=f"{request.words()}: {result.words()}",
        detail={
            "origin": origin,
            "request": request.as_parameters(),
            "registered": result.registered,
            "refreshed": result.refreshed,
            "reads": result.reads,
            "stopped": result.stopped,
        },
    )


# --- the job ---------------------------------------------------------------------------------


def onboard_job(*, job, stop_on: tuple[type[BaseException], ...] = ()) -> OnboardResult:
    """The worker's side of a Job of kind onboard: progress after every committed read."""
    try:
        request = OnboardRequest.from_parameters(job.asked.model_dump(), dry_run=job.dry_run)
    except OnboardError as exc:
        raise JobError(f"cannot add these nodes: {exc}") from None
    job_progress(job=job, step=f"reading {request.words()} from the grid")

    def progress(result: OnboardResult, what: str) -> None:
        refused = f", {result.skipped_total} could not be read" if result.skipped_total else ""
        job_progress(
            job=job,
            step=f"{what} done: {result.nodes_read} node(s) so far{refused}",
            done=result.nodes_read + result.skipped_total,
            failed=result.skipped_total,
        )

    try:
        with job_beating(job=job):
            result = grid_onboard(
                request=request,
                grid=get_grid(),
                by=job.requested_by,
                source=job.source,
                origin=f"job {job.pk}",
                progress=progress,
            )
    except OnboardStopped as stopped:
        raise JobError(stopped.result.words(), result=stopped.result) from None
    with transaction.atomic():
        job_succeed(job=job, result=result, message=f"{request.words()}: {result.words()}")
    return result
