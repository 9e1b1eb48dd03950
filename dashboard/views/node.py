"""The node page: capacity bars, catalog, verdicts, policy, job history and the admin actions."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.vary import vary_on_headers

from dashboard import capacity
from dashboard.figures.selectors.history import capacity_history
from dashboard.jobs.services.jobs import job_request
from dashboard.lessons.services.memory_model import group_words, memory_lesson_revert
from dashboard.lessons.services.observations import observations_clear
from dashboard.models import Job, MemoryLesson, Node, SnapshotFigures
from dashboard.nodes.selectors.node import NodeDetail, node_detail
from dashboard.nodes.selectors.node_events import node_timeline
from dashboard.nodes.selectors.withholds import node_windows
from dashboard.nodes.services.pools import PoolsError, pools_report
from dashboard.policies.selectors.carries import node_carries
from dashboard.policies.services.calibration import node_calibration
from dashboard.views.action import action
from dashboard.views.jobs import job_start_said
from dashboard.views.page import page
from dashboard.views.withholds import WithholdForm

# The page shows the node, its catalog and its jobs.
NODE_READ = ["dashboard.view_node", "dashboard.view_slice", "dashboard.view_job"]


@page(NODE_READ)
def detail(request, node_id: int):
    detail = _detail_or_404(node_id)
    # Calibration fits what refusals showed (at one or more VM counts) against the policy in force.
    calibration = node_calibration(detail.node) if detail.observations else None
    history = capacity_history(scope=SnapshotFigures.Scope.NODE, subject=detail.node.grid_id, now=timezone.now())
    context = {
        "section": "fleet",
        "detail": detail,
        "calibration": calibration,
        "history": history,
        # The withhold panel (views.withholds renders it alone for htmx).
        "windows": node_windows(node=detail.node, now=timezone.now()),
        "withhold_form": WithholdForm(),
        "now": timezone.now(),
        "carries": node_carries(detail.node),
    }
    return render(request, "dashboard/node.html", context)


@page(NODE_READ)
@vary_on_headers("HX-Request")
def events(request, node_id: int):
    """The node's timeline (what its readings showed changing) and its uptime; the page loads it by htmx."""
    node = get_object_or_404(Node, grid_id=node_id)
    timeline = node_timeline(node=node, now=timezone.now())
    template = "dashboard/node_events.html#node-events" if request.htmx else "dashboard/node_events.html"
    return render(request, template, {"section": "fleet", "timeline": timeline, "node": node})


@page(NODE_READ)
@vary_on_headers("HX-Request")
def catalog(request, node_id: int):
    """The catalog region alone; the page refreshes it on the `catalog-changed` event."""
    if not request.htmx:
        return redirect("node", node_id=node_id)
    # The header's reading age goes along out of band: the job that changed the catalog read the node.
    detail = _detail_or_404(node_id)
    context = {"detail": detail, "oob_reading_age": True, "carries": node_carries(detail.node)}
    return render(request, "dashboard/node.html#catalog", context)


@action("dashboard.reregister_node")
def reregister(request, node_id: int):
    return _job_start(request, node_id, kind=Job.Kind.REREGISTER)


@action("dashboard.reregister_node")
def preview(request, node_id: int):
    return _job_start(request, node_id, kind=Job.Kind.REREGISTER, dry_run=True)


@action("dashboard.precheck_node")
def precheck(request, node_id: int):
    return _job_start(request, node_id, kind=Job.Kind.PRECHECK)


@action("dashboard.reregister_node")
def observations_clear_view(request, node_id: int):
    """Forget what the node's refusals taught (audited); its figures are recomputed at once."""
    node = get_object_or_404(Node, grid_id=node_id)
    cleared = observations_clear(node=node, by=request.user, source="web")
    messages.success(request, f"Cleared {cleared} observation{'s' if cleared != 1 else ''} of node {node_id}.")
    return redirect("node", node_id=node_id)


@action("dashboard.reregister_node")
def memory_lesson_revert_view(request, node_id: int, lesson_id: int):
    """Revert the fleet lesson that decides this node's memory (audited); the one before decides again."""
    node = get_object_or_404(Node, grid_id=node_id)
    lesson = get_object_or_404(MemoryLesson, pk=lesson_id)
    memory_lesson_revert(lesson=lesson, by=request.user, source="web")
    messages.success(request, f"Reverted memory lesson {lesson.pk} of {group_words(lesson.build)}.")
    return redirect("node", node_id=node.grid_id)


@action("dashboard.reregister_node")
def pools_report_view(request, node_id: int):
    """An operator's report of the node's SSD pool sizes (kept with who, when, from where)."""
    node = get_object_or_404(Node, grid_id=node_id)
    text = request.POST.get("sizes", "")
    try:
        sizes = [capacity.parse_size(part, what="pool size") for part in text.replace(",", " ").split()]
        entries = [{"name": f"operator-{i}", "type": "ssd", "size": size, "used": 0} for i, size in enumerate(sizes)]
        pools_report(
            node=node, pools=entries, source="operator", by=request.user, origin=request.META.get("REMOTE_ADDR", "")
        )
    except (PoolsError, capacity.CapacityError) as exc:
        messages.error(request, f"Pools not reported: {exc}")
    else:
        messages.success(request, f"Reported the SSD pools of node {node_id}; its figures are recomputed.")
    return redirect("node", node_id=node_id)


def _job_start(request, node_id: int, *, kind: str, dry_run: bool = False):
    """Start the job (or find the one already running) and show its progress.

    htmx gets the job card, which polls itself; a plain form post is redirected to the
    job's page, which works the same without JavaScript.
    """
    node = get_object_or_404(Node, grid_id=node_id)
    requested = job_request(kind=kind, node=node, by=request.user, source="web", dry_run=dry_run)
    if not request.htmx:
        return job_start_said(request, requested)
    job = requested.job
    if requested.created:
        # The message went to the broker on commit, inside job_request: a broker that is down has
        # already failed the job, and the card must say so rather than "Started".
        job.refresh_from_db()
    return render(request, "dashboard/job.html#job-card", {"job": job, "already_running": not requested.created})


def _detail_or_404(node_id: int) -> NodeDetail:
    try:
        return node_detail(node_id=node_id)
    except Node.DoesNotExist:
        raise Http404(f"Node {node_id} is not registered.") from None
