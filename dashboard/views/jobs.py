"""The jobs pages: the list, one job's page, and the progress fragment that polls."""

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import trigger_client_event

from dashboard.catalogs.selectors.waves import waves_view
from dashboard.jobs.selectors.jobs import job_detail, jobs_list
from dashboard.models import Job
from dashboard.views.page import page

JOBS_PER_PAGE = 50


def job_start_said(request, requested):
    """What a start request from a form did, as a message, and the job's page to go to: started, could not
    start (a broker that is down has already failed it), waiting for a second admin, or already running."""
    job = requested.job
    if requested.created:
        job.refresh_from_db()  # the message went to the broker on commit, inside job_request
    if requested.created and job.state == Job.State.FAILED:
        messages.error(request, f"Could not start {job}: {job.error}")
    elif requested.created and job.step.startswith("waiting for a second admin"):
        messages.warning(request, f"{job} is {job.step}; it starts once approved.")
    elif requested.created:
        messages.success(request, f"Started {job}. This page follows it until it finishes.")
    else:
        messages.warning(request, f"Already running: {job} has not finished yet, so no new job was started.")
    return redirect("job", job_id=job.pk)


class JobFilterForm(forms.Form):
    state = forms.ChoiceField(choices=[("", "Any state"), *Job.State.choices], required=False)
    kind = forms.ChoiceField(choices=[("", "Any kind"), *Job.Kind.choices], required=False)
    node = forms.IntegerField(min_value=0, required=False, label="Node id")


@page("dashboard.view_job")
def job_list(request):
    form = JobFilterForm(request.GET)
    if form.is_valid():
        jobs = jobs_list(
            state=form.cleaned_data["state"] or None,
            kind=form.cleaned_data["kind"] or None,
            node_id=form.cleaned_data["node"],
        )
        status = 200
    else:
        jobs, status = Job.objects.none(), 400
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "dashboard/jobs.html", {"section": "jobs", "form": form, "page": page}, status=status)


@page("dashboard.view_job")
def job_page(request, job_id: int):
    job = job_or_404(job_id)
    return render(request, "dashboard/job.html", {"section": "jobs", "job": job, "waves": waves_view(job)})


@page("dashboard.view_job")
@vary_on_headers("HX-Request")
def job_progress(request, job_id: int):
    """The job card alone. While the job is active the card polls itself; the finished card does not."""
    job = job_or_404(job_id)
    response = render(request, "dashboard/job.html#job-card", {"job": job, "waves": waves_view(job)})
    if request.htmx and not job.is_active and job.node_id is not None:
        # The node page's catalog listens for this and refreshes itself; polling has just stopped,
        # so it fires once per job.
        trigger_client_event(response, "catalog-changed", {"job": job.pk, "node": job.node.grid_id})
    return response


def job_or_404(job_id: int) -> Job:
    """The job (jobs.selectors.jobs.job_detail), or a 404 naming it: the job page and its waves' buttons."""
    try:
        return job_detail(job_id=job_id)
    except Job.DoesNotExist:
        raise Http404(f"There is no job #{job_id}.") from None
