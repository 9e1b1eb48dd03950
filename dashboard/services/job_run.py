"""Running a claimed job of each kind, to a result or a failure a person can read.

services.jobs owns the life of a job (request, claim, progress, finish, reaping); the kinds build
on it, and this module is the one place that knows them all: RUNNERS maps a kind to what runs it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction

from dashboard import capacity
from dashboard.grid.deadline import grid_step_deadline
from dashboard.grid.types import GridError
from dashboard.job_results import PrecheckResult
from dashboard.models import Job
from dashboard.services.jobs import JobError, JobLost, job_beating, job_fail, job_progress, job_succeed
from dashboard.services.onboarding import onboard_job
from dashboard.services.precheck import precheck_answer, precheck_run
from dashboard.services.reregister import bulk_reregister, node_reregister
from dashboard.services.simulation import policy_simulate

log = logging.getLogger(__name__)


def node_precheck_job(*, job: Job, stop_on: tuple[type[BaseException], ...] = ()) -> PrecheckResult:
    """Run the live precheck for the job's node and store its report as the result.

    With parameters {"max_age_seconds": N} a stored reading up to N seconds old is answered from
    (never one past READING_MAX_AGE_MINUTES: that one is read again first; services.precheck).
    """
    if job.node is None:
        raise JobError("this precheck job has no node (was it deleted?)")
    job_progress(job=job, step=f"checking node {job.node.grid_id}'s live capacity")
    max_age = (job.parameters or {}).get("max_age_seconds")
    with grid_step_deadline(settings.GRID_STEP_DEADLINE), job_beating(job=job):
        if max_age is None:
            report = precheck_run(node=job.node)
        else:
            report = precheck_answer(node=job.node, max_age=timedelta(seconds=max_age))
    result = PrecheckResult.model_validate(report.as_dict())
    with transaction.atomic():
        job_succeed(job=job, result=result)
    return result


# kind -> runner(job=, stop_on=): each finishes its job itself (job_succeed in its last transaction)
# or raises; `stop_on` are the exceptions the caller handles (the task's soft time limit).
RUNNERS: dict[str, Callable[..., object]] = {
    Job.Kind.REREGISTER: lambda *, job, stop_on: node_reregister(job=job),
    Job.Kind.PRECHECK: node_precheck_job,
    Job.Kind.BULK_REREGISTER: bulk_reregister,
    Job.Kind.SIMULATE: lambda *, job, stop_on: policy_simulate(job=job),
    Job.Kind.ONBOARD: lambda *, job, stop_on: onboard_job(job=job),
}


def job_execute(*, job: Job, reraise: tuple[type[BaseException], ...] = ()) -> None:
    """Run a claimed job to its end: succeeded with a result, or failed with a reason a person can read.

    `reraise` lets the caller handle some exceptions itself (the Celery task passes its soft
    time limit, which would otherwise be reported as an internal error).
    """
    try:
        runner = RUNNERS.get(job.kind)
        if runner is None:
            raise JobError(f"unknown job kind {job.kind!r}")
        runner(job=job, stop_on=reraise)
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
