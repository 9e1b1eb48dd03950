"""Add nodes from the grid: farm ids or node ids -> a preview (a dry-run job) -> the onboarding job.

Both steps are jobs, so reading a large farm from a slow proxy never holds a web request; the
page follows the job live and, once the preview is in, offers to register exactly what it read.
"""

import re

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from dashboard import capacity
from dashboard.grid.types import NODE_STATUSES
from dashboard.jobs.services.jobs import JobError, job_request
from dashboard.models import INTEGER_MAX, Job, Policy
from dashboard.nodes.selectors.onboarding import onboard_jobs_recent, onboard_new_nodes
from dashboard.nodes.services.onboarding import OnboardError, OnboardRequest
from dashboard.views.page import page

PERMISSIONS = ["dashboard.view_node", "dashboard.onboard_nodes"]
MAX_IDS = 1000


class OnboardForm(forms.Form):
    farm_ids = forms.CharField(
        required=False,
        max_length=2000,
        label="Farm ids",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 4242, 4243", "inputmode": "numeric"}),
    )
    node_ids = forms.CharField(
        required=False,
        max_length=20000,
        label="Node ids",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "e.g. 1774 2601 (commas, spaces or lines)"}),
    )
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *((s, s) for s in NODE_STATUSES)])
    policy = forms.ChoiceField(required=False, label="Policy for new nodes")
    # Set by the preview's confirmation: the admin registers this many new nodes, past ONBOARD_MAX_NEW_NODES.
    max_new_nodes = forms.IntegerField(required=False, min_value=1, max_value=INTEGER_MAX, widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = sorted(set(Policy.objects.values_list("name", flat=True)) | set(capacity.PROFILES))
        self.fields["policy"].choices = [("", "Each node's effective policy"), *((n, n) for n in names)]

    def clean_farm_ids(self) -> tuple[int, ...]:
        return _ids(self.cleaned_data["farm_ids"], what="farm id")

    def clean_node_ids(self) -> tuple[int, ...]:
        return _ids(self.cleaned_data["node_ids"], what="node id")

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            data["request"] = OnboardRequest(
                farm_ids=data["farm_ids"],
                node_ids=data["node_ids"],
                status=data["status"] or None,
                policy=data["policy"] or None,
                max_new_nodes=data.get("max_new_nodes"),
            )
        except OnboardError as exc:
            raise forms.ValidationError(f"{str(exc)[:1].upper()}{str(exc)[1:]}.") from None
        return data


def _ids(text: str, *, what: str) -> tuple[int, ...]:
    items = [item for item in re.split(r"[\s,;]+", text.strip()) if item]
    wrong = [item for item in items if not item.isdigit() or int(item) == 0]
    if wrong:
        raise forms.ValidationError(f"Not a {what}: {', '.join(repr(w) for w in wrong[:5])}.")
    if len(items) > MAX_IDS:
        raise forms.ValidationError(f"At most {MAX_IDS} at a time; give farm ids for whole farms.")
    return tuple(dict.fromkeys(int(item) for item in items))


@login_required
@require_http_methods(["GET", "POST"])
@permission_required(PERMISSIONS, raise_exception=True)
def onboard(request):
    """GET: the form. POST: start the preview (action=preview) or the onboarding itself."""
    form = OnboardForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        dry_run = request.POST.get("action") != "register"
        onboarding = form.cleaned_data["request"]
        try:
            requested = job_request(
                kind=Job.Kind.ONBOARD,
                by=request.user,
                source="web",
                dry_run=dry_run,
                parameters=onboarding.as_parameters(),
            )
        except JobError as exc:
            messages.error(request, str(exc))
        else:
            if not requested.created:
                messages.warning(
                    request, f"Already running: {requested.job} has not finished, so no new one was started."
                )
            return redirect("onboard-job", job_id=requested.job.pk)
    status = 400 if request.method == "POST" else 200
    context = {"section": "onboard", "form": form, "recent": onboard_jobs_recent()}
    return render(request, "dashboard/onboard.html", context, status=status)


@page(PERMISSIONS)
@vary_on_headers("HX-Request")
def onboard_job(request, job_id: int):
    """The preview or the onboarding, live; the card alone when htmx polls it."""
    job = Job.objects.select_related("requested_by").filter(pk=job_id, kind=Job.Kind.ONBOARD).first()
    if job is None:
        raise Http404(f"There is no onboarding job #{job_id}.")
    result = job.outcome
    asked = OnboardRequest.from_parameters(job.parameters, dry_run=job.dry_run)
    context = {
        "section": "onboard",
        "job": job,
        "result": result,
        "asked": asked,
        "form": OnboardForm(initial=_initial(asked)),
        # The nodes it registered, as they are now, with the age of their readings.
        "new_nodes": onboard_new_nodes([n["node_id"] for n in result.new_nodes]) if result and not job.dry_run else [],
        # A preview past the limit asks the admin to confirm the number before registering.
        "new_nodes_limit": settings.ONBOARD_MAX_NEW_NODES,
        "confirm_new_nodes": bool(
            job.dry_run and result and result.registered > max(settings.ONBOARD_MAX_NEW_NODES, asked.max_new_nodes or 0)
        ),
    }
    template = "dashboard/onboard_job.html#onboard-card" if request.htmx else "dashboard/onboard_job.html"
    return render(request, template, context)


def _initial(asked: OnboardRequest) -> dict:
    return {
        "farm_ids": ", ".join(map(str, asked.farm_ids)),
        "node_ids": " ".join(map(str, asked.node_ids)),
        "status": asked.status or "",
        "policy": asked.policy or "",
        "max_new_nodes": asked.max_new_nodes,
    }
