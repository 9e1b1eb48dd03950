"""Bulk re-register runs made in this process, for the tests of the bulk job and of what it keeps
(tests/jobs/test_jobs_bulk.py, test_reregister_holds.py)."""

from dashboard.catalogs.services.reregister import BulkHooks, BulkLimits
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import Job


def bulk(*, limits: BulkLimits | None = None, hooks: BulkHooks | None = None, **kwargs) -> Job:
    """Request, claim and run a bulk job in this process; `limits` and `hooks` are the run's own seams."""
    job = job_claim(job_id=job_request(kind=Job.Kind.BULK_REREGISTER, **kwargs).job.pk)
    seams = {"limits": limits} if limits else {}
    job_execute(job=job, **seams, **({"hooks": hooks} if hooks else {}))
    job.refresh_from_db()
    return job


# Every node of the run in one batch (a small run is otherwise split so its progress moves).
ONE_BATCH = BulkLimits(progress_steps=1)


def planned(meanwhile: dict) -> tuple[BulkHooks, list[int]]:
    """Hooks that do meanwhile[node_id](node) right after that node's first plan, and the node ids
    planned, in order."""
    seen: list[int] = []

    def plan_made(node):
        if node.grid_id not in seen and node.grid_id in meanwhile:
            meanwhile[node.grid_id](node)
        seen.append(node.grid_id)

    return BulkHooks(planned=plan_made), seen
