"""Long operations run by a worker: re-register a node, precheck it, re-register every stale node.

The life of a job, and what keeps it honest when a worker dies:

- `job_request` inserts the Job in one transaction. The partial unique constraints
  (one_active_job_per_node, one_active_bulk_job) refuse a second active job even under a
  race; the loser gets the active job back with created=False. The Celery message (task id
  = job id) is sent only after commit, so a worker never looks for a row it cannot see.
- The worker claims the job with a conditional UPDATE (queued -> running, attempts + 1).
  `attempts` is the claim's token: every later write (progress, heartbeat, the result) is
  conditional on state=running AND attempts=<token>, so a run that lost its job (reaped, or
  claimed again after a redelivery) can never overwrite what the new owner or the reaper wrote.
- Progress and heartbeat are written in autocommit so the page sees them live; the catalog
  swap and the job's result are ONE short transaction at the end. A worker killed inside it
  leaves the old catalog (PostgreSQL rolls back when the connection drops).
- A redelivered message (Redis visibility timeout, reject_on_worker_lost) re-claims a running
  job only when its heartbeat is older than JOB_HEARTBEAT_TIMEOUT; `jobs_reap` fails the jobs
  nobody will finish (the filesystem broker never redelivers).

Re-registering a node (`node_reregister`):

- Rented and deployed slices are someone's VM: never deleted, never resized; their sizes are
  counted as occupied when carving.
- Free slices and "failed" ones are replaceable. A "failed" slice holds no VM (its deploy did
  not happen), so it is treated like a free one: removed, and replaced by a fresh free slice
  when the carve has room. It is never kept as "identical", so a second run is a no-op.
- Free slices already of the carved size are kept as they are (same rows, same indices):
  running twice changes nothing the second time ("already up to date").
- A free slice whose deploy is in flight (a "deploying" Deployment younger than
  services.deploy.IN_FLIGHT) is about to hold a VM: kept and counted as occupied. The final
  transaction, holding every slice row's lock, re-checks that no slice it deletes has a deploy
  started meanwhile (slice_deploy records its attempt under that same lock).
- New slices get indices after the highest kept one.
- The final transaction checks that the node's catalog_generation and its slice rows are
  exactly what the plan was made from; otherwise it fails with CATALOG_CHANGED and writes nothing.

Test-only hook: with settings.DEBUG on, JOB_TEST_PAUSE="<point>:<seconds>" makes the worker
sleep at a named point ("claimed", "planned", or "swapped", the last one INSIDE the final
transaction after the catalog writes) and, if JOB_TEST_PAUSE_MARKER names a file, write the
point's name to it first. tests/test_jobs_kill.py uses it to SIGKILL a worker at those points.
"""

from __future__ import annotations

import getpass
import logging
import os
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from dashboard import capacity
from dashboard.grid import get_grid
from dashboard.grid.types import Grid, GridError, GridUnavailable, MalformedPayload, NodeCapacity
from dashboard.models import AuditEvent, Job, Node, Slice

log = logging.getLogger(__name__)

CATALOG_CHANGED = "the catalog changed while re-registering; try again"
# Reading live capacity: the Grid Proxy client already retries each request; these are whole
# reads, for a grid that is briefly unreachable (a restart, a load balancer flip).
GRID_READ_ATTEMPTS = 3
# A queued job no worker took within this long is failed by the reaper (settings.JOB_QUEUED_TIMEOUT
# overrides it). It must outlast a worker busy with a full-length job (CELERY_TASK_TIME_LIMIT,
# 11 minutes by default), so a healthy but busy worker does not lose requests.
DEFAULT_QUEUED_TIMEOUT = 15 * 60
# A job still queued this long has its message sent again (settings.JOB_RESEND_AFTER overrides it).
DEFAULT_RESEND_AFTER = 120
# A job whose worker died this many times is not tried again: something in it kills workers.
DEFAULT_MAX_ATTEMPTS = 3
# Bulk runs load this many nodes (with their slices and policies) per round of queries.
BULK_CHUNK = 100
# Bulk runs stop when this many nodes in a row could not be read because the grid is unreachable:
# going on would only spend the time limit on timeouts.
BULK_GRID_DOWN_AFTER = 5
# A bulk result keeps counts and totals, every failure up to BULK_FAILURES_KEPT, and the first
# BULK_SAMPLE changed nodes: its size (the worker's memory, the job page) must not grow with the
# fleet. Each node's own detail is in its AuditEvent ("job.node-reregistered"), written with its catalog.
BULK_SAMPLE = 100
BULK_FAILURES_KEPT = 1000
SLICE_ORDER = ("index",)


class JobError(Exception):
    """A job that cannot be requested, run or finished; the message is for the person who asked."""

    def __init__(self, message: str, *, result: dict | None = None):
        super().__init__(message)
        self.result = result


class CatalogChanged(JobError):
    def __init__(self, message: str = CATALOG_CHANGED):
        super().__init__(message)


class JobLost(Exception):
    """This run no longer owns the job (reaped, or re-claimed after a redelivery); it must stop quietly."""


@dataclass(frozen=True)
class JobRequest:
    job: Job
    created: bool


# --- requesting -----------------------------------------------------------------------------


