"""An admin steers a re-register in waves from its job page: approve, resume, stop, roll back a node or the run.

Each action is a POST with the bulk re-register permission and CSRF; htmx gets the job card back
(with the refusal in words, as a 200 fragment htmx swaps), a plain form post is redirected to the
job's page with a message. The whole run's rollback is a job of its own: the browser is sent to its
page, which follows it live. Every action is audited by its service.
"""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from dashboard.catalogs.selectors.waves import waves_view
from dashboard.catalogs.services.reregister.rollback import run_node_rollback, run_rollback_request
from dashboard.catalogs.services.reregister.waves import wave_run_approve, wave_run_resume, wave_run_stop
from dashboard.jobs.services.jobs import JobError
from dashboard.models import WaveRun
from dashboard.views.action import action
from dashboard.views.jobs import job_or_404

STEER = ["dashboard.view_job", "dashboard.bulk_reregister"]
# Each action's service and what the page says once it is done (one URL each: /jobs/<id>/waves/<action>/).
ACTIONS = {
    "approve": (wave_run_approve, "Approved"),
    "resume": (wave_run_resume, "Resumed"),
    "stop": (wave_run_stop, "Stopping after the batch in hand"),
}


@action(STEER)
def waves_action(request, job_id: int, action: str):
    wave = get_object_or_404(WaveRun, job_id=job_id)
    act, done = ACTIONS[action]
    return _after(request, job_id, lambda: act(wave=wave, by=request.user, source="web"), done)


@action(STEER)
def job_rollback(request, job_id: int):
    """Start the run's rollback as a job and go to its page (live); a second click finds the one running."""
    job = job_or_404(job_id)
    try:
        requested = run_rollback_request(job=job, by=request.user, source="web")
    except JobError as exc:
        return _answer(request, job_id, error=str(exc), said="")
    if requested.created:
        messages.success(request, f"Rolling back job #{job_id}'s nodes: this job follows it")
    else:
        messages.info(request, f"Job #{job_id} is already being rolled back: this is that rollback's job")
    url = reverse("job", kwargs={"job_id": requested.job.pk})
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


@action(STEER)
def node_rollback_view(request, job_id: int, node_id: int):
    job = job_or_404(job_id)

    def roll_back():
        run_node_rollback(job=job, node_id=node_id, by=request.user, source="web")
        return f"Node {node_id} rolled back to its catalog before job #{job_id}"

    return _after(request, job_id, roll_back, "")


def _after(request, job_id: int, act, done: str):
    error = said = ""
    try:
        said = act() or done
    except JobError as exc:
        error = str(exc)
    return _answer(request, job_id, error=error, said=said)


def _answer(request, job_id: int, *, error: str, said: str):
    job = job_or_404(job_id)
    if request.htmx:
        context = {"job": job, "waves": waves_view(job), "waves_error": error, "waves_done": said}
        return render(request, "dashboard/job.html#job-card", context)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, said)
    return redirect("job", job_id=job_id)
