"""Long operations run by a worker: the life of a job, from the request to its result or its reaping.

What the jobs do is elsewhere: re-registering one node or every stale one is
services.reregister, a precheck is services.deploy.precheck_run (node_precheck_job here).

The life of a job, and what keeps it honest when a worker dies:

- `job_request` inserts the Job in one transaction. The partial unique constraints
  (one_active_job_per_node, one_active_bulk_job,
  one_active_simulate_job, one_active_onboard_job) refuse a second active job even under a
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

Test-only hook: with settings.DEBUG on, JOB_TEST_PAUSE="<point>:<seconds>[:<n>]" makes the worker
sleep at a named point, or only the n-th time it gets there (`job_test_pause`; services.reregister
names "claimed", "planned", and "swapped", the last one INSIDE a transaction that writes
catalogs, after its writes: one node's, or a bulk batch's) and, if JOB_TEST_PAUSE_MARKER names
a file, write the point's name to it first. tests/test_jobs_kill.py uses it to SIGKILL a worker
at those points.
"""

from __future__ import annotations

import getpass
import logging
import os
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

from django.conf import settings
from django.db import IntegrityError, connection, connections, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from dashboard import capacity
from dashboard.grid.deadline import grid_step_deadline
from dashboard.grid.types import GridError
from dashboard.models import AuditEvent, Job, Node

log = logging.getLogger(__name__)

# A queued job no worker took within this long is failed by the reaper (settings.JOB_QUEUED_TIMEOUT
# overrides it). It must outlast a worker busy with a full-length job (CELERY_TASK_TIME_LIMIT,
# 11 minutes by default), so a healthy but busy worker does not lose requests.
DEFAULT_QUEUED_TIMEOUT = 15 * 60
# A job still queued this long has its message sent again (settings.JOB_RESEND_AFTER overrides it).
DEFAULT_RESEND_AFTER = 120
# A job whose worker died this many times is not tried again: something in it kills workers.
DEFAULT_MAX_ATTEMPTS = 3


class JobError(Exception):
    """A job that cannot be requested, run or finished; the message is for the person who asked."""

    def __init__(self, message: str, *, result: dict | None = None):
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
    source: str = "web",
    dry_run: bool = False,
    parameters: dict | None = None,
) -> JobRequest:
    """Queue a job, or return the one already active for the same node (or the active bulk job).

    One transaction inserts the Job and its audit event; the Celery message is sent on commit
    with the job id as its task id. Bad input raises JobError and writes nothing.
    """
    _job_request_validate(kind=kind, node=node, farm_id=farm_id, by=by, source=source, dry_run=dry_run,
                          parameters=parameters)
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
                        parameters=parameters or {},
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


def _job_request_validate(*, kind, node, farm_id, by, source, dry_run, parameters) -> None:
    if kind not in Job.Kind.values:
        raise JobError(f"unknown job kind {kind!r}; use one of: {', '.join(Job.Kind.values)}")
    if source not in Job.Source.values:
        raise JobError(f"unknown source {source!r}; use one of: {', '.join(Job.Source.values)}")
    if kind == Job.Kind.BULK_REREGISTER:
        if node is not None:
            raise JobError("a bulk re-register covers all stale nodes (or one farm's); it takes no node")
        if farm_id is not None and (isinstance(farm_id, bool) or not isinstance(farm_id, int) or farm_id < 0):
            raise JobError(f"farm id must be a whole number of zero or more, not {farm_id!r}")
    elif kind == Job.Kind.ONBOARD:
        if node is not None or farm_id is not None or not isinstance(parameters, dict):
            raise JobError("adding nodes from the grid takes farm ids or node ids as parameters, no node")
    elif kind == Job.Kind.SIMULATE:
        if node is not None or farm_id is not None or dry_run:
            raise JobError("a simulated month takes its nodes from the candidate policy's scope, and changes nothing")
        if not isinstance(parameters, dict) or not isinstance(parameters.get("candidate"), dict):
            raise JobError("a simulated month needs the candidate policy's parameters")
    else:
        if node is None or getattr(node, "pk", None) is None:
            raise JobError(f"a {Job.Kind(kind).label.lower()} job needs a registered node")
        if farm_id is not None:
            raise JobError("a farm id only applies to a bulk re-register")
    if parameters and kind not in (Job.Kind.SIMULATE, Job.Kind.ONBOARD):
        raise JobError(f"a {Job.Kind(kind).label.lower()} job takes no parameters")
    if dry_run and kind == Job.Kind.PRECHECK:
        raise JobError("a precheck changes no catalog; it has no dry run")
    if by is not None and (not getattr(by, "is_authenticated", False) or getattr(by, "pk", None) is None):
        raise JobError("jobs are requested by a signed-in user (or by nobody, from the command line)")


