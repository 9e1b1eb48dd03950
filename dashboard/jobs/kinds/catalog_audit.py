"""The slice audit: every node's catalog against its live contracts and the outcomes reported
(catalogs.services.catalog_audit); a dry run lists, a fix frees orphan slices and counts foreign VMs."""

from typing import ClassVar

from dashboard.jobs.kinds.declaration import JobKind, JobParameters
from dashboard.jobs.results import CatalogAuditResult


class CatalogAuditParameters(JobParameters):
    # The dry run a fix follows: only what that dry run listed (and is found again) is fixed.
    dry_run_job: int | None = None
    # The nodes to audit (grid ids); empty: the whole fleet. A node event ("used-moved") asks for its nodes.
    node_ids: list[int] = []

    REFUSAL: ClassVar[str] = "a slice audit takes the dry run it fixes (dry_run_job), or nothing"


def audit_target(job, asked: CatalogAuditParameters | None) -> str:
    if asked is not None and asked.node_ids:
        shown = ", ".join(str(n) for n in asked.node_ids[:5]) + (" …" if len(asked.node_ids) > 5 else "")
        return f"node{'s' if len(asked.node_ids) > 1 else ''} {shown}"
    return "the whole fleet"


def audit_kept_when_lost(job) -> CatalogAuditResult | None:
    """What a fix whose worker died had done: each fix has its audit event, written with it."""
    fixed = list(
        job.audit_events.filter(action__in=("audit.orphan-freed", "audit.foreign-counted"))
        .order_by("pk")
        .values_list("detail__finding", flat=True)
    )
    if not fixed:
        return None
    return CatalogAuditResult(
        dry_run=False,
        fixed=[key for key in fixed if isinstance(key, str)],
        words=f"fixed {len(fixed)} finding(s) before the worker died (each in the audit trail); run it again",
    )


KIND = JobKind(
    value="catalog-audit",
    label="Slice audit",
    result=CatalogAuditResult,
    runner="dashboard.catalogs.services.catalog_audit:catalog_audit_run",
    target="fleet",
    describe=audit_target,
    parameters=CatalogAuditParameters,
    takes="a slice audit covers the whole fleet; it takes no node or farm",
    one_at_a_time="one_active_catalog_audit_job",
    # Its reads are background work: the request budget keeps GRID_RATE_RESERVE of each second for clicks.
    background=True,
    progress_label="Nodes checked",
    when_lost="what it had fixed is kept, each fix in the audit trail; run it again",
    kept_when_lost=audit_kept_when_lost,
)
