"""GET /api/v1/jobs: the jobs list, as the Jobs page reads it; /api/v1/jobs/{id}/waves: a re-register's waves,
read (GET) and steered as on its job page (approve, resume, stop); /api/v1/jobs/{id}/rollback: the run's
rollback, a job of its own (202), or one node's, done at once.

Steering needs the `act` scope and, as on the page, its user's bulk re-register permission. A refused
action is a 409 with the service's words; every action is audited by its service with source "api".
"""

from __future__ import annotations

from django.http import Http404
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import AuthorizationError

from dashboard.api.auth import ACT, READ
from dashboard.api.errors import JobNotQueued
from dashboard.api.inputs import Counting, Whole
from dashboard.api.schemas import (
    ERRORS,
    ERRORS_OR_404,
    ErrorOut,
    JobsPageOut,
    JobStartedOut,
    NodeRollbackOut,
    WavesOut,
    page_out,
)
from dashboard.api.writes import api_write
from dashboard.catalogs.selectors.waves import waves_view
from dashboard.catalogs.services.reregister.rollback import RollbackNotKept, run_node_rollback, run_rollback_request
from dashboard.catalogs.services.reregister.waves import wave_run_approve, wave_run_resume, wave_run_stop
from dashboard.jobs.selectors.jobs import jobs_list
from dashboard.jobs.services.jobs import JobRequest
from dashboard.models import Job, WaveRun

router = Router(tags=["jobs"])
# The page's permissions for steering a run (dashboard.views.waves.STEER), asked of the token's user.
STEER = ("dashboard.view_job", "dashboard.bulk_reregister")
# What a steering action or a rollback is refused with (a 409 with the service's words), and the steering's answer.
STEERING_REFUSALS = {**ERRORS_OR_404, 409: ErrorOut}
STEERING = {200: WavesOut, **STEERING_REFUSALS}


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


def job_started(requested: JobRequest) -> Status:
    """The answer to a job asked for, read after the commit that sent it to the broker: 202 (new) or 200
    (the active one). A broker that could not be told failed the new job at once (jobs.services.jobs.job_enqueue):
    JobNotQueued (503) then, never "queued" for a job already failed."""
    job = _job_or_404(requested.job.pk)
    if requested.created and job.state == Job.State.FAILED:
        raise JobNotQueued(job.pk, job.error)
    return Status(
        202 if requested.created else 200,
        JobStartedOut.model_validate({"created": requested.created, "job": job_out(job)}),
    )


@router.get(
    "/jobs",
    auth=READ,
    response={200: JobsPageOut, **ERRORS},
    summary="Jobs, newest first",
)
def jobs(request, filters: Query[JobsFilter]):
    listed = jobs_list(state=filters.state, kind=filters.kind, node_id=filters.node_id)
    return page_out(listed, page=filters.page, per_page=filters.per_page, items="jobs", out=job_out)


@router.get(
    "/jobs/{job_id}/waves",
    auth=READ,
    response={200: WavesOut, **ERRORS_OR_404},
    summary="A re-register's waves, budget and kept catalogs (what its job page shows)",
)
def job_waves(request, job_id: Whole):
    return waves_out(Job.objects.filter(pk=job_id).first(), job_id)


def waves_out(job: Job | None, job_id: int) -> dict:
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


# --- steering a run, as its job page does ------------------------------------------------------


def _steering(request) -> None:
    """403 unless the token's user may steer runs on the pages too (the act scope alone is a node's re-register)."""
    user = request.auth.user
    if not user.has_perms(STEER):
        raise AuthorizationError(
            message=f"steering a re-register's waves or rolling one back needs the bulk re-register permission "
            f"(dashboard.bulk_reregister) and token {request.auth.prefix}…'s user {user.get_username()} lacks it"
        )


def _job_or_404(job_id: int) -> Job:
    job = Job.objects.filter(pk=job_id).select_related("node", "requested_by", "requested_token").first()
    if job is None:
        raise Http404(f"there is no job #{job_id}")
    return job


