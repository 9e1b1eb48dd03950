"""Bulk re-register: every stale node's catalog (or one farm's), a batch per transaction
(catalogs.services.reregister.bulk)."""

from pydantic import Field

from dashboard.jobs.kinds.declaration import JobKind, JobParameters
from dashboard.jobs.results import BulkResult


class BulkParameters(JobParameters):
    """Waves (catalogs.services.reregister.waves): a canary first (a farm, or a share of the stale nodes), then
    batches; the run pauses itself past its budget of refusals and failures. Any of them asks for waves;
    what is not given comes from the WAVES_* settings."""

    REFUSAL = (
        "a bulk re-register takes waves (true or false), canary_farm (a farm id), canary_share (0-100 percent), "
        "batch_size (1-10000 nodes) and budget (0 or more refusals and failures)"
    )

    waves: bool = False
    canary_farm: int | None = Field(default=None, ge=0, le=2**31 - 1)
    canary_share: int | None = Field(default=None, ge=0, le=100)
    batch_size: int | None = Field(default=None, ge=1, le=10000)
    budget: int | None = Field(default=None, ge=0, le=1_000_000)

    @property
    def in_waves(self) -> bool:
        return self.waves or any(
            value is not None for value in (self.canary_farm, self.canary_share, self.batch_size, self.budget)
        )


def bulk_target(job, asked) -> str:
    target = f"farm {job.farm_id}'s stale nodes" if job.farm_id is not None else "all stale nodes"
    return f"{target}, in waves" if asked is not None and getattr(asked, "in_waves", False) else target


def bulk_kept_when_lost(job) -> BulkResult:
    """What a bulk run whose worker died had committed: each node it re-carved (or found up to date)
    has its audit event, written with its catalog; the failures and the total are its progress.

    Events are counted by node, so a run taken over after a redelivery does not count a node twice.
    """
    applied = job.audit_events.filter(action="job.node-reregistered")
    changed = applied.filter(detail__result__changed=True).values("node").distinct().count()
    handled = applied.values("node").distinct().count()
    stale, failed = job.progress_total, job.progress_failed
    verb = "would have been re-registered" if job.dry_run else "re-registered"
    return BulkResult(
        dry_run=job.dry_run,
        farm_id=job.farm_id,
        stale=stale,
        seen=handled + failed,
        reregistered=changed,
        unchanged=handled - changed,
        failed=failed,
        words=(
            f"{changed} of {stale} stale node(s) {verb} before the worker died; {handled - changed} already up to "
            f"date; {failed} failed; the rest are untouched (run it again: it takes only the nodes still stale)"
        ),
        notes=[f"the worker died after {handled + failed} of {stale} nodes"],
    )


KIND = JobKind(
    value="bulk-reregister",
    label="Bulk re-register",
    result=BulkResult,
    parameters=BulkParameters,
    runner="dashboard.catalogs.services.reregister:bulk_reregister",
    target="fleet",
    describe=bulk_target,
    farm=True,
    takes="a bulk re-register covers all stale nodes (or one farm's); it takes no node",
    one_at_a_time="one_active_bulk_job",
    progress_label="Nodes done",
    counts_failures=True,
    when_lost="",
    kept_when_lost=bulk_kept_when_lost,
    when_failed="dashboard.catalogs.services.waves_ended:waves_stopped",  # a failed run's waves never read running
    background=True,
)