def job_request(
    *,
    kind: str,
    node: Node | None = None,
    farm_id: int | None = None,
    by=None,
    source: str = "web",
    dry_run: bool = False,
) -> JobRequest:
    """Queue a job, or return the one already active for the same node (or the active bulk job).

    One transaction inserts the Job and its audit event; the Celery message is sent on commit
    with the job id as its task id. Bad input raises JobError and writes nothing.
    """
    _job_request_validate(kind=kind, node=node, farm_id=farm_id, by=by, source=source, dry_run=dry_run)
    requester = _requester_words(by, source)
    # The unique index refuses our insert while another job is active; if that job finishes
    # between our insert and our look-up, there is nothing to return, so try once more.
    for _ in range(3):
        with transaction.atomic():
            try:
                with transaction.atomic():
                    job = Job.objects.create(
                        kind=kind,
                        node=node,
                        farm_id=farm_id,
                        requested_by=by,
                        source=source,
                        dry_run=dry_run,
                        step="waiting for a worker",
                    )
            except IntegrityError:
                active = _active_job(kind=kind, node=node)
                if active is None:
                    continue
                _audit(
                    job=active,
                    action="job.already-active",
                    actor=by,
                    source=source,
                    message=f"{requester} asked for {_job_words(active)}; already {active.state}: job #{active.pk}",
                )
                return JobRequest(job=active, created=False)
            _audit(
                job=job,
                action="job.requested",
                actor=by,
                source=source,
                message=f"{_job_words(job)} requested by {requester}",
                detail=_requester_detail(by, source),
            )
            transaction.on_commit(partial(_job_enqueue, job.pk))
            return JobRequest(job=job, created=True)
    raise JobError("could not queue the job: another job for the same target kept appearing and finishing; try again")


def _job_request_validate(*, kind, node, farm_id, by, source, dry_run) -> None:
    if kind not in Job.Kind.values:
        raise JobError(f"unknown job kind {kind!r}; use one of: {', '.join(Job.Kind.values)}")
    if source not in Job.Source.values:
        raise JobError(f"unknown source {source!r}; use one of: {', '.join(Job.Source.values)}")
    if kind == Job.Kind.BULK_REREGISTER:
        if node is not None:
            raise JobError("a bulk re-register covers all stale nodes (or one farm's); it takes no node")
        if farm_id is not None and (isinstance(farm_id, bool) or not isinstance(farm_id, int) or farm_id < 0):
            raise JobError(f"farm id must be a whole number of zero or more, not {farm_id!r}")
    else:
        if node is None or getattr(node, "pk", None) is None:
            raise JobError(f"a {Job.Kind(kind).label.lower()} job needs a registered node")
        if farm_id is not None:
            raise JobError("a farm id only applies to a bulk re-register")
    if dry_run and kind == Job.Kind.PRECHECK:
        raise JobError("a precheck changes no catalog; it has no dry run")
    if by is not None and (not getattr(by, "is_authenticated", False) or getattr(by, "pk", None) is None):
        raise JobError("jobs are requested by a signed-in user (or by nobody, from the command line)")


def _active_job(*, kind: str, node: Node | None) -> Job | None:
    active = Job.objects.filter(state__in=Job.ACTIVE_STATES).select_related("node", "requested_by")
    if node is not None:
        return active.filter(node=node).first()
    return active.filter(kind=Job.Kind.BULK_REREGISTER).first()


def _job_enqueue(job_id: int) -> None:
    """Send the task after commit; a broker that cannot be reached fails the job at once, visibly."""
    from dashboard.celery import app

    try:
        # Explicit None: the worker's own limits govern, not this process's (Celery copies the
        # sender's task limits into the message when the task is registered here).
        app.send_task("dashboard.job_run", args=[job_id], task_id=str(job_id), time_limit=None, soft_time_limit=None)
    except Exception as exc:  # whatever the transport raises, the person who asked must see it
        log.exception("job %s: could not send the task to the broker", job_id)
        job = Job.objects.filter(pk=job_id).select_related("node").first()
        if job is not None:
            _job_close(job, state=Job.State.FAILED, error=f"could not queue the job: {type(exc).__name__}: {exc}",
                       from_states=(Job.State.QUEUED,))


def job_wait(
    *, job_id: int, timeout: float, poll: float = 0.5, on_step: Callable[[Job], None] | None = None
) -> Job:
    """Read the job row until it is finished or `timeout` seconds passed; returns the last row read.

    `on_step` is called with the row each time its step text changes while it is active (the
    commands print it). Reading only: the job keeps running when this gives up.
    """
    deadline = time.monotonic() + timeout
    last_step = None
    while True:
        job = Job.objects.select_related("node", "requested_by").get(pk=job_id)
        if on_step is not None and job.is_active and job.step != last_step:
            on_step(job)
            last_step = job.step
        if not job.is_active or time.monotonic() >= deadline:
            return job
        time.sleep(min(poll, max(deadline - time.monotonic(), 0.01)))


# --- claiming, progress, finishing ------------------------------------------------------------


