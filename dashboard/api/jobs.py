"""GET /api/v1/jobs: the jobs list, as the Jobs page reads it; GET /api/v1/jobs/{id}/waves: a re-register's waves."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404
from ninja import Field, Query, Router, Schema

from dashboard.api.auth import READ
from dashboard.api.inputs import Counting, Whole
from dashboard.api.schemas import ErrorOut, JobsPageOut, WavesOut
from dashboard.models import Job
from dashboard.selectors.jobs import jobs_list
from dashboard.selectors.waves import waves_view

router = Router(tags=["jobs"])


class JobsFilter(Schema):
    state: Job.State | None = None
    kind: Job.Kind | None = None
    node_id: Whole | None = None
    page: Counting = 1
    per_page: int = Field(50, ge=1, le=500)


def job_out(job: Job) -> dict:
    return {
        "id": job.pk,
        "kind": job.kind,
        "state": job.state,
        "node_id": job.node.grid_id if job.node_id else None,
        "farm_id": job.farm_id,
        "source": job.source,
        "dry_run": job.dry_run,
        "step": job.step,
        "progress_done": job.progress_done,
        "progress_total": job.progress_total,
        "requested_by": job.requested_by.get_username() if job.requested_by_id else None,
        "requested_token": (
            {"prefix": job.requested_token.prefix, "name": job.requested_token.name} if job.requested_token_id else None
        ),
        "target": job.target,
        "described": job.described,
        "attempts": job.attempts,
        "error": job.error,
        "summary": outcome.sentence() if (outcome := job.outcome) is not None else "",
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


@router.get("/jobs", auth=READ, response={200: JobsPageOut, 401: ErrorOut, 403: ErrorOut}, summary="Jobs, newest first")
def jobs(request, filters: Query[JobsFilter]):
    listed = jobs_list(state=filters.state, kind=filters.kind, node_id=filters.node_id)
    shown = Paginator(listed, filters.per_page).get_page(filters.page)
    return {
        "count": shown.paginator.count,
        "page": shown.number,
        "pages": shown.paginator.num_pages,
        "per_page": filters.per_page,
        "jobs": [job_out(job) for job in shown],
    }


@router.get(
    "/jobs/{job_id}/waves",
    auth=READ,
    response={200: WavesOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut},
    summary="A re-register's waves, budget and kept catalogs (what its job page shows)",
)
def job_waves(request, job_id: Whole):
    job = Job.objects.filter(pk=job_id).first()
    shown = waves_view(job) if job is not None else None
    if shown is None:
        raise Http404(f"job {job_id} is not a re-register with waves or kept catalogs")
    run = shown.run
    return {
        "job_id": job.pk,
        "job_state": job.state,
        "state": run.state if run else None,
        "paused_reason": run.paused_reason if run else "",
        "budget": run.budget if run else None,
        "refusals": run.refusals if run else 0,
        "failures": run.failures if run else 0,
        "budget_left": run.budget_left if run else None,
        "approved_by": run.approved_by.get_username() if run and run.approved_by_id else None,
        "waves": run.waves if run else [],
        "kept": shown.generations,
        "rolled_back": shown.rolled_back_total,
        "rolled_back_nodes": shown.rolled_back,
        "blocked": {int(gid): why for gid, why in shown.blocked.items()},
    }
