"""The fleet overview: totals, the nodes table with filters, CSV export, and the bulk re-register."""

import csv

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods
from django.views.decorators.vary import vary_on_headers

from dashboard import capacity
from dashboard.catalogs.services.reregister.waves import bulk_request
from dashboard.figures.selectors.fleet import FleetFilters, FleetPage, fleet_overview, fleet_page
from dashboard.figures.selectors.fleet_map import fleet_map
from dashboard.figures.selectors.history import capacity_history
from dashboard.figures.selectors.unreadable import last_unreadable
from dashboard.jobs.selectors.jobs import bulk_active_job
from dashboard.jobs.services.jobs import JobError
from dashboard.models import Node, SnapshotFigures
from dashboard.nodes.selectors.farm_ips import farm_ipv4, farms_ipv4
from dashboard.nodes.selectors.uptime import uptime_percent
from dashboard.nodes.selectors.watch import watch_status
from dashboard.views.jobs import job_start_said
from dashboard.views.page import page
from dashboard.views.withholds import WithholdForm

NODES_PER_PAGE = 50
STALE_LISTED = 200
SORTS = [
    ("node_id", "Node id"),
    ("-node_id", "Node id, highest first"),
    ("farm", "Farm"),
    ("status", "Status"),
    ("-gap", "Largest gap first"),
    ("-phantom", "Most phantom slices first"),
    ("-free", "Most free slices first"),
    ("seen", "Longest unseen first"),
]
YES_NO = [("", "Any"), ("yes", "Yes"), ("no", "No")]
CSV_COLUMNS = (
    "node_id",
    "farm_id",
    "farm_name",
    "status",
    "nominal",
    "deployable",
    "gap",
    "free",
    "held",
    "held_until",
    "rented",
    "deployed",
    "failed",
    "placeable_now",
    "phantom",
    # One column per phantom reason (capacity.PHANTOM_REASONS: closures first, then shortfalls).
    *(f"phantom_{reason}" for reason in capacity.PHANTOM_REASONS),
    "closure",
    "closure_detail",
    # Why a deploy may still fail where it looks free (capacity.warnings): "key: detail; ...".
    "warnings",
    "stale",
    "stale_reason",
    "seen_at",
    "tier",
    # The node's farm's public IPv4 pool (nodes.selectors.farm_ips): free now, and the farm's IPv4 slices.
    "farm_ips_free",
    "farm_ipv4_slices",
)
# The tier filter: which nodes' deployable slices (figures.selectors.tiers), in the totals' words.
TIER_CHOICES = [
    ("", "Any"),
    ("now", "Now (up)"),
    ("after-wake", "After wake (standby)"),
    ("blocked", "Blocked (down)"),
    ("closed", "Closed (withheld, rented away or another closure)"),
]


class FleetFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=128,
        label="Search",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "node, farm id or name"}),
    )
    farm = forms.IntegerField(required=False, min_value=0, label="Farm id")
    status = forms.ChoiceField(required=False, choices=[("", "Any"), *Node.Status.choices])
    tier = forms.ChoiceField(required=False, choices=TIER_CHOICES, label="Deployable")
    stale = forms.ChoiceField(required=False, choices=YES_NO, label="Stale catalog")
    phantoms = forms.ChoiceField(required=False, choices=YES_NO, label="Has phantoms")
    sort = forms.ChoiceField(required=False, choices=SORTS)

    def clean_q(self) -> str:
        return self.cleaned_data["q"].strip()

    def fleet_filters(self) -> FleetFilters:
        data = self.cleaned_data
        return FleetFilters(
            farm_id=data["farm"],
            status=data["status"] or None,
            stale=_yes_no(data["stale"]),
            has_phantoms=_yes_no(data["phantoms"]),
            search=data["q"] or None,
            tier=data["tier"] or None,
        )

    def sort_key(self) -> str:
        return self.cleaned_data["sort"] or "node_id"

    @property
    def is_filtered(self) -> bool:
        return any(
            self.cleaned_data.get(k) not in (None, "") for k in ("q", "farm", "status", "tier", "stale", "phantoms")
        )