def job_claim(*, job_id: int, now: datetime | None = None) -> Job | None:
    """Take a queued job (or a running one whose worker is gone) for this run; None when not ours.

    The conditional UPDATE is the lock: of two deliveries of one message, one changes the row
    and the other sees 0 rows and drops the message.
    """
    now = now or timezone.now()
    claimable = Q(state=Job.State.QUEUED) | (
        Q(state=Job.State.RUNNING) & (Q(heartbeat_at__lt=_heartbeat_cutoff(now)) | Q(heartbeat_at__isnull=True))
    )
    max_attempts = getattr(settings, "JOB_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)
    claimed = Job.objects.filter(claimable, pk=job_id, attempts__lt=max_attempts).update(
        state=Job.State.RUNNING,
        attempts=F("attempts") + 1,
        started_at=Coalesce("started_at", Value(now)),
        heartbeat_at=now,
        step="starting",
        progress_done=0,
        error="",
    )
    if claimed:
        return Job.objects.select_related("node", "requested_by").get(pk=job_id)
    job = Job.objects.filter(claimable, pk=job_id, attempts__gte=max_attempts).select_related("node").first()
    if job is not None:
        _job_close(
            job,
            state=Job.State.FAILED,
            error=f"gave up after {job.attempts} attempts: the worker running it was lost each time",
            from_states=Job.ACTIVE_STATES,
            attempts=job.attempts,
        )
    return None


def job_is_running(*, job_id: int) -> bool:
    return Job.objects.filter(pk=job_id, state=Job.State.RUNNING).exists()


def job_execute(*, job: Job, reraise: tuple[type[BaseException], ...] = ()) -> None:
    """Run a claimed job to its end: succeeded with a result, or failed with a reason a person can read.

    `reraise` lets the caller handle some exceptions itself (the Celery task passes its soft
    time limit, which would otherwise be reported as an internal error).
    """
    try:
        if job.kind == Job.Kind.REREGISTER:
            node_reregister(job=job)
        elif job.kind == Job.Kind.PRECHECK:
            node_precheck_job(job=job)
        elif job.kind == Job.Kind.BULK_REREGISTER:
            bulk_reregister(job=job, stop_on=reraise)
        else:
            raise JobError(f"unknown job kind {job.kind!r}")
    except reraise:
        raise
    except JobLost as exc:
        log.warning("job %s: %s; this run stops without writing", job.pk, exc)
    except JobError as exc:
        job_fail(job=job, error=str(exc), result=exc.result)
    except GridError as exc:
        # The grid's own words, verbatim: support staff search for them.
        job_fail(job=job, error=str(exc) or type(exc).__name__)
    except capacity.CapacityError as exc:
        job_fail(job=job, error=str(exc))
    except Exception as exc:
        log.exception("job %s (%s) failed unexpectedly", job.pk, job.kind)
        _connection_reset_if_broken()
        job_fail(job=job, error=f"internal error: {type(exc).__name__}: {exc}")


def _connection_reset_if_broken() -> None:
    """A connection that broke outside a transaction (PostgreSQL restarted, the session was killed)
    stays broken in autocommit until someone closes it; close it so recording the failure reconnects."""
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()


def job_fail(*, job: Job, error: str, result: dict | None = None) -> bool:
    """Record this run's failure; False when the job is no longer this run's to finish."""
    return _job_close(job, state=Job.State.FAILED, error=error, result=result, attempts=job.attempts)


def job_progress(*, job: Job, step: str, done: int | None = None, total: int | None = None) -> None:
    """Write the step a person reads and the heartbeat, in autocommit; JobLost if the job is no longer ours."""
    fields: dict[str, Any] = {"step": step[:200], "heartbeat_at": timezone.now()}
    if done is not None:
        fields["progress_done"] = done
    if total is not None:
        fields["progress_total"] = total
    if not _owned(job).update(**fields):
        raise JobLost(f"job {job.pk} is no longer running under attempt {job.attempts}")
    job.step = fields["step"]


def _owned(job: Job):
    return Job.objects.filter(pk=job.pk, state=Job.State.RUNNING, attempts=job.attempts)


def _job_succeed(job: Job, *, result: dict, message: str) -> None:
    """Inside the caller's transaction: the result lands with the catalog change, or neither does."""
    now = timezone.now()
    if not _owned(job).update(
        state=Job.State.SUCCEEDED,
        result=result,
        error="",
        step="done",
        progress_done=F("progress_total"),
        heartbeat_at=now,
        finished_at=now,
    ):
        raise JobLost(f"job {job.pk} is no longer running under attempt {job.attempts}")
    _audit(job=job, action="job.succeeded", actor=job.requested_by, source=job.source, message=message,
           detail={"result": _audit_summary(result)})


def _job_close(
    job: Job,
    *,
    state: str,
    error: str,
    result: dict | None = None,
    from_states: tuple[str, ...] = (Job.State.RUNNING,),
    attempts: int | None = None,
    extra: Q | None = None,
) -> bool:
    now = timezone.now()
    fields: dict[str, Any] = {"state": state, "error": error, "finished_at": now, "step": "failed"}
    if result is not None:
        fields["result"] = result
    with transaction.atomic():
        rows = Job.objects.filter(pk=job.pk, state__in=from_states)
        if attempts is not None:
            rows = rows.filter(attempts=attempts)
        if extra is not None:
            rows = rows.filter(extra)
        if not rows.update(**fields):
            return False
        _audit(job=job, action=f"job.{state}", actor=job.requested_by, source=job.source,
               message=f"{_job_words(job)} {state}: {error}", detail={"error": error})
    return True


# --- re-registering one node ----------------------------------------------------------------


@dataclass
class ReregisterPlan:
    """What re-registering one node would do, computed outside any transaction."""

    node: Node
    generation: int
    policy: capacity.Policy
    seen: NodeCapacity
    carve: capacity.Carve
    snapshot: dict[int, tuple]  # slice pk -> (index, cru, mru, sru, state) as the plan read them
    deploying: frozenset[int]  # slice pks with a deploy in flight when the plan was made
    occupied: list[Slice]
    kept: list[Slice]
    removed: list[Slice]
    added: list[Slice]  # unsaved
    before: dict
    after: dict
    phantom_after: int
    placeable_after: int
    carved_slice_sru: int
    notes: list[str] = field(default_factory=list)

    @property
    def changes_slices(self) -> bool:
        return bool(self.removed or self.added)

    @property
    def changes_metadata(self) -> bool:
        n = self.node
        return (n.carved_policy_name, n.carved_policy_version, n.carved_slice_sru, n.carved_deployable) != (
            self.policy.name,
            self.policy.version,
            self.carved_slice_sru,
            self.carve.slices,
        )

    def result(self, *, dry_run: bool) -> dict:
        up_to_date = not self.changes_slices and not self.changes_metadata
        notes = list(self.notes)
        if up_to_date:
            notes.insert(0, "already up to date: the catalog is what the policy carves; nothing changed")
        elif not self.changes_slices:
            notes.insert(0, f"the slices were already right; recorded them as carved by policy {self.policy.name} v{self.policy.version}")
        return {
            "node_id": self.node.node_id,
            "dry_run": dry_run,
            "changed": not up_to_date,
            "up_to_date": up_to_date,
            "policy": {"name": self.policy.name, "version": self.policy.version},
            "slice": {"cru": self.carve.slice.cru, "mru": self.carve.slice.mru, "sru": self.carve.slice.sru},
            "limited_by": self.carve.limited_by,
            "generation": {
                "before": self.generation,
                "after": self.generation + (1 if self.changes_slices and not dry_run else 0),
            },
            "capacity_seen": self.seen.as_dict(),
            "before": self.before,
            "after": self.after,
            "removed": [_slice_item(s) for s in self.removed],
            "added": [_slice_item(s) for s in self.added],
            "kept": [_slice_item(s) for s in self.kept],
            "notes": notes,
        }


def node_reregister(*, job: Job) -> dict:
    """Re-carve the job's node with its effective policy; returns (and stores) the result.

    Reads live capacity, marks phantom slices, carves counting rented and deployed slices as
    occupied, then swaps the free slices and finishes the job in one short transaction.
    With job.dry_run the same result is recorded and no catalog or node row changes.
    """
    from dashboard.services.catalog import policy_for_node

    node = job.node
    if node is None:
        raise JobError("this re-register job has no node (was it deleted?)")
    _test_pause("claimed")
    grid = get_grid()
    # Three steps the page can draw as a bar: read the grid, carve, save.
    job_progress(job=job, step=f"reading node {node.node_id}'s live capacity from the grid", done=0, total=3)
    seen = node_capacity_read(grid=grid, node_id=node.node_id, job=job, announce=False)
    job_progress(job=job, step=f"carving node {node.node_id}'s catalog", done=1)
    slices = list(Slice.objects.filter(node=node).order_by(*SLICE_ORDER))
    plan = reregister_plan(
        node=node, slices=slices, policy=policy_for_node(node), seen=seen,
        deploying=deploying_slices([node.pk]).get(node.pk, set()),
    )
    _test_pause("planned")
    job_progress(job=job, step="saving the new catalog" if not job.dry_run else "recording the preview", done=2)
    result = reregister_apply(plan=plan, job=job, dry_run=job.dry_run, finish=True)
    return result


def node_capacity_read(*, grid: Grid, node_id: int, job: Job | None = None, announce: bool = True) -> NodeCapacity:
    """The node's live capacity, retried (bounded, with back-off) while the grid is unreachable.

    With a job, every attempt after the first writes the step and heartbeat (so the reaper never
    takes a slow grid for a dead worker); `announce` also writes the first one.
    """
    for attempt in range(1, GRID_READ_ATTEMPTS + 1):
        if job is not None and (announce or attempt > 1):
            suffix = f" (grid unreachable, attempt {attempt} of {GRID_READ_ATTEMPTS})" if attempt > 1 else ""
            job_progress(job=job, step=f"reading node {node_id}'s live capacity from the grid{suffix}")
        try:
            seen = grid.node(node_id)
        except GridUnavailable:
            if attempt == GRID_READ_ATTEMPTS:
                raise
            time.sleep(settings.GRID_BACKOFF * 2 ** (attempt - 1))
            continue
        if seen.node_id != node_id:
            raise MalformedPayload(f"asked the grid for node {node_id}, it answered for node {seen.node_id}")
        return seen
    raise AssertionError("unreachable")  # pragma: no cover


def reregister_plan(
    *,
    node: Node,
    slices: list[Slice],
    policy: capacity.Policy,
    seen: NodeCapacity,
    deploying: frozenset[int] | set[int] = frozenset(),
) -> ReregisterPlan:
    """The diff that re-carving `node` on the capacity `seen` would make; pure apart from building Slice objects.

    `deploying` holds the pks of free slices whose deploy is in flight (slice_deploy records the
    attempt, then asks the grid, then marks the slice deployed): they are about to hold a VM, so
    they are kept and counted as occupied, like rented and deployed ones.
    """
    from dashboard.services.catalog import catalog_slices

    if seen.total.mru <= 0 or seen.total.sru <= 0:
        raise JobError(
            f"the grid reports no {'memory' if seen.total.mru <= 0 else 'SSD disk'} for node {node.node_id}; "
            "refusing to re-carve its catalog on that reading"
        )
    slices = sorted(slices, key=lambda s: s.index)
    in_flight = [s for s in slices if not s.is_occupied and s.pk in deploying]
    occupied = sorted([s for s in slices if s.is_occupied] + in_flight, key=lambda s: s.index)
    replaceable = [s for s in slices if not s.is_occupied and s.pk not in deploying]
    free = [s for s in slices if s.state == Slice.State.FREE]
    pools = list(seen.pools_sru) if seen.pools_sru else node.pools_sru
    carve = capacity.carve(seen.total, policy, occupied=[s.size.resources for s in occupied], pools=pools or None)

    same_policy = (node.carved_policy_name, node.carved_policy_version) == (policy.name, policy.version)
    kept_free = [
        s for s in replaceable
        if s.state == Slice.State.FREE and _still_current(s, carve.slice, same_policy, node.carved_slice_sru)
    ][: carve.new_slices]
    kept_ids = {s.pk for s in kept_free}
    removed = [s for s in replaceable if s.pk not in kept_ids]
    kept = sorted(occupied + kept_free, key=lambda s: s.index)
    to_add = carve.new_slices - len(kept_free)
    added: list[Slice] = []
    if to_add > 0:
        start = max((s.index for s in kept), default=-1) + 1
        added = list(
            catalog_slices(
                node=node, carve=replace(carve, new_slices=to_add), start_index=start, generation=node.catalog_generation + 1
            )
        )

    before_check = capacity.precheck([(s.index, s.size) for s in free], seen.total, seen.used, policy)
    after_free = sorted(kept_free + added, key=lambda s: s.index)
    after_check = capacity.precheck([(s.index, s.size) for s in after_free], seen.total, seen.used, policy)
    offline = seen.status in ("down", "standby")
    before = {
        "slices": len(slices),
        "free": len(free),
        "deployable": len(occupied) + (0 if offline else before_check.placeable_now),
        "phantom": len(free) if offline else len(before_check.phantom_slices),
    }
    phantom_after = len(after_free) if offline else len(after_check.phantom_slices)
    placeable_after = 0 if offline else after_check.placeable_now
    after = {
        "slices": len(kept) + len(added),
        "free": len(after_free) + len(in_flight),
        "deployable": len(occupied) + placeable_after,
        "phantom": phantom_after,
    }

    notes = list(carve.notes)
    if in_flight:
        notes.append(
            f"slice(s) {', '.join(str(s.index) for s in in_flight)} are being deployed right now; "
            "kept as they are and counted as occupied"
        )
    failed = [s for s in replaceable if s.state == Slice.State.FAILED]
    if failed:
        notes.append(f"{len(failed)} slice(s) marked failed hold no VM; they were treated like free slices")
    if carve.overcommitted:
        notes.append(
            f"the {len(occupied)} rented/deployed slice(s) alone exceed what node {node.node_id} can host "
            f"under policy {policy.name}; they are kept and no free slice is offered"
        )
    if offline:
        notes.append(f"node {node.node_id} is {seen.status} on the grid: nothing can be placed on it until it is up")
    elif phantom_after:
        notes.append(
            f"{phantom_after} of the new free slices cannot be placed now: the node's live usage is higher "
            "than its catalog accounts for (VMs outside the catalog, or host memory in use)"
        )
    if (seen.total.mru, seen.total.sru) != (node.total_mru, node.total_sru):
        notes.append(
            f"the grid now reports {capacity.format_size(seen.total.mru)} memory and "
            f"{capacity.format_size(seen.total.sru)} SSD (stored: {capacity.format_size(node.total_mru)} and "
            f"{capacity.format_size(node.total_sru)}); carved on what the grid reports"
        )
    return ReregisterPlan(
        node=node,
        generation=node.catalog_generation,
        policy=policy,
        seen=seen,
        carve=carve,
        snapshot={s.pk: _slice_key(s) for s in slices},
        deploying=frozenset(deploying),
        occupied=occupied,
        kept=kept,
        removed=removed,
        added=added,
        before=before,
        after=after,
        phantom_after=phantom_after,
        placeable_after=placeable_after,
        # Kept slices of the size the node was carved with keep that size on record (see _still_current).
        carved_slice_sru=(
            node.carved_slice_sru if any(s.sru != carve.slice.sru for s in kept_free) else carve.slice.sru
        ),
        notes=notes,
    )


def reregister_apply(
    *, plan: ReregisterPlan, job: Job, dry_run: bool, finish: bool, progress: dict | None = None
) -> dict:
    """The one short transaction: check nothing moved, swap the free slices, store the node's figures.

    With finish=True the job's result is written in the same transaction (single-node jobs);
    bulk jobs pass finish=False: the transaction checks they still own the job and writes their
    heartbeat and `progress` (Job fields) with the node's new catalog.
    """
    result = plan.result(dry_run=dry_run)
    node = plan.node
    with transaction.atomic():
        if not dry_run:
            locked = Node.objects.select_for_update().get(pk=node.pk)
            current = {s.pk: _slice_key(s) for s in Slice.objects.select_for_update().filter(node_id=node.pk)}
            if locked.catalog_generation != plan.generation or current != plan.snapshot:
                raise CatalogChanged()
            # slice_deploy records its attempt under the slice's row lock, which we now hold for
            # every slice of the node: a deploy that started since the plan is visible here, and
            # one that starts after our commit finds its slice gone (SliceChanged).
            if deploying_slices([node.pk]).get(node.pk, set()) & {s.pk for s in plan.removed}:
                raise CatalogChanged()
            generation = plan.generation
            if plan.changes_slices:
                generation += 1
                if plan.removed:
                    Slice.objects.filter(pk__in=[s.pk for s in plan.removed]).delete()
                if plan.added:
                    for s in plan.added:
                        s.generation = generation
                    Slice.objects.bulk_create(plan.added)
            seen, now = plan.seen, timezone.now()
            node_fields = {
                "status": seen.status if seen.status in Node.Status.values else Node.Status.UNKNOWN,
                "total_cru": seen.total.cru,
                "total_mru": seen.total.mru,
                "total_sru": seen.total.sru,
                "total_hru": seen.total.hru,
                "used_cru": seen.used.cru,
                "used_mru": seen.used.mru,
                "used_sru": seen.used.sru,
                "used_hru": seen.used.hru,
                "seen_at": now,
                "placeable_now": plan.placeable_after,
                "phantom_slices": plan.phantom_after,
                "prechecked_at": now,
                "carved_policy_name": plan.policy.name,
                "carved_policy_version": plan.policy.version,
                "carved_slice_sru": plan.carved_slice_sru,
                "carved_deployable": plan.carve.slices,
                "catalog_generation": generation,
                "updated_at": now,
            }
            if seen.pools_sru:
                node_fields["pools_sru"] = list(seen.pools_sru)
            Node.objects.filter(pk=node.pk).update(**node_fields)
            _test_pause("swapped")
        if finish:
            _job_succeed(job, result=result, message=_reregister_words(plan, result))
        else:
            if not _owned(job).update(heartbeat_at=timezone.now(), **(progress or {})):
                raise JobLost(f"job {job.pk} is no longer running under attempt {job.attempts}")
            # A bulk result keeps only a sample of its nodes: each node's own line is its audit
            # event, committed with its catalog (and found from the node, the job, or both).
            AuditEvent.objects.create(
                actor_id=job.requested_by_id, source=job.source, action="job.node-reregistered",
                node=node, job=job, message=_reregister_words(plan, result),
                detail={"result": _bulk_node_summary(result) | {"policy": result["policy"], "notes": result["notes"]}},
            )
    return result


def _reregister_words(plan: ReregisterPlan, result: dict) -> str:
    b, a = result["before"], result["after"]
    what = "dry run of re-register" if result["dry_run"] else "re-register"
    if result["up_to_date"]:
        return f"{what} of node {plan.node.node_id}: already up to date ({a['slices']} slices)"
    return (
        f"{what} of node {plan.node.node_id}: {b['slices']} -> {a['slices']} slices "
        f"(removed {len(result['removed'])}, added {len(result['added'])}, kept {len(result['kept'])}; "
        f"policy {plan.policy.name} v{plan.policy.version})"
    )


def _still_current(s: Slice, target: capacity.SliceSize, same_policy: bool, carved_slice_sru: int) -> bool:
    """A free slice worth keeping: of the carved size, or (same policy) of the size the node was carved with.

    The same tolerance as catalog.stale_reason: a deploy changes the rounding of what is left,
    so the carve may now offer a slightly larger disk; replacing every free slice for that
    would churn the catalog after each deploy, and the node is not stale for it either.
    """
    if (s.cru, s.mru) != (target.cru, target.mru):
        return False
    return s.sru == target.sru or (same_policy and s.sru == carved_slice_sru and s.sru <= target.sru)


def _slice_key(s: Slice) -> tuple:
    return (s.index, s.cru, s.mru, s.sru, s.state)


def _slice_item(s: Slice) -> dict:
    return {"index": s.index, "cru": s.cru, "mru": s.mru, "sru": s.sru, "state": s.state}


# --- precheck job -----------------------------------------------------------------------------


def node_precheck_job(*, job: Job) -> dict:
    """Run the live precheck for the job's node and store its report as the result."""
    from dashboard.services.deploy import precheck_run

    if job.node is None:
        raise JobError("this precheck job has no node (was it deleted?)")
    job_progress(job=job, step=f"checking node {job.node.node_id}'s live capacity")
    report = precheck_run(node=job.node)
    result = report.as_dict()
    with transaction.atomic():
        _job_succeed(job, result=result, message=f"precheck: {getattr(report, 'words', '')}".strip())
    return result


# --- bulk re-register -------------------------------------------------------------------------


def bulk_reregister(*, job: Job, stop_on: tuple[type[BaseException], ...] = ()) -> dict:
    """Re-register every stale node (or one farm's), each in its own short transaction.

    A node that fails is recorded in result["failures"] and the rest go on. Stops early (job
    failed, partial result kept) when the grid is unreachable for several nodes in a row.
    `stop_on` exceptions end the run instead of failing one node (the task's soft time limit).

    The result is bounded whatever the fleet: counts, slice and fleet totals, the failures (up to
    BULK_FAILURES_KEPT, then only counted) and the first BULK_SAMPLE changed nodes ("nodes", with
    "nodes_total" and "nodes_truncated"). Each node's own summary is in its audit trail.
    """
    from dashboard.services.catalog import policies_for_nodes

    grid = get_grid()
    job_progress(job=job, step="finding stale catalogs", done=0, total=0)
    stale = stale_node_pks(farm_id=job.farm_id)
    total = len(stale)
    job_progress(job=job, step=f"{total} stale catalog(s) to re-register", done=0, total=total)

    result = _bulk_result_new(job=job, total=total)
    unreachable_in_a_row = 0
    done = 0
    for start in range(0, total, BULK_CHUNK):
        chunk = stale[start : start + BULK_CHUNK]
        nodes = list(Node.objects.filter(pk__in=chunk).order_by("node_id"))
        policies = policies_for_nodes(nodes)
        slices_by_node = _slices_by_node([n.pk for n in nodes])
        deploying = deploying_slices([n.pk for n in nodes])
        for node in nodes:
            # Progress is written with each node's catalog, in its transaction (one UPDATE, live
            # once that node commits); a failed node writes it on its own.
            progress = {"step": f"node {node.node_id} done ({done + 1} of {total})", "progress_done": done + 1}
            try:
                summary = _bulk_one(
                    job=job, grid=grid, node=node, slices=slices_by_node.get(node.pk, []), policy=policies[node.pk],
                    deploying=deploying.get(node.pk, set()), progress=progress,
                )
            except stop_on:
                raise
            except JobLost:
                raise
            except Exception as exc:
                job_progress(job=job, step=f"node {node.node_id} failed ({done + 1} of {total})", done=done + 1)
                if isinstance(exc, (JobError, GridError, capacity.CapacityError)):
                    error = str(exc) or type(exc).__name__
                else:
                    log.exception("bulk job %s: node %s failed unexpectedly", job.pk, node.node_id)
                    error = f"internal error: {type(exc).__name__}: {exc}"
                _bulk_count_failure(result, node_id=node.node_id, error=error)
                unreachable_in_a_row = unreachable_in_a_row + 1 if isinstance(exc, GridUnavailable) else 0
                if unreachable_in_a_row >= BULK_GRID_DOWN_AFTER:
                    result["notes"].append(f"stopped after {done + 1} of {total} nodes")
                    _bulk_words(result, job=job, total=total)
                    raise JobError(
                        f"the grid is unreachable: {unreachable_in_a_row} nodes in a row could not be read "
                        f"(last: {error}); stopped after {done + 1} of {total} nodes, "
                        f"{result['reregistered']} re-registered",
                        result=result,
                    ) from exc
            else:
                unreachable_in_a_row = 0
                _bulk_count_node(result, summary)
            done += 1
    if total == 0:
        result["notes"].append("no stale catalog" + (f" in farm {job.farm_id}" if job.farm_id is not None else ""))
    _bulk_words(result, job=job, total=total)
    with transaction.atomic():
        _job_succeed(job, result=result, message=f"bulk re-register: {result['words']}")
    return result


_FLEET_FIGURES = ("slices", "free", "deployable", "phantom")


def _bulk_result_new(*, job: Job, total: int) -> dict[str, Any]:
    return {
        "dry_run": job.dry_run,
        "farm_id": job.farm_id,
        "stale": total,
        "seen": 0,
        "reregistered": 0,
        "unchanged": 0,
        "failed": 0,
        # Slices over every node handled, and the handled nodes' figures summed before and after.
        "slices": {"removed": 0, "added": 0, "kept": 0},
        "fleet": {"before": dict.fromkeys(_FLEET_FIGURES, 0), "after": dict.fromkeys(_FLEET_FIGURES, 0)},
        "failures": [],
        "failures_more": 0,
        "nodes": [],
        "nodes_total": 0,
        "nodes_truncated": False,
        "notes": [],
    }


def _bulk_count_node(result: dict, summary: dict) -> None:
    """Add one handled node to the counts; its summary is kept only while the sample has room."""
    result["seen"] += 1
    for key in ("removed", "added", "kept"):
        result["slices"][key] += summary[key]
    for when in ("before", "after"):
        for figure in _FLEET_FIGURES:
            result["fleet"][when][figure] += summary[when].get(figure) or 0
    if not summary["changed"]:
        result["unchanged"] += 1
        return
    result["reregistered"] += 1
    result["nodes_total"] += 1
    if len(result["nodes"]) < BULK_SAMPLE:
        result["nodes"].append(summary)
    else:
        result["nodes_truncated"] = True


def _bulk_count_failure(result: dict, *, node_id: int, error: str) -> None:
    result["seen"] += 1
    result["failed"] += 1
    if len(result["failures"]) < BULK_FAILURES_KEPT:
        result["failures"].append({"node_id": node_id, "error": error})
    else:
        result["failures_more"] += 1


def _bulk_words(result: dict, *, job: Job, total: int) -> None:
    verb = "would re-register" if job.dry_run else "re-registered"
    result["words"] = (
        f"{verb} {result['reregistered']} of {total} stale node(s); {result['unchanged']} already up to date; "
        f"{result['failed']} failed"
    )


def _bulk_one(
    *, job: Job, grid: Grid, node: Node, slices: list[Slice], policy: capacity.Policy, deploying: set[int], progress: dict
) -> dict:
    seen = node_capacity_read(grid=grid, node_id=node.node_id, job=job, announce=False)
    plan = reregister_plan(node=node, slices=slices, policy=policy, seen=seen, deploying=deploying)
    try:
        result = reregister_apply(plan=plan, job=job, dry_run=job.dry_run, finish=False, progress=progress)
    except CatalogChanged:
        # Someone deployed or re-registered this node meanwhile: plan once more on what is there now.
        node.refresh_from_db()
        fresh = list(Slice.objects.filter(node=node).order_by(*SLICE_ORDER))
        plan = reregister_plan(
            node=node, slices=fresh, policy=policy, seen=seen, deploying=deploying_slices([node.pk]).get(node.pk, set())
        )
        result = reregister_apply(plan=plan, job=job, dry_run=job.dry_run, finish=False, progress=progress)
    return _bulk_node_summary(result)


def _bulk_node_summary(result: dict) -> dict:
    """One node's line in a bulk result (and in its audit event): figures and counts, no slice lists."""
    return {
        "node_id": result["node_id"],
        "changed": result["changed"],
        "before": result["before"],
        "after": result["after"],
        "removed": len(result["removed"]),
        "added": len(result["added"]),
        "kept": len(result["kept"]),
    }


def stale_node_pks(*, farm_id: int | None = None) -> list[int]:
    """Primary keys of nodes whose stored catalog differs from what their effective policy carves.

    A fixed number of queries per BULK_CHUNK nodes, whatever their slice count.
    """
    from dashboard.services.catalog import catalog_is_stale, policies_for_nodes

    nodes_qs = Node.objects.order_by("node_id")
    if farm_id is not None:
        nodes_qs = nodes_qs.filter(farm_id=farm_id)
    pks = list(nodes_qs.values_list("pk", flat=True))
    stale = []
    for start in range(0, len(pks), BULK_CHUNK):
        nodes = list(Node.objects.filter(pk__in=pks[start : start + BULK_CHUNK]).order_by("node_id"))
        policies = policies_for_nodes(nodes)
        slices_by_node = _slices_by_node([n.pk for n in nodes])
        for node in nodes:
            occupied = [s.size.resources for s in slices_by_node.get(node.pk, []) if s.is_occupied]
            free = [s.size for s in slices_by_node.get(node.pk, []) if s.state == Slice.State.FREE]
            is_stale, _reason = catalog_is_stale(node, policies[node.pk], occupied=occupied, free=free)
            if is_stale:
                stale.append(node.pk)
    return stale


def deploying_slices(node_pks: list[int]) -> dict[int, set[int]]:
    """Node pk -> pks of its slices with a deploy in flight (a "deploying" Deployment younger than
    services.deploy.IN_FLIGHT; an older one is a process that died and the slice is free again)."""
    from dashboard.models import Deployment
    from dashboard.services.deploy import IN_FLIGHT

    rows = Deployment.objects.filter(
        node_id__in=node_pks,
        state=Deployment.State.DEPLOYING,
        started_at__gte=timezone.now() - IN_FLIGHT,
        slice__isnull=False,
    ).values_list("node_id", "slice_id")
    by_node: dict[int, set[int]] = {}
    for node_pk, slice_pk in rows:
        by_node.setdefault(node_pk, set()).add(slice_pk)
    return by_node


def _slices_by_node(node_pks: list[int]) -> dict[int, list[Slice]]:
    by_node: dict[int, list[Slice]] = {}
    for s in Slice.objects.filter(node_id__in=node_pks).order_by("node_id", "index"):
        by_node.setdefault(s.node_id, []).append(s)
    return by_node


# --- the reaper -------------------------------------------------------------------------------


def jobs_reap(now: datetime | None = None) -> int:
    """Fail the jobs nobody will finish; returns how many.

    - running, with no heartbeat for JOB_HEARTBEAT_TIMEOUT: the worker died or hangs;
    - queued for JOB_QUEUED_TIMEOUT (default 15 minutes) without a worker taking it;
    and sends again the message of a job queued for JOB_RESEND_AFTER (a broker may have lost it).
    Each update is conditional on what was read, so a heartbeat that lands meanwhile wins.
    """
    now = now or timezone.now()
    reaped = 0
    cutoff = _heartbeat_cutoff(now)
    for job in Job.objects.filter(state=Job.State.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True)
    ).select_related("node", "requested_by"):
        since = job.heartbeat_at or job.started_at or job.created_at
        age = int((now - since).total_seconds())
        error = (
            f"worker lost: no heartbeat since {since:%Y-%m-%d %H:%M:%S} UTC ({age} s ago, limit "
            f"{settings.JOB_HEARTBEAT_TIMEOUT} s); the worker was stopped or crashed"
        )
        if job.kind != Job.Kind.BULK_REREGISTER:
            error += "; the catalog was left as it was; try again"
        still = Q(heartbeat_at=job.heartbeat_at) if job.heartbeat_at else Q(heartbeat_at__isnull=True)
        if _job_close(job, state=Job.State.FAILED, error=error, attempts=job.attempts, extra=still):
            reaped += 1
    queued_timeout = getattr(settings, "JOB_QUEUED_TIMEOUT", DEFAULT_QUEUED_TIMEOUT)
    resend_after = getattr(settings, "JOB_RESEND_AFTER", DEFAULT_RESEND_AFTER)
    for job in Job.objects.filter(
        state=Job.State.QUEUED, created_at__lt=now - timedelta(seconds=queued_timeout)
    ).select_related("node", "requested_by"):
        error = (
            f"never started: queued at {job.created_at:%Y-%m-%d %H:%M:%S} UTC and no worker took it within "
            f"{queued_timeout} s, though its message was re-sent every {resend_after} s; "
            "is a Celery worker consuming this broker?"
        )
        if _job_close(job, state=Job.State.FAILED, error=error, from_states=(Job.State.QUEUED,)):
            reaped += 1
    _jobs_resend(now=now, after=resend_after)
    if reaped:
        log.warning("reaper: failed %d job(s) nobody will finish", reaped)
    return reaped


