"""Deployments: the failed ones, as support reads them, and the outcomes the marketplace reports."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from ninja import Field, Query, Router, Schema, Status

from dashboard.api.auth import READ, REPORT
from dashboard.api.errors import BadInput
from dashboard.api.inputs import Counting, Whole
from dashboard.api.schemas import (
    ERRORS,
    DeploymentReportIn,
    DeploymentReportOut,
    DeploymentsPageOut,
    ErrorOut,
    page_out,
)
from dashboard.api.writes import api_write
from dashboard.deployments.selectors.deployments import deployment_words, failed_deployments
from dashboard.deployments.services.outcomes import OutcomeRecorded, deployment_outcome_record
from dashboard.deployments.services.outcomes.probe import probe_outcome_record
from dashboard.lessons.services.lesson_evidence import (
    LessonReportsBounded,
    lesson_reports_checked,
    lesson_reports_refused,
)
from dashboard.models import Deployment

router = Router(tags=["deployments"])


class DeploymentsFilter(Schema):
    outcome: Literal["failed"] = Field("failed", description="failed: failed by ZOS or refused by our precheck")
    node_id: Whole | None = None
    farm_id: Whole | None = None
    cause: Deployment.Cause | None = None
    since: dt.date | None = None
    until: dt.date | None = Field(None, description="includes that whole day (UTC)")
    page: Counting = 1
    per_page: int = Field(50, ge=1, le=500)


def deployment_out(d: Deployment) -> dict:
    return {
        "id": d.pk,
        "node_id": d.node.grid_id,
        "farm_id": d.node.farm_id,
        "slice_index": d.slice_index,
        "cru": d.cru,
        "mru": d.mru,
        "sru": d.sru,
        "slice_retired": d.slice_id is None,
        "state": d.state,
        "cause": d.cause,
        "raw_error": d.raw_error,
        "needed_bytes": d.needed_bytes,
        "usable_bytes": d.usable_bytes,
        "words": deployment_words(d),
        "capacity_seen": d.capacity_seen or {},
        "marketplace_id": d.marketplace_id,
        "workload_id": d.grid_workload_id,
        "started_at": d.started_at,
        "finished_at": d.finished_at,
    }


@router.get(
    "/deployments",
    auth=READ,
    response={200: DeploymentsPageOut, **ERRORS},
    summary="Failed deployments, newest first, as on /deployments/failed/",
)
def deployments(request, filters: Query[DeploymentsFilter]):
    if filters.since and filters.until and filters.since > filters.until:
        raise BadInput(
            f"the date range is reversed: since {filters.since} is after until {filters.until}", field="until"
        )
    listed = failed_deployments(
        node_id=filters.node_id,
        farm_id=filters.farm_id,
        cause=filters.cause,
        since=filters.since,
        until=filters.until,
    )
    return page_out(listed, page=filters.page, per_page=filters.per_page, items="deployments", out=deployment_out)


@router.post(
    "/deployments",
    auth=REPORT,
    response={
        200: DeploymentReportOut,
        201: DeploymentReportOut,
        **ERRORS,
        409: ErrorOut,
        429: ErrorOut,
        503: ErrorOut,
    },
    summary="Report a deployment's outcome (idempotent on marketplace_id)",
)
def deployment_report(request, body: DeploymentReportIn):
    """201 when this marketplace id is new; 200 when it was reported before (a repeat changes
    nothing; `released` after `deployed` moves the same record on); 409 when the report
    contradicts the record (another node or slice, a slice another id holds, a release for an id
    never seen, an impossible move, or a time before the move it would follow), naming the live
    deployment or the move. A failure older than the slice's last move is recorded as history
    (effect "history") without changing the slice. 429 when the token's reports that teach (a memory or
    disk refusal, a probe), or those on the node's ZOS build, reached their bound within
    LESSON_REPORTS_WINDOW (LESSON_REPORTS_PER_TOKEN, LESSON_REPORTS_PER_BUILD): send it again after
    Retry-After seconds. Nothing is written on a 4xx."""
    if body.slice_index is None and not body.probe:
        raise BadInput("slice_index is required (but for a probe, which is no slice)", field="slice_index")
    try:
        recorded, answer = _report_recorded(request, body)
    except LessonReportsBounded as exc:
        lesson_reports_refused(error=exc, token=request.auth)  # the report's transaction is rolled back
        raise
    return Status(201 if recorded.created else 200, answer)


def _report_recorded(request, body: DeploymentReportIn) -> tuple[OutcomeRecorded, DeploymentReportOut]:
    """The report recorded and its answer, in one transaction (api_write)."""
    with api_write("deployments.report", request):
        # Counted in the build's turn, inside the report's transaction (lessons.services.lesson_evidence).
        lesson_reports_checked(
            node_id=body.node_id,
            marketplace_id=body.marketplace_id,
            outcome=body.outcome,
            error=body.error,
            probe=body.probe,
            token=request.auth,
        )
        if body.probe:
            recorded = probe_outcome_record(
                node_id=body.node_id,
                marketplace_id=body.marketplace_id,
                outcome=body.outcome,
                error=body.error,
                at=body.at,
                by=request.auth.user,
                token=request.auth,
            )
        else:
            recorded = deployment_outcome_record(
                node_id=body.node_id,
                slice_index=body.slice_index,
                marketplace_id=body.marketplace_id,
                outcome=body.outcome,
                error=body.error,
                at=body.at,
                workload_id=body.workload_id,
                by=request.auth.user,
                source="api",
                token=request.auth,
            )
        deployment = Deployment.objects.select_related("node").get(pk=recorded.deployment.pk)
        answer = DeploymentReportOut.model_validate(
            {
                "created": recorded.created,
                "effect": str(recorded.move),
                "words": recorded.words,
                "deployment": deployment_out(deployment),
            }
        )
    return recorded, answer
