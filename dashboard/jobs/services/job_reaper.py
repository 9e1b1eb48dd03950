"""The reaper (Celery beat, every JOB_REAP_EVERY s): fail the jobs nobody will finish, resend lost messages.

The life of a job is jobs.services.jobs; this is what keeps it honest when a worker dies or a broker
forgets: every update here is conditional on what was read, so a heartbeat that lands meanwhile wins.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from dashboard.jobs.kinds import kind_of
from dashboard.jobs.services.jobs import (
    heartbeat_cutoff,
    job_close,
    job_enqueue,
)
from dashboard.models import Job, WaveRun

log = logging.getLogger(__name__)

WAITING_APPROVAL = WaveRun.State.AWAITING_APPROVAL


def jobs_reap(now: datetime | None = None) -> int:
    """Fail the jobs nobody will finish; returns how many.

    - running, with no heartbeat for JOB_HEARTBEAT_TIMEOUT: the worker died or hangs. The error
      says what the kind leaves behind (its declaration's `when_lost`), and a kind that can tell
      what the dead run had committed keeps that as the result (`kept_when_lost`: a bulk run's
      nodes re-registered so far), instead of an empty one;
    - queued for JOB_QUEUED_TIMEOUT (default 15 minutes) without a worker taking it;
    and sends again the message of a job queued for JOB_RESEND_AFTER (a broker may have lost it).
    Each update is conditional on what was read, so a heartbeat that lands meanwhile wins.
    """
    now = now or timezone.now()
    reaped = 0
    cutoff = heartbeat_cutoff(now)
    for job in (
        Job.objects.filter(state=Job.State.RUNNING)
        .filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
        .select_related("node", "requested_by")
    ):
        since = job.heartbeat_at or job.started_at or job.created_at
        age = int((now - since).total_seconds())
        error = (
            f"worker lost: no heartbeat since {since:%Y-%m-%d %H:%M:%S} UTC ({age} s ago, limit "
            f"{settings.JOB_HEARTBEAT_TIMEOUT} s); the worker was stopped or crashed"
        )
        declared = kind_of(job.kind)
        kept = None
        if declared is not None:
            error += f"; {declared.when_lost}" if declared.when_lost else ""
            kept = declared.kept_when_lost(job) if declared.kept_when_lost else None
            if kept is not None:
                error += f"; {kept.sentence()}"
        still = Q(heartbeat_at=job.heartbeat_at) if job.heartbeat_at else Q(heartbeat_at__isnull=True)
        if job_close(job, state=Job.State.FAILED, error=error, result=kept, attempts=job.attempts, extra=still):
            reaped += 1
    queued_timeout = settings.JOB_QUEUED_TIMEOUT
    resend_after = settings.JOB_RESEND_AFTER
    for job in (
        Job.objects.filter(state=Job.State.QUEUED, created_at__lt=now - timedelta(seconds=queued_timeout))
        # A bulk run waiting for a second admin is not a lost one; once approved, it is queued from then.
        .exclude(wave_run__state=WAITING_APPROVAL)
        .exclude(wave_run__approved_at__gte=now - timedelta(seconds=queued_timeout))
        .select_related("node", "requested_by")
    ):
        error = (
            f"never started: queued at {job.created_at:%Y-%m-%d %H:%M:%S} UTC and no worker took it within "
            f"{queued_timeout} s, though its message was re-sent every {resend_after} s; "
            "is a Celery worker consuming this broker?"
        )
        if job_close(job, state=Job.State.FAILED, error=error, from_states=(Job.State.QUEUED,)):
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
    for job in (
        Job.objects.filter(state=Job.State.QUEUED)
        .filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff))
        .exclude(wave_run__state=WAITING_APPROVAL)  # its message is sent by the approval
        .only("pk", "heartbeat_at")
    ):
        still = Q(heartbeat_at=job.heartbeat_at) if job.heartbeat_at else Q(heartbeat_at__isnull=True)
        if Job.objects.filter(still, pk=job.pk, state=Job.State.QUEUED).update(heartbeat_at=now):
            log.warning("reaper: job %s still queued after %s s; its message is sent again", job.pk, after)
            job_enqueue(job.pk)
            sent += 1
    return sent
