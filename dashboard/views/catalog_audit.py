"""/audit/: what the last slice audit found, with its age; support reads it, only admins run and fix it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.shortcuts import redirect, render

from dashboard.catalogs.selectors.catalog_audit import audit_latest
from dashboard.jobs.services.jobs import JobError, job_request
from dashboard.models import Job
from dashboard.views.action import action
from dashboard.views.jobs import job_start_said
from dashboard.views.page import page

KIND_WORDS = {
    "orphan": "Orphan slices (marked taken, VM gone)",
    "foreign": "Foreign VMs (running, unknown to the catalog)",
    "count": "Counts that disagree",
    "not-checked": "Not checked (the grid did not answer)",
}


@dataclass(frozen=True)
class FindingRow:
    kind: str
    node_id: int
    words: str
    since: datetime | None
    first_seen: datetime | None
    fixable: bool
    fixed: bool
    not_fixed: str


@page(["dashboard.view_node", "dashboard.view_job"])
def audit_page(request):
    latest = audit_latest()
    result = latest.result
    rows: list[FindingRow] = []
    if result is not None:
        fixed, why_not = set(result.fixed), dict((key, why) for key, why in result.not_fixed)
        rows = [
            FindingRow(
                kind=f.kind,
                node_id=f.node_id,
                words=f.words,
                since=_moment(f.since),
                first_seen=_moment(f.first_seen),
                fixable=f.fixable,
                fixed=f.key in fixed,
                not_fixed=why_not.get(f.key, ""),
            )
            for f in result.findings
        ]
    fixable = [r for r in rows if r.fixable and not r.fixed]
    can_fix = (
        request.user.has_perm("dashboard.fix_catalog")
        and result is not None
        and result.dry_run
        and bool(fixable)
        and latest.active is None
        and not _fixed_already(latest.job.pk)
    )
    return render(
        request,
        "dashboard/catalog_audit.html",
        {
            "section": "audit",
            "latest": latest,
            "result": result,
            "groups": [(kind, words, [r for r in rows if r.kind == kind]) for kind, words in KIND_WORDS.items()],
            "fixable": len(fixable),
            "can_fix": can_fix,
        },
    )


@action(["dashboard.view_node", "dashboard.fix_catalog"])
def audit_run(request):
    """Start a dry run: it reads every node's contracts and lists what it finds, changing nothing."""
    return _start(request, dry_run=True, parameters=None)


@action(["dashboard.view_node", "dashboard.fix_catalog"])
def audit_fix(request):
    """Fix what a dry run showed (its id in the form): once per dry run, whatever the clicks."""
    try:
        dry_run_job = int(request.POST.get("dry_run_job", ""))
    except ValueError:
        messages.error(request, "Which dry run to fix was not said; run a dry run and fix from its results.")
        return redirect("audit")
    follower = _fixed_already(dry_run_job)
    if follower is not None:
        messages.warning(
            request, f"Dry run #{dry_run_job} is being or was fixed already by {follower}; nothing started."
        )
        return redirect("job", job_id=follower.pk)
    return _start(request, dry_run=False, parameters={"dry_run_job": dry_run_job})


def _start(request, *, dry_run: bool, parameters: dict | None):
    try:
        requested = job_request(
            kind=Job.Kind.CATALOG_AUDIT, by=request.user, source="web", dry_run=dry_run, parameters=parameters
        )
    except JobError as exc:
        messages.error(request, str(exc))
        return redirect("audit")
    return job_start_said(request, requested)


def _fixed_already(dry_run_job: int) -> Job | None:
    return (
        Job.objects.filter(kind=Job.Kind.CATALOG_AUDIT, dry_run=False, parameters__dry_run_job=dry_run_job)
        .exclude(state=Job.State.FAILED)
        .order_by("pk")
        .first()
    )


def _moment(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
