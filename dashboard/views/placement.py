"""Where a slice can go instead: the fleet-wide answer for one slice size, for support staff too."""

from django import forms
from django.conf import settings
from django.shortcuts import render
from django.utils import timezone

from dashboard import capacity
from dashboard.deployments.selectors.placement import placement_for
from dashboard.deployments.selectors.placement_rules import STRATEGIES, RulesError, rules_parsed
from dashboard.nodes.selectors.wake import standby_wake
from dashboard.views.page import page

# Anything above this is a typo, not a VM (parse_size draws the same line for a node).
MAX_VM_BYTES = 1024 * capacity.TiB
MAX_VM_CRU = 4096


class SizeField(forms.CharField):
    """A size as people write it ("4GiB", "151 GiB") or in bytes, as a failed deployment's link gives it."""

    def __init__(self, *, minimum: int, **kwargs):
        self.minimum = minimum
        super().__init__(max_length=32, **kwargs)

    def clean(self, value):
        text = super().clean(value)
        try:
            size = capacity.parse_size(text, what=self.label.lower())
        except capacity.SizeError as exc:
            raise forms.ValidationError(str(exc)) from None
        if not self.minimum <= size <= MAX_VM_BYTES:
            raise forms.ValidationError(
                f"{self.label} must be between {capacity.format_size(self.minimum)} and {capacity.format_size(MAX_VM_BYTES)}."
            )
        return size


class SliceSizeForm(forms.Form):
    cru = forms.IntegerField(min_value=1, max_value=MAX_VM_CRU, label="CPU cores")
    mru = SizeField(
        minimum=capacity.MIN_VM_MRU, label="Memory", widget=forms.TextInput(attrs={"placeholder": "e.g. 4GiB"})
    )
    sru = SizeField(minimum=0, label="Data disk", widget=forms.TextInput(attrs={"placeholder": "e.g. 151GiB"}))
    failed_on = forms.IntegerField(min_value=0, required=False, widget=forms.HiddenInput)
    # The asker's rules (deployments.selectors.placement.Rules): what never to offer, and how to spread a cluster.
    exclude_nodes = forms.CharField(
        required=False,
        max_length=12000,
        label="Exclude nodes",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 1774, 2310"}),
    )
    exclude_farms = forms.CharField(
        required=False,
        max_length=12000,
        label="Exclude farms",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 4242"}),
    )
    per_node = forms.IntegerField(min_value=1, max_value=10_000, required=False, label="At most per node")
    per_farm = forms.IntegerField(min_value=1, max_value=10_000, required=False, label="At most per farm")
    strategy = forms.ChoiceField(
        choices=[(s, s) for s in STRATEGIES], required=False, initial="spread", label="Strategy"
    )
    ipv4 = forms.BooleanField(required=False, label="With a public IPv4")
    # The odds a best node must give the slice of deploying at the first try (capacity.odds), as the API's min_odds.
    min_odds = forms.FloatField(
        min_value=0.0,
        max_value=1.0,
        required=False,
        label="Least odds",
        widget=forms.NumberInput(attrs={"step": "0.01", "placeholder": "e.g. 0.95"}),
    )

    def clean(self):
        data = super().clean()
        try:
            data["rules"] = rules_parsed(
                exclude_nodes=data.get("exclude_nodes"),
                exclude_farms=data.get("exclude_farms"),
                per_node=data.get("per_node"),
                per_farm=data.get("per_farm"),
                strategy=data.get("strategy"),
                ipv4=data.get("ipv4"),
                min_odds=data.get("min_odds"),
            )
        except RulesError as exc:
            self.add_error(exc.field, str(exc))
        return data


@page("dashboard.view_node")
def placement(request):
    form = SliceSizeForm(request.GET) if request.GET else SliceSizeForm()
    answer = None
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        answer = placement_for(cru=data["cru"], mru=data["mru"], sru=data["sru"], rules=data["rules"])
        # Shown again as people write sizes, when that is exact (a failed deployment's link gives bytes).
        form = SliceSizeForm({**form.data.dict(), "mru": _written(data["mru"]), "sru": _written(data["sru"])})
        form.is_valid()
    context = {
        "section": "fleet",
        "form": form,
        "slice_min_odds": settings.SLICE_MIN_ODDS,
        # Nodes on standby can be woken: how long that took in their farms (nodes.selectors.wake).
        "standby_wake": standby_wake(now=timezone.now()) if answer and answer.blocked.get("standby") else None,
        "answer": answer,
        "failed_on": form.cleaned_data.get("failed_on") if answer else None,
    }
    return render(request, "dashboard/placement.html", context, status=400 if form.is_bound and form.errors else 200)


def _written(size: int) -> str:
    """ "4GiB", "500MiB", or the bytes when no unit divides the size exactly."""
    for unit, name in ((capacity.TiB, "TiB"), (capacity.GiB, "GiB"), (capacity.MiB, "MiB")):
        if size and size % unit == 0:
            return f"{size // unit}{name}"
    return str(size)