@page("dashboard.view_node")
@vary_on_headers("HX-Request")
def overview(request):
    if request.GET.get("format") == "csv":
        return export_csv(request)
    form = FleetFilterForm(request.GET)
    if not form.is_valid():
        return _render_overview(request, form, fleet=None, status=400)
    # Only the page's nodes become rows; the totals still cover every matching node.
    fleet = fleet_page(
        page=request.GET.get("page"), per_page=NODES_PER_PAGE, filters=form.fleet_filters(), sort=form.sort_key()
    )
    return _render_overview(request, form, fleet=fleet)


@page("dashboard.view_node")
@vary_on_headers("HX-Request")
def map_view(request):
    """Every node the table's filters keep as one cell, by farm; the same query string as the table."""
    form = FleetFilterForm(request.GET)
    nodes = None
    if form.is_valid():
        filters = form.fleet_filters()  # a map has its own order (farm, then node id): the sort is not asked
        nodes = fleet_map(filters=filters)
    context = {"section": "fleet", "form": form, "map": nodes, "filtered": form.is_valid() and form.is_filtered}
    # A collapsed map's farm opened in place (htmx): that farm's cells alone; a plain link gets the whole page.
    one_farm = nodes is not None and filters.farm_id is not None and getattr(request, "htmx", False)
    template = "dashboard/fleet_map.html#farm-cells" if one_farm else "dashboard/fleet_map.html"
    return render(request, template, context, status=200 if nodes is not None else 400)


@page("dashboard.view_node")
def export_csv(request):
    """The filtered set, every row (no pagination), for a spreadsheet."""
    form = FleetFilterForm(request.GET)
    if not form.is_valid():
        problems = "; ".join(str(e) for errors in form.errors.values() for e in errors)
        return HttpResponse(f"Cannot export: {problems}\n", status=400, content_type="text/plain; charset=utf-8")
    fleet = fleet_overview(filters=form.fleet_filters(), sort=form.sort_key())
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="fleet-{stamp}.csv"'
    writer = csv.writer(response)
    writer.writerow(CSV_COLUMNS)
    farms = farms_ipv4({row.farm_id for row in fleet.rows})
    for row in fleet.rows:
        values = {column: getattr(row, column, None) for column in CSV_COLUMNS if column != "gap"}
        for reason in capacity.PHANTOM_REASONS:  # phantom split by reason, as on the node page
            values[f"phantom_{reason}"] = row.phantom_reasons.get(reason, 0) if row.phantom is not None else None
        values["gap"] = row.nominal - row.deployable
        values["seen_at"] = row.seen_at.isoformat() if row.seen_at else ""
        values["held_until"] = row.held_until.isoformat() if row.held_until else ""
        values["tier"] = row.tier
        values["warnings"] = "; ".join(f"{w.key}: {w.detail}" for w in row.warnings)
        farm = farms[row.farm_id]
        values["farm_ips_free"] = farm.available if farm.read_at else None
        values["farm_ipv4_slices"] = farm.ipv4_slices if farm.read_at else None
        writer.writerow([_csv_cell(values[column]) for column in CSV_COLUMNS])
    return response


@login_required
@require_http_methods(["GET", "POST"])
@permission_required(["dashboard.view_node", "dashboard.bulk_reregister"], raise_exception=True)
def reregister_stale(request):
    """GET: how many nodes it would touch. POST: start the bulk job (or show the one running)."""
    waves = WavesForm(request.POST if request.method == "POST" and "waves" in request.POST else None)
    if request.method == "POST" and waves.is_bound and not waves.is_valid():
        return _stale_page(request, waves, status=400)
    if request.method == "POST":
        try:
            requested = bulk_request(by=request.user, source="web", parameters=waves.parameters())
        except JobError as exc:
            messages.error(request, f"Could not start the re-register: {exc}")
            return redirect("fleet-reregister-stale")
        return job_start_said(request, requested)
    return _stale_page(request, waves)


