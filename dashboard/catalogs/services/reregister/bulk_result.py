"""A bulk re-register's result as it grows: the counts, the fleet's figures summed, failures and a sample.

Kept apart from the run (catalogs.services.reregister.bulk) so the run reads as what it does, batch by batch.
"""

from __future__ import annotations

from django.conf import settings

from dashboard.jobs.results import BulkNode, BulkResult, Failure, Figures, FleetFigures
from dashboard.models import Job


def bulk_result_new(*, job: Job, total: int) -> BulkResult:
    # The handled nodes' figures summed before and after start at zero (a node's may be unknown).
    zero = Figures(slices=0, free=0, deployable=0, placeable=0, phantom=0)
    return BulkResult(
        dry_run=job.dry_run, farm_id=job.farm_id, stale=total, fleet=FleetFigures(before=zero, after=zero.model_copy())
    )


def bulk_count_node(result: BulkResult, summary: BulkNode, *, sample: int) -> None:
    """Add one handled node to the counts; its summary is kept only while the sample has room."""
    result.seen += 1
    result.slices.removed += summary.removed
    result.slices.added += summary.added
    result.slices.kept += summary.kept
    for total, node in ((result.fleet.before, summary.before), (result.fleet.after, summary.after)):
        for figure in Figures.model_fields:
            setattr(total, figure, (getattr(total, figure) or 0) + (getattr(node, figure) or 0))
    if not summary.changed:
        result.unchanged += 1
        return
    result.reregistered += 1
    result.nodes_total += 1
    if len(result.nodes) < sample:
        result.nodes.append(summary)
    else:
        result.nodes_truncated = True


def bulk_count_failure(result: BulkResult, *, node_id: int, error: str, kept: int) -> None:
    result.seen += 1
    result.failed += 1
    if len(result.failures) < kept:
        result.failures.append(Failure(node_id=node_id, error=error))
    else:
        result.failures_more += 1


def bulk_words(result: BulkResult, *, job: Job, total: int) -> None:
    verb = "would re-register" if job.dry_run else "re-registered"
    result.reads = (
        f"read from the grid in {result.pages} page(s)"
        + (f" ({result.pages_failed} failed)" if result.pages_failed else "")
        + f" and {result.read_alone} node(s) on their own"
        + (
            f"; {result.reread} plan(s) read again, their reading past {settings.BULK_READING_MAX_AGE} s"
            if result.reread
            else ""
        )
    )
    result.words = (
        f"{verb} {result.reregistered} of {total} stale node(s); {result.unchanged} already up to date; "
        f"{result.failed} failed"
    )
