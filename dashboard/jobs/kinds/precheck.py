"""Precheck: which of a node's free slices can be placed now, from a live reading (catalogs.services.precheck)."""

from typing import ClassVar

from pydantic import Field

from dashboard.jobs.kinds.declaration import JobKind, JobParameters
from dashboard.jobs.results import PrecheckResult


class PrecheckParameters(JobParameters):
    # A stored reading up to this old is answered from instead of reading the grid (catalogs.services.precheck).
    max_age_seconds: int | None = Field(default=None, ge=0)

    REFUSAL: ClassVar[str] = "a precheck takes one parameter, max_age_seconds (a whole number from 0)"


KIND = JobKind(
    value="precheck",
    label="Precheck",
    result=PrecheckResult,
    runner="dashboard.catalogs.services.precheck:precheck_job",
    target="node",
    parameters=PrecheckParameters,
    dry_run=False,
    when_lost="nothing was changed; try again",
)
