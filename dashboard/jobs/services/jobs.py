"""Long operations run by a worker: the life of a job, from the request to its result or its reaping.

What the jobs do is elsewhere: each kind is declared once in dashboard.jobs.kinds (what a request
takes, the runner's name, the result, the words), and jobs.services.job_run runs a claimed job through
its declaration. This module imports no runner: they build on it.

The life of a job, and what keeps it honest when a worker dies:

- `job_request` inserts the Job in one transaction. The partial unique constraints (one active job
  per node, and per fleet-wide kind whose declaration says one_at_a_time or per its one_active_per)
  refuse a second active job even under a race; the loser gets the active job back with created=False.
  The Celery message (task id = job id) is sent only after commit, so a worker never looks for a
  row it cannot see.
- The worker claims the job with a conditional UPDATE (queued -> running, attempts + 1).
  `attempts` is the claim's token: every later write (progress, heartbeat, the result) is
  conditional on state=running AND attempts=<token>, so a run that lost its job (reaped, or
  claimed again after a redelivery) can never overwrite what the new owner or the reaper wrote.
- Progress and heartbeat are written in autocommit so the page sees them live; the catalog
  swap and the job's result are ONE short transaction at the end. A worker killed inside it
  leaves the old catalog (PostgreSQL rolls back when the connection drops).
- A redelivered message (Redis visibility timeout, reject_on_worker_lost) re-claims a running
  job only when its heartbeat is older than JOB_HEARTBEAT_TIMEOUT; jobs.services.job_reaper fails
  the jobs nobody will finish (the filesystem broker never redelivers).
"""

from __future__ import annotations

import getpass
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, connections, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from dashboard.access.services.audit_trail import audit_record
from dashboard.jobs.kinds import job_describe, kind_of, kinds
from dashboard.jobs.results import JobResult
from dashboard.jobs.services.grid_requests import grid_requests_store_due
from dashboard.models import ApiToken, Job, Node

log = logging.getLogger(__name__)


class JobError(Exception):
    """A job that cannot be requested, run or finished; the message is for the person who asked."""

    def __init__(self, message: str, *, result: JobResult | None = None):
        super().__init__(message)
        self.result = result


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
    token: ApiToken | None = None,
    source: str = "web",
    dry_run: bool = False,
    parameters: dict | None = None,
    enqueue: bool = True,
) -> JobRequest:
    """Queue a job, or return the one already active for the same node (or the active bulk job).

    What the kind takes is its declaration's (dashboard.jobs.kinds): a node or the fleet, a farm,
    its typed parameters (stored as that model gives them), a dry run. `token` is the API token
    that asked, when one did: it is kept on the job beside its holder (`by`, who must be its user).
    One transaction inserts the Job and its audit event; the Celery message is sent on commit
    with the job id as its task id (not with enqueue=False: a run that waits for an approval is sent
    by it, catalogs.services.reregister.waves). Bad input raises JobError and writes nothing.
    """
    problem = job_request_problem(
        kind=kind, by=by, token=token, source=source, node=node, farm_id=farm_id, dry_run=dry_run, parameters=parameters
    )
    if problem:
        raise JobError(problem)
    asked = kind_of(kind).parameters_checked(parameters)
    requester, requester_detail = _requester(by, source, token)
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
                        requested_token=token,
                        source=source,
                        dry_run=dry_run,
                        parameters=asked.stored(),
                        step="waiting for a worker",
                    )
            except IntegrityError:
                active = _active_job(kind=kind, node=node, asked=asked)
                if active is None:
                    continue
                _request_record(active, created=False, by=by, source=source, requester=requester)
                return JobRequest(job=active, created=False)
            _request_record(job, created=True, by=by, source=source, requester=requester, detail=requester_detail)
            if enqueue:
                transaction.on_commit(partial(job_enqueue, job.pk))
            return JobRequest(job=job, created=True)
    raise JobError("could not queue the job: another job for the same target kept appearing and finishing; try again")


def _request_record(job: Job, *, created: bool, by, source: str, requester: str, detail: dict | None = None) -> None:
    """The request's audit event: the job it queued, or the one already active that it got back."""
    message = (
        f"{job_describe(job)} requested by {requester}"
        if created
        else f"{requester} asked for {job_describe(job)}; already {job.state}: job #{job.pk}"
    )
    action = "job.requested" if created else "job.already-active"
    audit_record(action=action, actor=by, source=source, node=job.node, job=job, message=message, detail=detail)


