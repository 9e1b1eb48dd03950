"""Bulk re-register: every stale node's catalog (or one farm's), a batch per transaction
(services.reregister.bulk)."""

from dashboard.job_kinds.declaration import JobKind
from dashboard.job_results import BulkResult


def bulk_target(job, _asked) -> str:
    return f"farm {job.farm_id}'s stale nodes" if job.farm_id is not None else "all stale nodes"


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
    member="BULK_REREGISTER",
    label="Bulk re-register",
    words="bulk re-register",
    result=BulkResult,
    runner="dashboard.services.reregister:bulk_reregister",
    template="dashboard/job_kinds/bulk_reregister.html",
    target="fleet",
    describe=bulk_target,
    farm=True,
    takes="a bulk re-register covers all stale nodes (or one farm's); it takes no node",
    one_at_a_time="one_active_bulk_job",
    progress_label="Nodes done",
    counts_failures=True,
    when_lost="",
    kept_when_lost=bulk_kept_when_lost,
    background=True,
)