class WavesForm(forms.Form):
    """A bulk re-register in waves (catalogs.services.reregister.waves); what is left empty comes from the settings."""

    waves = forms.BooleanField(initial=True, widget=forms.HiddenInput)
    canary_farm = forms.IntegerField(min_value=0, max_value=2**31 - 1, required=False, label="Canary farm")
    canary_share = forms.IntegerField(min_value=0, max_value=100, required=False, label="Canary share (%)")
    batch_size = forms.IntegerField(min_value=1, max_value=10000, required=False, label="Batch size")
    budget = forms.IntegerField(min_value=0, max_value=1_000_000, required=False, label="Budget")

    def parameters(self) -> dict | None:
        if not self.is_bound:
            return None
        return {key: value for key, value in self.cleaned_data.items() if value is not None}


def _stale_page(request, waves: WavesForm, *, status: int = 200):
    # The totals of every stale node, and the first of them by id: a list of 10,000 links helps nobody.
    stale = fleet_page(filters=FleetFilters(stale=True), per_page=STALE_LISTED)
    return render(
        request,
        "dashboard/fleet_reregister_stale.html",
        {
            "section": "fleet",
            "stale": stale,
            "unlisted": stale.count - len(stale.rows),
            "active_job": bulk_active_job(),
            "waves_form": waves,
            "waves_defaults": {
                "canary_share": settings.WAVES_CANARY_SHARE,
                "batch_size": settings.WAVES_BATCH,
                "budget": settings.WAVES_BUDGET,
                "approval_over": settings.BULK_APPROVAL_OVER,
            },
        },
        status=status,
    )


def _render_overview(request, form: FleetFilterForm, *, fleet: FleetPage | None, status: int = 200):
    page = fleet.page if fleet is not None else Paginator([], NODES_PER_PAGE).get_page(1)
    context = {
        "section": "fleet",
        "form": form,
        "fleet": fleet,
        "page": page,
        "filtered": form.is_valid() and form.is_filtered,
        "sort": (form.cleaned_data.get("sort") if form.is_valid() else "") or "node_id",
        "history": _history(form),
        "watch": watch_status(),
        # The nodes the last fleet-wide reading refused, loudly (figures.selectors.unreadable).
        "unreadable": last_unreadable(),
        # The closed tier's tooltip names every closure reason there is (a new one joins it with no edit).
        "closure_labels": ", ".join(reason.label for reason in capacity.CLOSURE_REASONS.values()),
        # Whether rent contracts are judged (capacity.closures): the page says so either way.
        "marketplace_twins": settings.MARKETPLACE_TWIN_ID,
        # The page's rows only: two queries whatever the fleet (nodes.selectors.uptime).
        "uptime": uptime_percent([row.pk for row in page], now=timezone.now()) if fleet is not None else {},
        # The farm page (the table filtered to one farm) offers to withhold the farm.
        "farm": form.cleaned_data.get("farm") if form.is_valid() else None,
        "withhold_form": WithholdForm(auto_id="farm-id_%s"),
        # The farm page's public IPv4 bound: its free IPs, and the IPv4 slices they allow (nodes.selectors.farm_ips).
        "farm_ipv4": farm_ipv4(form.cleaned_data["farm"])
        if form.is_valid() and form.cleaned_data.get("farm")
        else None,
        "history_title": "The farm's capacity"
        if form.is_valid() and form.cleaned_data.get("farm") is not None
        else "The fleet's capacity",
    }
    # A history restore asks for the whole page even though htmx sends it.
    partial = request.htmx and not request.htmx.history_restore_request
    template = "dashboard/fleet.html#fleet-results" if partial else "dashboard/fleet.html"
    return render(request, template, context, status=status)


def _history(form: FleetFilterForm):
    """The fleet's capacity over time, or the farm's when the table is filtered to one farm."""
    farm = form.cleaned_data.get("farm") if form.is_valid() else None
    if farm is not None:
        return capacity_history(scope=SnapshotFigures.Scope.FARM, subject=farm, now=timezone.now())
    return capacity_history(scope=SnapshotFigures.Scope.FLEET, subject=0, now=timezone.now())


def _yes_no(value: str) -> bool | None:
    return {"yes": True, "no": False}.get(value)


def _csv_cell(value):
    """Booleans as yes/no, None as empty; text that a spreadsheet would run as a formula is quoted."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