def job_request_problem(
    *, kind, by, token, source, node=None, farm_id=None, dry_run=False, parameters=None
) -> str | None:
    """What is wrong with the request, if anything: first what every request must be, then what its
    kind's declaration asks of it."""
    if kind_of(kind) is None:
        return f"unknown job kind {kind!r}; use one of: {', '.join(k.value for k in kinds())}"
    if source not in Job.Source.values:
        return f"unknown source {source!r}; use one of: {', '.join(Job.Source.values)}"
    if by is not None and (not getattr(by, "is_authenticated", False) or getattr(by, "pk", None) is None):
        return "jobs are requested by a signed-in user (or by nobody, from the command line)"
    if token is not None and (by is None or token.user_id != by.pk):
        return "a job asked with an API token is asked by the token's holder"
    return kind_of(kind).request_problem(node=node, farm_id=farm_id, dry_run=dry_run, parameters=parameters)


def _active_job(*, kind: str, node: Node | None, asked=None) -> Job | None:
    active = Job.objects.filter(state__in=Job.ACTIVE_STATES).select_related("node", "requested_by")
    if node is not None:
        return active.filter(node=node).first()
    return active.filter(**kind_of(kind).active_alike(asked)).first()


def job_enqueue(job_id: int) -> None:
    """Send the task after commit; a broker that cannot be reached fails the job at once, visibly."""
    # The app start-up made (config/celery.py, loaded with the settings): the product never imports config/.
    from celery import current_app as app

    try:
        # Explicit None: the worker's own limits govern, not this process's (Celery copies the
        # sender's task limits into the message when the task is registered here).
        app.send_task("dashboard.job_run", args=[job_id], task_id=str(job_id), time_limit=None, soft_time_limit=None)
    except Exception as exc:  # whatever the transport raises, the person who asked must see it
        log.exception("job %s: could not send the task to the broker", job_id)
        job = Job.objects.filter(pk=job_id).select_related("node").first()
        if job is not None:
            job_close(
                job,
                state=Job.State.FAILED,
                error=f"could not queue the job: {type(exc).__name__}: {exc}",
                from_states=(Job.State.QUEUED,),
            )


def job_wait(*, job_id: int, timeout: float, poll: float = 0.5, on_step: Callable[[Job], None] | None = None) -> Job:
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
        Q(state=Job.State.RUNNING) & (Q(heartbeat_at__lt=heartbeat_cutoff(now)) | Q(heartbeat_at__isnull=True))
    )
    max_attempts = settings.JOB_MAX_ATTEMPTS
    # A bulk run waiting for a second admin's approval is not claimable (catalogs.services.reregister.waves).
    claimed = (
        Job.objects.filter(claimable, pk=job_id, attempts__lt=max_attempts)
        .exclude(wave_run__state="awaiting")
        .update(
            state=Job.State.RUNNING,
            attempts=F("attempts") + 1,
            started_at=Coalesce("started_at", Value(now)),
            heartbeat_at=now,
            step="starting",
            progress_done=0,
            progress_failed=0,
            error="",
        )
    )
    if claimed:
        return Job.objects.select_related("node", "requested_by").get(pk=job_id)
    job = Job.objects.filter(claimable, pk=job_id, attempts__gte=max_attempts).select_related("node").first()
    if job is not None:
        job_close(
            job,
            state=Job.State.FAILED,
            error=f"gave up after {job.attempts} attempts: the worker running it was lost each time",
            from_states=Job.ACTIVE_STATES,
            attempts=job.attempts,
        )
    return None


def job_is_running(*, job_id: int) -> bool:
    return Job.objects.filter(pk=job_id, state=Job.State.RUNNING).exists()


def job_fail(*, job: Job, error: str, result: JobResult | None = None) -> bool:
    """Record this run's failure; False when the job is no longer this run's to finish."""
    return job_close(job, state=Job.State.FAILED, error=error, result=result, attempts=job.attempts)


def job_progress(
    *, job: Job, step: str, done: int | None = None, total: int | None = None, failed: int | None = None
) -> None:
    """Write the step a person reads (added to job.steps, timed, when its kind changes) and the
    heartbeat; JobLost if the job is no longer ours. In autocommit the page sees it at once; inside
    a transaction it lands with that transaction's writes (and JobLost rolls them back).
    """
    fields: dict[str, Any] = {"step": step[:200], "heartbeat_at": timezone.now()}
    for name, value in (("progress_done", done), ("progress_total", total), ("progress_failed", failed)):
        if value is not None:
            fields[name] = value
    if (steps := job.steps_with(fields["step"], fields["heartbeat_at"])) is not None:
        fields["steps"] = steps
    if not _owned(job).update(**fields):
        raise JobLost(f"job {job.pk} is no longer running under attempt {job.attempts}")
    job.step, job.steps = fields["step"], fields.get("steps", job.steps)
    grid_requests_store_due()


def _owned(job: Job):
    return Job.objects.filter(pk=job.pk, state=Job.State.RUNNING, attempts=job.attempts)


