"""Reads for the jobs pages and the node page's job history; a fixed number of queries each."""

from __future__ import annotations

from django.db.models import QuerySet

from dashboard.models import Job, Node


def jobs_list(*, state: str | None = None, kind: str | None = None, node_id: int | None = None) -> QuerySet[Job]:
    """All jobs, newest first, with who asked and which node (joined, not one query per row)."""
    jobs = Job.objects.select_related("node", "requested_by").order_by("-created_at", "-pk")
    if state:
        jobs = jobs.filter(state=state)
    if kind:
        jobs = jobs.filter(kind=kind)
    if node_id is not None:
        jobs = jobs.filter(node__node_id=node_id)
    return jobs


def job_detail(*, job_id: int) -> Job:
    """One job with its node and requester; Job.DoesNotExist when absent."""
    return Job.objects.select_related("node", "requested_by").get(pk=job_id)


def node_jobs(*, node: Node, limit: int = 10) -> list[Job]:
    return list(Job.objects.filter(node=node).select_related("requested_by").order_by("-created_at", "-pk")[:limit])


def node_active_job(*, node: Node) -> Job | None:
    return Job.objects.filter(node=node, state__in=Job.ACTIVE_STATES).select_related("requested_by", "node").first()


def bulk_active_job() -> Job | None:
    return (
        Job.objects.filter(kind=Job.Kind.BULK_REREGISTER, state__in=Job.ACTIVE_STATES)
        .select_related("requested_by")
        .first()
    )