def _active_job(*, kind: str, node: Node | None) -> Job | None:
    active = Job.objects.filter(state__in=Job.ACTIVE_STATES).select_related("node", "requested_by")
    if node is not None:
        return active.filter(node=node).first()
    return active.filter(kind=kind).first()


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
    # services.reregister builds on this module (progress, ownership, finishing a job), so what a
    # kind runs is imported when a job runs, not when this module loads.
    from dashboard.services.reregister import bulk_reregister, node_reregister
    from dashboard.services.onboarding import onboard_job
    from dashboard.services.simulation import policy_simulate

    try:
        if job.kind == Job.Kind.REREGISTER:
            node_reregister(job=job)
        elif job.kind == Job.Kind.PRECHECK:
            node_precheck_job(job=job)
        elif job.kind == Job.Kind.BULK_REREGISTER:
            bulk_reregister(job=job, stop_on=reraise)
        elif job.kind == Job.Kind.SIMULATE:
            policy_simulate(job=job)
        elif job.kind == Job.Kind.ONBOARD:
            onboard_job(job=job)
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
    """Write the step a person reads and the heartbeat; JobLost if the job is no longer ours.

    In autocommit the page sees it at once; inside a transaction it lands with that transaction's
    writes (and JobLost rolls them back).
    """
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


def job_succeed(*, job: Job, result: dict, message: str) -> None:
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


# --- precheck job -----------------------------------------------------------------------------


def node_precheck_job(*, job: Job) -> dict:
    """Run the live precheck for the job's node and store its report as the result."""
    from dashboard.services.deploy import precheck_run

    if job.node is None:
        raise JobError("this precheck job has no node (was it deleted?)")
    job_progress(job=job, step=f"checking node {job.node.node_id}'s live capacity")
    with grid_step_deadline(settings.GRID_STEP_DEADLINE), job_beating(job=job):
        report = precheck_run(node=job.node)
    result = report.as_dict()
    with transaction.atomic():
        job_succeed(job=job, result=result, message=f"precheck: {getattr(report, 'words', '')}".strip())
    return result


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
    kind = {Job.Kind.REREGISTER: "re-register", Job.Kind.PRECHECK: "precheck", Job.Kind.BULK_REREGISTER: "bulk re-register",
            Job.Kind.SIMULATE: "simulated month", Job.Kind.ONBOARD: "adding nodes from the grid"}
    words = kind.get(job.kind, job.kind)
    if job.dry_run:
        words = f"dry run of {words}"
    if job.node_id is not None and job.node is not None:
        target = f"node {job.node.node_id}"
    elif job.kind == Job.Kind.BULK_REREGISTER:
        target = f"farm {job.farm_id}'s stale nodes" if job.farm_id is not None else "all stale nodes"
    elif job.kind == Job.Kind.SIMULATE:
        target = f"policy {(job.parameters or {}).get('candidate', {}).get('name', '?')}"
    elif job.kind == Job.Kind.ONBOARD:
        asked = job.parameters or {}
        target = ", ".join([*(f"farm {f}" for f in asked.get("farm_ids") or []), *(f"node {n}" for n in (asked.get("node_ids") or [])[:5])])
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


_test_pause_reached: Counter[str] = Counter()


def job_test_pause(point: str) -> None:
    """Sleep at a named point when JOB_TEST_PAUSE says so; inert unless settings.DEBUG (see module doc).

    "<point>:<seconds>:<n>" sleeps only the n-th time this process reaches the point (a bulk
    job's second batch, say); without n, every time.
    """
    raw = os.environ.get("JOB_TEST_PAUSE", "")
    if not raw or not settings.DEBUG:
        return
    name, _, rest = raw.partition(":")
    if name != point:
        return
    seconds, _, nth = rest.partition(":")
    _test_pause_reached[point] += 1
    if nth and _test_pause_reached[point] != int(nth):
        return
    marker = os.environ.get("JOB_TEST_PAUSE_MARKER")
    if marker:
        Path(marker).write_text(point)
    log.warning("JOB_TEST_PAUSE: sleeping %s s at %r", seconds or "60", point)
    time.sleep(float(seconds or 60))