@contextmanager
def job_beating(*, job: Job | None, every: float | None = None) -> Iterator[None]:
    """Keep the job's heartbeat fresh while this thread waits on something slow (a grid read).

    A read that takes longer than JOB_HEARTBEAT_TIMEOUT is slow, not dead: without this the
    reaper would fail the job as "worker lost" while the worker is still reading, and a second
    job for the node could start. The beat runs in its own thread with its own database
    connection; it writes only while this run still owns the job. Inside a transaction it does
    nothing (the job's row may be locked by that transaction: the beat would wait on it for ever).
    """
    beating = _beating.__dict__.setdefault("jobs", set())
    if job is None or connection.in_atomic_block or job.pk in beating:  # nested: the outer beat covers it
        yield
        return
    every = every or max(settings.JOB_HEARTBEAT_TIMEOUT / 4, 0.2)
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(every):
                if not _owned(job).update(heartbeat_at=timezone.now()):
                    return  # no longer ours: the run notices at its next write
        except Exception:  # a beat that fails must not end the job; the reaper judges it
            log.warning("job %s: the heartbeat during a slow read failed", job.pk, exc_info=True)
        finally:
            connections.close_all()  # this thread's own connection

    thread = threading.Thread(target=beat, name=f"job-{job.pk}-heartbeat", daemon=True)
    thread.start()
    beating.add(job.pk)
    try:
        yield
    finally:
        beating.discard(job.pk)
        stop.set()
        thread.join()


# The jobs this thread is already beating for (a bulk run beats once around a batch's reads).
_beating = threading.local()


def job_succeed(*, job: Job, result: JobResult, message: str | None = None) -> None:
    """Inside the caller's transaction: the result lands with the catalog change, or neither does.

    The audit line is `message`, or what the job is and the result's sentence.
    """
    now = timezone.now()
    if not _owned(job).update(
        state=Job.State.SUCCEEDED,
        result=result.stored(),
        error="",
        step="done",
        progress_done=F("progress_total"),
        heartbeat_at=now,
        finished_at=now,
    ):
        raise JobLost(f"job {job.pk} is no longer running under attempt {job.attempts}")
    message = message or f"{job_describe(job)}: {result.sentence()}"
    audit_record(
        action="job.succeeded",
        actor=job.requested_by,
        source=job.source,
        node=job.node,
        job=job,
        message=message,
        detail={"result": result.audit_summary()},
    )


def job_close(
    job: Job,
    *,
    state: str,
    error: str,
    result: JobResult | None = None,
    from_states: tuple[str, ...] = (Job.State.RUNNING,),
    attempts: int | None = None,
    extra: Q | None = None,
) -> bool:
    now = timezone.now()
    fields: dict[str, Any] = {"state": state, "error": error, "finished_at": now, "step": "failed"}
    if result is not None:
        fields["result"] = result.stored()
    with transaction.atomic():
        rows = Job.objects.filter(pk=job.pk, state__in=from_states)
        if attempts is not None:
            rows = rows.filter(attempts=attempts)
        if extra is not None:
            rows = rows.filter(extra)
        if not rows.update(**fields):
            return False
        if state == Job.State.FAILED:
            _kind_failed(job)
        audit_record(
            action=f"job.{state}",
            actor=job.requested_by,
            source=job.source,
            node=job.node,
            job=job,
            message=f"{job_describe(job)} {state}: {error}",
            detail={"error": error},
        )
    return True


def _kind_failed(job: Job) -> None:
    """What the job's kind does when one of its jobs fails (its declaration's `when_failed`)."""
    declared = kind_of(job.kind)
    if declared is not None:
        declared.failed(job_id=job.pk)


def heartbeat_cutoff(now: datetime) -> datetime:
    """A running job whose heartbeat is older than this has no live worker."""
    return now - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT)


# --- audit and words --------------------------------------------------------------------------


def _requester(by, source: str, token: ApiToken | None = None) -> tuple[str, dict]:
    """Who asked, in words and for the audit detail (the os user for the command line, the token for the API)."""
    detail: dict[str, Any] = {"source": source, "user": by.get_username() if by is not None else None}
    if token is not None:
        # Who made the token too: an admin may make one in another user's name.
        made_by = token.created_by.get_username() if token.created_by_id and token.created_by else None
        detail["token"] = {"id": token.pk, "prefix": token.prefix, "name": token.name, "made_by": made_by}
        return f"{by.get_username()} with token {token.prefix}… ({token.name}, {source})", detail
    if by is not None:
        return f"{by.get_username()} ({source})", detail
    if source == Job.Source.COMMAND:
        try:
            detail["os_user"] = getpass.getuser()
        except Exception:  # no passwd entry in some containers
            detail["os_user"] = "unknown"
        return f"the command line (os user {detail['os_user']})", detail
    return f"an anonymous caller ({source})", detail
