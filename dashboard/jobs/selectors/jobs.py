"""Reads for the jobs pages and the node page's job history; a fixed number of queries each."""

from __future__ import annotations

from django.db.models import F, Func, JSONField, Q, QuerySet

from dashboard.jobs.kinds import kinds
from dashboard.models import AuditEvent, Job, Node

# Keys of a result whose size follows the fleet (a bulk job's node sample and failures: each kind's
# result model says which, LIST_LEAVES_OUT); the jobs list never reads them, so PostgreSQL leaves
# them out before sending the row. Per kind: the same key may be a list in one kind's result and a
# count in another's (a bulk job's `nodes` sample, a fleet watch's `nodes` read).
_LIST_DROPS = {kind.value: sorted(kind.result.LIST_LEAVES_OUT) for kind in kinds() if kind.result.LIST_LEAVES_OUT}


def _sql_text(value: str) -> str:
    # Constants from the job kinds' declarations, never input; quoted all the same.
    return "'" + value.replace("'", "''") + "'"


class _ResultBrief(Func):
    """The job's result without its kind's keys in _LIST_DROPS: `CASE kind WHEN ... THEN result - ARRAY[...]`."""

    template = (
        "(CASE %(kind)s "
        + " ".join(
            f"WHEN {_sql_text(kind)} THEN %(expressions)s - ARRAY[{', '.join(map(_sql_text, keys))}]::text[]"
            for kind, keys in sorted(_LIST_DROPS.items())
        )
        + " ELSE %(expressions)s END)"
    )
    output_field = JSONField()

    def __init__(self, expression, **extra):
        super().__init__(expression, kind='"dashboard_job"."kind"', **extra)


def jobs_list(*, state: str | None = None, kind: str | None = None, node_id: int | None = None) -> QuerySet[Job]:
    """All jobs, newest first, with who asked and which node (joined, not one query per row).

    `result` is deferred: each row has `result_brief`, the result without its fleet-sized lists,
    so a page of jobs costs the same after a 10,000-node bulk job as after a 10-node one.
    """
    jobs = (
        Job.objects.select_related("node", "requested_by", "requested_token")
        .defer("result")
        .annotate(result_brief=_ResultBrief(F("result")))
        .order_by("-created_at", "-pk")
    )
    if state:
        jobs = jobs.filter(state=state)
    if kind:
        jobs = jobs.filter(kind=kind)
    if node_id is not None:
        jobs = jobs.filter(node__grid_id=node_id)
    return jobs


def job_detail(*, job_id: int) -> Job:
    """One job with its node and requester; Job.DoesNotExist when absent."""
    return Job.objects.select_related("node", "requested_by", "requested_token").get(pk=job_id)


def node_jobs(*, node: Node, limit: int = 10) -> list[Job]:
    """The node's own jobs and the bulk jobs that re-registered it (found by their per-node audit
    event), newest first; one query, only the results' brief form read."""
    bulk = AuditEvent.objects.filter(node=node, action="job.node-reregistered").values("job_id")
    return list(
        Job.objects.filter(Q(node=node) | Q(pk__in=bulk))
        .select_related("requested_by")
        .defer("result")
        .annotate(result_brief=_ResultBrief(F("result")))  # a precheck's state badge reads its status
        .order_by("-created_at", "-pk")[:limit]
    )


def node_active_job(*, node: Node) -> Job | None:
    return Job.objects.filter(node=node, state__in=Job.ACTIVE_STATES).select_related("requested_by", "node").first()


def bulk_active_job() -> Job | None:
    return (
        Job.objects.filter(kind=Job.Kind.BULK_REREGISTER, state__in=Job.ACTIVE_STATES)
        .select_related("requested_by")
        .first()
    )