def _wave_action(request, job_id: int, operation: str, act) -> dict:
    _steering(request)
    job = _job_or_404(job_id)
    wave = WaveRun.objects.filter(job=job).first()
    if wave is None:
        raise Http404(f"job #{job_id} is not a re-register in waves: it has no waves to steer")
    with api_write(operation, request):
        act(wave=wave, by=request.auth.user, source=Job.Source.API)
        answer = WavesOut.model_validate(waves_out(_job_or_404(job_id), job_id))
    return answer


@router.post(
    "/jobs/{job_id}/waves/approve",
    auth=ACT,
    response=STEERING,
    summary="Approve a run held over BULK_APPROVAL_OVER (a second admin: not the one who asked)",
)
def job_waves_approve(request, job_id: Whole):
    """200 with the waves as they are now (the run is queued for a worker); 409 when it is not waiting for
    an approval, or the token's user is the one who asked for it."""
    return _wave_action(request, job_id, "jobs.waves-approve", wave_run_approve)


@router.post(
    "/jobs/{job_id}/waves/resume",
    auth=ACT,
    response=STEERING,
    summary="Resume a paused run: its budget counts again from now",
)
def job_waves_resume(request, job_id: Whole):
    """200 with the waves as they are now; 409 when the run is not paused."""
    return _wave_action(request, job_id, "jobs.waves-resume", wave_run_resume)


@router.post(
    "/jobs/{job_id}/waves/stop",
    auth=ACT,
    response=STEERING,
    summary="Stop a run after the batch in hand (a run waiting for its approval ends without starting)",
)
def job_waves_stop(request, job_id: Whole):
    """200 with the waves as they are now (state stopping until the batch in hand is committed); 409 when
    the run is not running, paused or waiting for an approval."""
    return _wave_action(request, job_id, "jobs.waves-stop", wave_run_stop)


@router.post(
    "/jobs/{job_id}/rollback",
    auth=ACT,
    response={202: JobStartedOut, 200: JobStartedOut, 503: ErrorOut, **STEERING_REFUSALS},
    summary="Roll the whole run back: a rollback job (202), or the run's active one (200)",
)
def job_rollback(request, job_id: Whole):
    """Every node the re-register changed is put back as it was, one transaction per node, by a worker;
    a node whose slices changed hands since is left as it is and the rollback job's result says why.
    Follow the job with GET /api/v1/jobs?kind=run-rollback or the job page. 409 while the re-register
    itself is active, or when none of its nodes is left to roll back; 404 for a job with no kept catalogs;
    503 when the broker could not be told (the job is recorded as failed, with why)."""
    _steering(request)
    job = _job_or_404(job_id)
    if waves_view(job) is None:
        raise Http404(f"job #{job_id} is not a re-register with kept catalogs: there is nothing to roll back")
    with api_write("jobs.rollback", request):
        requested = run_rollback_request(job=job, by=request.auth.user, token=request.auth, source=Job.Source.API)
        # The answer is proven inside the transaction (one that cannot be built rolls the request back)
        # and given from the row as the commit left it.
        JobStartedOut.model_validate({"created": requested.created, "job": job_out(requested.job)})
    return job_started(requested)


@router.post(
    "/jobs/{job_id}/rollback/{node_id}",
    auth=ACT,
    response={200: NodeRollbackOut, **STEERING_REFUSALS},
    summary="Roll one node of the run back now, while none of its slices changed hands",
)
def job_node_rollback(request, job_id: Whole, node_id: Whole):
    """200 with what was done (slices removed, put back, occupied kept); 409 when anything changed hands
    since, the node was rolled back already, or the re-register is still active; 404 when the job kept
    no catalog of that node."""
    _steering(request)
    job = _job_or_404(job_id)
    try:
        with api_write("jobs.node-rollback", request):
            done = run_node_rollback(job=job, node_id=node_id, by=request.auth.user, source=Job.Source.API)
            answer = NodeRollbackOut.model_validate({"job_id": job.pk, **done})
    except RollbackNotKept as exc:
        raise Http404(str(exc)) from None
    return answer
