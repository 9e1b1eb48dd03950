"""POST /api/v1/explain: a ZOS error text in, the classifier's cause, numbers and words out."""

from __future__ import annotations

from ninja import Router

from dashboard.api.auth import READ
from dashboard.api.schemas import ERRORS, DiagnosisOut, ExplainIn
from dashboard.grid.classify import classify

router = Router(tags=["explain"])


@router.post(
    "/explain",
    auth=READ,
    response={200: DiagnosisOut, **ERRORS},
    summary="Explain a ZOS error message",
)
def explain(request, body: ExplainIn):
    return classify(body.error).as_dict()