def _jobs_resend(*, now: datetime, after: int) -> int:
    """Send again the message of a job still queued after `after` seconds.

    A broker that restarted without persistence loses the message, and the job would wait
    for the queued time-out while a worker sits idle. A duplicate is harmless: the claim is
    conditional, so the second message of a job already taken is dropped. While a job is
    queued its heartbeat_at records when its message was last sent.
    """
    cutoff = now - timedelta(seconds=after)
    sent = 0
    for job in Job.objects.filter(state=Job.State.QUEUED).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff)
    ).only("pk", "heartbeat_at"):
        still = Q(heartbeat_at=job.heartbeat_at) if job.heartbeat_at else Q(heartbeat_at__isnull=True)
        if Job.objects.filter(still, pk=job.pk, state=Job.State.QUEUED).update(heartbeat_at=now):
            log.warning("reaper: job %s still queued after %s s; its message is sent again", job.pk, after)
            _job_enqueue(job.pk)
            sent += 1
    return sent


def _heartbeat_cutoff(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT)


# --- audit and words --------------------------------------------------------------------------


def _audit(*, job: Job, action: str, actor, source: str, message: str, detail: dict | None = None) -> None:
    AuditEvent.objects.create(
        actor=actor, source=source, action=action, node=job.node, job=job, message=message, detail=detail or {}
    )


