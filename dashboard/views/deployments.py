"""Failed deployments, for support staff: what failed, the real ZOS reason, and the numbers."""

from dataclasses import dataclass

from django import forms
from django.contrib.auth.decorators import login_required, permission_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from dashboard.deployments.selectors.deployments import (
    CapacitySeen,
    capacity_seen,
    deployment_detail,
    deployment_words,
    failed_deployments,
)
from dashboard.grid.classify import classify
from dashboard.models import Deployment

DEPLOYMENTS_PER_PAGE = 50
# A pasted error message; ZOS's longest wrapped messages are a few hundred characters.
EXPLAIN_MAX_LENGTH = 4000


class FailedFilterForm(forms.Form):
    node = forms.IntegerField(min_value=0, required=False, label="Node id")
    farm = forms.IntegerField(min_value=0, required=False, label="Farm id")
    cause = forms.ChoiceField(choices=[("", "Any cause"), *Deployment.Cause.choices[1:]], required=False)
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self):
        cleaned = super().clean()
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since > until:
            raise forms.ValidationError(f"The date range is reversed: {since} is after {until}.")
        return cleaned


class ExplainForm(forms.Form):
    error = forms.CharField(
        max_length=EXPLAIN_MAX_LENGTH,
        strip=True,
        label="Paste an error message",
        widget=forms.Textarea(
            attrs={"rows": 3, "placeholder": "e.g. vm deployment entered error state, or the ZOS message from the logs"}
        ),
    )


@dataclass(frozen=True)
class FailedRow:
    deployment: Deployment
    seen: CapacitySeen | None
    words: str  # what happened and what to do, for support staff
    detail: str = ""  # the engineer's detail, folded below the words


@login_required
@require_http_methods(["GET", "POST"])
@permission_required("dashboard.view_deployment", raise_exception=True)
def failed(request):
    """The failed deployments (filters in the query) and the Explain box, which posts: a pasted error may
    hold what must not land in a URL, a browser's history or an access log."""
    form = FailedFilterForm(request.GET)
    explain_form = ExplainForm(request.POST) if request.method == "POST" else ExplainForm()
    diagnosis = (
        classify(explain_form.cleaned_data["error"]) if explain_form.is_bound and explain_form.is_valid() else None
    )

    if form.is_valid():
        deployments = failed_deployments(
            node_id=form.cleaned_data["node"],
            farm_id=form.cleaned_data["farm"],
            cause=form.cleaned_data["cause"] or None,
            since=form.cleaned_data["since"],
            until=form.cleaned_data["until"],
        )
        status = 200
    else:
        deployments, status = Deployment.objects.none(), 400
    page = Paginator(deployments, DEPLOYMENTS_PER_PAGE).get_page(request.GET.get("page"))
    rows = [
        FailedRow(deployment=d, seen=capacity_seen(d), words=deployment_words(d), detail=deployment_detail(d))
        for d in page
    ]
    context = {
        "section": "deployments",
        "form": form,
        "explain_form": explain_form,
        "diagnosis": diagnosis,
        "page": page,
        "rows": rows,
    }
    if explain_form.is_bound and not explain_form.is_valid():
        status = 400
    return render(request, "dashboard/deployments_failed.html", context, status=status)
