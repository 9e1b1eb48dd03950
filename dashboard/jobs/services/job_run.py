"""Running a claimed job of any kind, to a result or a failure a person can read.

jobs.services.jobs owns the life of a job (request, claim, progress, finish, reaping); what runs each
kind is named by its declaration (dashboard.jobs.kinds: `runner`), resolved on first use.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext

from django.db import connection

from dashboard import capacity
from dashboard.grid.budget import background
from dashboard.grid.types import GridError
from dashboard.jobs.kinds import ParametersUnreadable, kind_of
from dashboard.jobs.services.jobs import JobError, JobLost, job_fail
from dashboard.models import Job

log = logging.getLogger(__name__)


def job_execute(*, job: Job, reraise: tuple[type[BaseException], ...] = (), **options) -> None:
    """Run a claimed job to its end: succeeded with a result, or failed with a reason a person can read.

    `reraise` lets the caller handle some exceptions itself (the Celery task passes its soft
    time limit, which would otherwise be reported as an internal error). `options` go to the
    kind's runner as they are: the seams a runner offers (a bulk run's `hooks` and `limits`,
    catalogs.services.reregister.bulk), for tests and for callers that run a job in their own way.
    """
    try:
        declared = kind_of(job.kind)
        if declared is None:
            raise JobError(f"unknown job kind {job.kind!r}")
        # Background kinds (the watch, bulk jobs) leave the request budget's reserve to interactive work.
        with background() if declared.background else nullcontext():
            declared.run(job=job, stop_on=reraise, **options)
    except reraise:
        raise
    except JobLost as exc:
        log.warning("job %s: %s; this run stops without writing", job.pk, exc)
    except ParametersUnreadable as exc:
        job_fail(job=job, error=str(exc))
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
