"""Rollback of a run: every node a re-register job changed put back as it was, one transaction per node
(catalogs.services.reregister.rollback). A worker runs it, so a run over thousands of nodes outlasts no request."""

from typing import ClassVar

from pydantic import Field

from dashboard.jobs.kinds.declaration import JobKind, JobParameters
from dashboard.jobs.results import RunRollbackResult


class RunRollbackParameters(JobParameters):
    job_id: int = Field(ge=1, le=2**31 - 1)  # the re-register job whose run is rolled back

    REFUSAL: ClassVar[str] = "a rollback takes the re-register job it rolls back (job_id)"


def rollback_target(job, asked: RunRollbackParameters | None) -> str:
    return f"re-register job #{asked.job_id}" if asked is not None else "a re-register job that cannot be read"


KIND = JobKind(
    value="run-rollback",
    label="Rollback",
    result=RunRollbackResult,
    parameters=RunRollbackParameters,
    runner="dashboard.catalogs.services.reregister.rollback:run_rollback_job",
    target="fleet",
    describe=rollback_target,
    dry_run=False,
    takes="a rollback names the re-register job it rolls back (job_id); it takes no node or farm",
    one_active_per="job_id",
    progress_label="Nodes done",
    counts_failures=True,
    when_lost=(
        "the nodes it had rolled back stay rolled back (each in the audit trail); roll the run back again for the rest"
    ),
)
