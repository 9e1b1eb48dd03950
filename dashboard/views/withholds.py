"""Withholding from the pages: the node page's panel (support reads it, admins withhold and release)
and the farm's form on the fleet page filtered to one farm. htmx swaps the panel; a plain post redirects."""

from __future__ import annotations

from datetime import UTC, datetime

from django import forms
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import trigger_client_event

from dashboard.models import Node, NodeWithhold
from dashboard.nodes.selectors.withholds import node_windows
from dashboard.nodes.services.withholds import REASON_MAX, WithholdError, node_withhold, withhold_release
from dashboard.views.action import action
from dashboard.views.page import page

PANEL = "dashboard/node_withhold.html#withhold-panel"
NODE_READ = ["dashboard.view_node"]
WITHHOLD = "dashboard.withhold_node"


class WithholdForm(forms.Form):
    reason = forms.CharField(max_length=REASON_MAX, strip=True, help_text="Shown beside the node on every page")
    starts_at = forms.DateTimeField(
        required=False,
        label="From (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="Empty: now",
    )
    ends_at = forms.DateTimeField(
        required=False,
        label="Until (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="Empty: until released",
    )

    def clean_starts_at(self):
        return _utc(self.cleaned_data.get("starts_at"))

    def clean_ends_at(self):
        return _utc(self.cleaned_data.get("ends_at"))


def _utc(at: datetime | None) -> datetime | None:
    """The form's times are UTC (the pages show UTC); an aware one is kept as it is."""
    if at is None:
        return None
    return at if timezone.is_aware(at) else at.replace(tzinfo=UTC)


@page(NODE_READ)
@vary_on_headers("HX-Request")
def panel(request, node_id: int):
    node = get_object_or_404(Node, grid_id=node_id)
    if not request.htmx:
        return redirect(reverse("node", args=[node_id]) + "#withhold")
    return _panel(request, node, WithholdForm())


@action(WITHHOLD)
def withhold(request, node_id: int):
    node = get_object_or_404(Node, grid_id=node_id)
    form = WithholdForm(request.POST)
    error = ""
    if form.is_valid():
        data = form.cleaned_data
        try:
            done = node_withhold(
                nodes=[node],
                reason=data["reason"],
                starts_at=data["starts_at"],
                ends_at=data["ends_at"],
                by=request.user,
            )
        except WithholdError as exc:
            error = str(exc)
        else:
            return _done(request, node, done.words)
    else:
        error = "; ".join(f"{form.fields[f].label or f}: {' '.join(e)}" for f, e in form.errors.items())
    return _refused(request, node, form, f"Not withheld: {error}")


@action(WITHHOLD)
def release(request, node_id: int):
    node = get_object_or_404(Node, grid_id=node_id)
    source = request.POST.get("source") or None
    if source is not None and source not in NodeWithhold.Source.values:
        return _refused(request, node, WithholdForm(), f"Not released: {source!r} is not manual or quarantine")
    try:
        done = withhold_release(node=node, by=request.user, source=source)
    except WithholdError as exc:
        return _refused(request, node, WithholdForm(), f"Not released: {exc}")
    return _done(request, node, done.words)


@action(["dashboard.view_node", WITHHOLD])
def farm_withhold(request, farm_id: int):
    """Every registered node of the farm withheld with one reason and window (the fleet page filtered to it)."""
    back = reverse("fleet") + f"?farm={farm_id}"
    nodes = list(Node.objects.filter(farm_id=farm_id).order_by("grid_id"))
    form = WithholdForm(request.POST)
    if not nodes:
        messages.error(request, f"Not withheld: farm {farm_id} has no registered node.")
    elif not form.is_valid():
        messages.error(request, "Not withheld: " + "; ".join(" ".join(e) for e in form.errors.values()))
    else:
        data = form.cleaned_data
        try:
            done = node_withhold(
                nodes=nodes,
                reason=data["reason"],
                starts_at=data["starts_at"],
                ends_at=data["ends_at"],
                by=request.user,
            )
        except WithholdError as exc:
            messages.error(request, f"Not withheld: {exc}")
        else:
            messages.success(request, done.words[:1].upper() + done.words[1:] + ".")
    return redirect(back)


def _done(request, node: Node, words: str):
    if request.htmx:
        node.refresh_from_db()
        response = _panel(request, node, WithholdForm(), notice=words[:1].upper() + words[1:] + ".")
        # The catalog's figures (placeable, phantom and why) changed with it.
        trigger_client_event(response, "catalog-changed")
        return response
    messages.success(request, words[:1].upper() + words[1:] + ".")
    return redirect("node", node_id=node.grid_id)


def _refused(request, node: Node, form: WithholdForm, words: str):
    # htmx does not swap a 4xx: the panel comes back with the error in it (nothing was written).
    if request.htmx:
        return _panel(request, node, form, error=words)
    messages.error(request, words)
    return redirect("node", node_id=node.grid_id)


def _panel(request, node: Node, form: WithholdForm, *, notice: str = "", error: str = ""):
    context = {
        "node": node,
        "windows": node_windows(node=node, now=timezone.now()),
        "now": timezone.now(),
        "withhold_form": form,
        "notice": notice,
        "error": error,
    }
    return render(request, PANEL, context)