def _job_words(job: Job) -> str:
    kind = {Job.Kind.REREGISTER: "re-register", Job.Kind.PRECHECK: "precheck", Job.Kind.BULK_REREGISTER: "bulk re-register"}
    words = kind.get(job.kind, job.kind)
    if job.dry_run:
        words = f"dry run of {words}"
    if job.node_id is not None and job.node is not None:
        target = f"node {job.node.node_id}"
    elif job.kind == Job.Kind.BULK_REREGISTER:
        target = f"farm {job.farm_id}'s stale nodes" if job.farm_id is not None else "all stale nodes"
    else:
        target = "a deleted node"
    return f"{words} of {target} (job #{job.pk})"


def _requester_words(by, source: str) -> str:
    if by is not None:
        return f"{by.get_username()} ({source})"
    if source == Job.Source.COMMAND:
        return f"the command line (os user {_os_user()})"
    return f"an anonymous caller ({source})"


def _requester_detail(by, source: str) -> dict:
    detail: dict[str, Any] = {"source": source, "user": by.get_username() if by is not None else None}
    if source == Job.Source.COMMAND:
        detail["os_user"] = _os_user()
    return detail


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


def _audit_summary(result: dict) -> dict:
    """The result without the long lists, for the audit trail."""
    keep = ("node_id", "dry_run", "changed", "before", "after", "policy", "stale", "seen", "reregistered", "unchanged",
            "failed", "slices", "fleet", "failures", "failures_more", "free_slices", "placeable_now", "phantom_slices",
            "words")
    return {k: result[k] for k in keep if k in result}


# --- test-only pause ----------------------------------------------------------------------------


def _test_pause(point: str) -> None:
    """Sleep at a named point when JOB_TEST_PAUSE says so; inert unless settings.DEBUG (see module doc)."""
    raw = os.environ.get("JOB_TEST_PAUSE", "")
    if not raw or not settings.DEBUG:
        return
    name, _, seconds = raw.partition(":")
    if name != point:
        return
    marker = os.environ.get("JOB_TEST_PAUSE_MARKER")
    if marker:
        Path(marker).write_text(point)
    log.warning("JOB_TEST_PAUSE: sleeping %s s at %r", seconds or "60", point)
    time.sleep(float(seconds or 60))
