"""Celery tasks: thin doors onto dashboard.jobs.services.jobs. Names are stable (messages in flight use them).

Delivery: acks_late + reject_on_worker_lost, so a message comes back when the worker dies
mid-task (at once for a killed pool child; after the Redis visibility timeout for a killed
worker process; never on the filesystem broker, where the reaper ends the job instead).
A message that comes back is safe: job_claim only takes a queued job, or a running one whose
heartbeat is stale.

Time limits are explicit. They are enforced by the prefork pool (the default); the solo pool
used by tests cannot interrupt a task, and there the reaper's heartbeat check is the bound.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import task_postrun
from django.conf import settings

from dashboard.alerts.services import alerts
from dashboard.figures.services import farm_totals, snapshots
from dashboard.jobs.services import job_reaper, jobs
from dashboard.jobs.services.grid_requests import grid_requests_store
from dashboard.jobs.services.job_run import job_execute
from dashboard.lessons.services import lesson_evidence
from dashboard.nodes.services import watch, withholds

log = logging.getLogger(__name__)

JOB_SOFT_TIME_LIMIT = settings.CELERY_TASK_SOFT_TIME_LIMIT
JOB_TIME_LIMIT = max(settings.CELERY_TASK_TIME_LIMIT, JOB_SOFT_TIME_LIMIT + 30)


# How many times a message that finds its job running under a live heartbeat looks again later.
REDELIVERY_LOOKS = 3


@task_postrun.connect
def _grid_requests_store(**_kwargs) -> None:
    """A task's Grid Proxy requests go to the /metrics tally when it ends (whatever its outcome)."""
    grid_requests_store()


@shared_task(
    bind=True,
    name="dashboard.job_run",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    soft_time_limit=JOB_SOFT_TIME_LIMIT,
    time_limit=JOB_TIME_LIMIT,
)
def job_run(self, job_id: int) -> None:
    """Claim job `job_id` and run it; a message for a job that is not claimable is dropped."""
    try:
        job_id = int(job_id)
    except (TypeError, ValueError):
        log.error("job_run: %r is not a job id; message dropped", job_id)
        return
    job = jobs.job_claim(job_id=job_id)
    if job is None and jobs.job_is_running(job_id=job_id) and self.request.retries < REDELIVERY_LOOKS:
        # A message back while its job shows a live heartbeat is most often that of a pool child
        # killed mid-job (reject_on_worker_lost requeues it at once). Look again once that
        # heartbeat has gone stale and take the job over, so it finishes instead of being reaped.
        raise self.retry(countdown=settings.JOB_HEARTBEAT_TIMEOUT + 1, max_retries=REDELIVERY_LOOKS)
    if job is None:
        log.info("job %s: not claimable (finished, gone, or running with a live heartbeat); message dropped", job_id)
        return
    log.info("job %s: claimed (%s, attempt %s)", job.pk, job.kind, job.attempts)
    try:
        job_execute(job=job, reraise=(SoftTimeLimitExceeded,))
    except SoftTimeLimitExceeded:
        jobs.job_fail(job=job, error=f"timed out after {JOB_SOFT_TIME_LIMIT} s")
    _snapshot_after(job)


def _snapshot_after(job) -> None:
    """Capacity over time: the figures as the job left them. A snapshot that fails is logged, not the job's failure."""
    try:
        snapshots.snapshot_take(trigger=f"job {job.pk}")
    except Exception:
        log.exception("job %s: the snapshot after it failed", job.pk)


@shared_task(name="dashboard.jobs_reap", ignore_result=True, soft_time_limit=60, time_limit=90, expires=60)
def jobs_reap() -> int:
    """Fail jobs whose worker is gone or that no worker took (beat runs this every JOB_REAP_EVERY s)."""
    return job_reaper.jobs_reap()


@shared_task(name="dashboard.alerts_evaluate", ignore_result=True, soft_time_limit=120, time_limit=150, expires=60)
def alerts_evaluate() -> dict:
    """Evaluate the alert rules, record firing/resolved and deliver the changes (beat: every ALERT_EVERY s).

    Deliveries are bounded by ALERT_DELIVERY_DEADLINE each; one that fails is tried at the next run,
    so this task does not retry itself.
    """
    evaluation = alerts.alerts_evaluate()
    return {
        "fired": len(evaluation.fired),
        "resolved": len(evaluation.resolved),
        "delivered": evaluation.delivered,
        "undelivered": evaluation.undelivered,
    }


@shared_task(name="dashboard.figures_snapshot", ignore_result=True, soft_time_limit=120, time_limit=150, expires=300)
def figures_snapshot() -> int:
    """A snapshot of the fleet's, farms' and nodes' figures, then the thinning (beat: every SNAPSHOT_EVERY s)."""
    return snapshots.snapshot_take_and_thin(trigger="beat").pk


@shared_task(name="dashboard.farm_totals_refresh", ignore_result=True, soft_time_limit=60, time_limit=90, expires=60)
def farm_totals_refresh() -> int:
    """The farms written since their last refresh summed again (figures.services.farm_totals)."""
    return len(farm_totals.farm_totals_refresh())


@shared_task(name="dashboard.catalog_audit", ignore_result=True, soft_time_limit=60, time_limit=90, expires=3600)
def catalog_audit() -> int | None:
    """Queue the scheduled slice audit (beat: every CATALOG_AUDIT_EVERY s); it runs as a job like the others."""
    from dashboard.catalogs.services.catalog_audit import catalog_audit_scheduled

    job = catalog_audit_scheduled()
    return job.pk if job is not None else None


@shared_task(name="dashboard.fleet_watch", ignore_result=True, soft_time_limit=60, time_limit=90, expires=60)
def fleet_watch() -> int:
    """Ask for a fleet watch (beat: every FLEET_WATCH_EVERY s); one still running makes this one a skipped job."""
    return watch.fleet_watch_request(source="beat").pk


@shared_task(
    name="dashboard.memory_lessons_follow", ignore_result=True, soft_time_limit=300, time_limit=360, expires=600
)
def memory_lessons_follow() -> int:
    """Groups whose lesson rests on observations no longer live are fitted again, their nodes' figures
    following (beat: every MEMORY_LESSONS_FOLLOW_EVERY s)."""
    return len(lesson_evidence.memory_lessons_follow())


@shared_task(name="dashboard.withhold_edges", ignore_result=True, soft_time_limit=60, time_limit=90, expires=60)
def withhold_edges() -> int:
    """Nodes whose withhold window opened or ended by itself since the last run: their rows and figures
    follow (beat: every WITHHOLD_EDGES_EVERY s)."""
    return len(withholds.withhold_edges())
