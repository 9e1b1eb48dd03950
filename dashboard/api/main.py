"""The NinjaAPI of /api/v1/: its routers, its throttle, and every error as {"detail", "field"}.

Bad input is a 400 naming the field (django-ninja's own 422 for a schema error included): the
marketplace's programs read one status for "fix your request". A body over
DATA_UPLOAD_MAX_MEMORY_SIZE is a 413 in the same shape, and anything unforeseen a 500 in it too
(logged with its traceback); what the request wrote is rolled back first (api/writes.py). Answers
made outside the API's views (an unknown path, a method a path does not take) get the same shape
from dashboard.views.middleware.ApiErrorShape.
"""

from __future__ import annotations

import copy
import functools
import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, AuthorizationError, HttpError, Throttled, ValidationError

from dashboard.api import deployments, explain, holds, jobs, nodes, placement, policies, probes, withholds
from dashboard.api.auth import TokenRateThrottle, TokenRefused
from dashboard.api.errors import BadInput, GridTrouble, JobNotQueued
from dashboard.catalogs.services.reregister.rollback import RollbackRefused
from dashboard.catalogs.services.reregister.waves import WaveRefused
from dashboard.deployments.services.holds import HoldConflict, HoldError, HoldForbidden, HoldNotFound
from dashboard.deployments.services.outcomes import OutcomeConflict, OutcomeError
from dashboard.jobs.services.jobs import JobError
from dashboard.lessons.services.group_steps import LockConflict
from dashboard.lessons.services.lesson_evidence import LessonReportsBounded

log = logging.getLogger(__name__)

# What any operation may answer besides its own statuses, each in ErrorOut's shape (listed on every
# operation of the OpenAPI document, so a client and schemathesis know them; 413 where a body is read).
ANY_OPERATION = {
    414: "the query string is longer than the API reads (API_QUERY_MAX, 8,000 bytes): send long lists in pieces",
    429: "too many requests for this token (API_THROTTLE_RATE): wait for Retry-After seconds",
    500: "the dashboard failed to answer; nothing was written (the error is logged)",
}
WITH_A_BODY = {413: "the request body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE; nothing was read or written"}


class SliceCatalogApi(NinjaAPI):
    """NinjaAPI whose OpenAPI document lists, on every operation, the answers the door itself may give.

    The document is made once per path prefix and process: it depends only on the routes and schemas
    declared at import, and making it walks every one of them (0.2 s an ask on this machine).
    Each caller gets its own copy, so none can change what the next one reads.
    """

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        key = (path_prefix, tuple(sorted((path_params or {}).items())))
        made = self._documents.get(key)
        if made is None:
            # A plain dict: ninja's OpenAPISchema also holds the whole API, which a copy would copy too.
            made = self._documents[key] = dict(self._openapi_document(path_prefix=path_prefix, path_params=path_params))
        return copy.deepcopy(made)

    def _openapi_document(self, *, path_prefix, path_params):
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        for item in schema["paths"].values():
            for operation in item.values():
                responses = operation.setdefault("responses", {})
                given = {**ANY_OPERATION, **(WITH_A_BODY if "requestBody" in operation else {})}
                for status, words in given.items():
                    if status not in responses and str(status) not in responses:
                        responses[status] = {
                            "description": words,
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
                        }
        return schema

    @functools.cached_property
    def _documents(self) -> dict:
        return {}


api = SliceCatalogApi(
    title="Slice catalog dashboard API",
    version="1",
    description=(
        "Read the fleet's slice catalogs and their figures, ask for a live precheck, start a re-register, "
        "report deployment outcomes, and have ZOS errors explained. Every call needs "
        "`Authorization: Bearer <token>` with the scope the operation names (read, precheck, report, act); "
        "tokens are made by admins (`manage.py api_token create`, or [the API tokens page](/api-tokens/)). "
        "Sizes are bytes.\n\n[← Back to the dashboard](/)"
    ),
    urls_namespace="api-v1",
    throttle=[TokenRateThrottle()],
)

for module in (nodes, placement, holds, jobs, deployments, probes, policies, explain, withholds):
    api.add_router("/", module.router)


def _error(request, status: int, detail: str, field: str | None = None, **extra):
    return api.create_response(request, {"detail": detail, "field": field, **extra}, status=status)


@api.exception_handler(ValidationError)
def _invalid(request, exc: ValidationError):
    errors = [{"field": _field(e.get("loc", ())), "message": e.get("msg", "invalid")} for e in exc.errors]
    first = errors[0] if errors else {"field": None, "message": "invalid input"}
    detail = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
    return _error(request, 400, detail, first["field"], errors=errors)


def _field(loc) -> str | None:
    # ("body", "body", "slice_index") / ("query", "page") -> "slice_index" / "page"
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "filters")]
    return ".".join(parts) or None


@api.exception_handler(BadInput)
def _bad_input(request, exc: BadInput):
    return _error(request, 400, str(exc), exc.field)


@api.exception_handler(OutcomeError)
def _outcome_refused(request, exc: OutcomeError):
    return _error(request, 409 if isinstance(exc, OutcomeConflict) else 400, str(exc), exc.field)


@api.exception_handler(HoldError)
def _hold_refused(request, exc: HoldError):
    status = 409 if isinstance(exc, HoldConflict) else 404 if isinstance(exc, HoldNotFound) else 400
    status = 403 if isinstance(exc, HoldForbidden) else status
    return _error(request, status, str(exc), exc.field)


@api.exception_handler(JobError)
def _job_refused(request, exc: JobError):
    return _error(request, 400, str(exc))


@api.exception_handler(WaveRefused)
@api.exception_handler(RollbackRefused)
def _steering_refused(request, exc: JobError):
    # A run that cannot be steered or rolled back now: the request was right, the run's state says no.
    return _error(request, 409, str(exc))


@api.exception_handler(GridTrouble)
def _grid_trouble(request, exc: GridTrouble):
    response = _error(request, 503, str(exc), cause=exc.cause)
    response["Retry-After"] = "10"
    return response


@api.exception_handler(JobNotQueued)
def _job_not_queued(request, exc: JobNotQueued):
    response = _error(request, 503, str(exc), job_id=exc.job_id)
    response["Retry-After"] = "10"
    return response


@api.exception_handler(LockConflict)
def _lock_conflict(request, exc: LockConflict):
    # PostgreSQL refused the write as a lock conflict several times (lessons.services.group_steps): busy, not broken.
    response = _error(request, 503, str(exc))
    response["Retry-After"] = "1"
    return response


@api.exception_handler(Http404)
def _not_found(request, exc: Http404):
    return _error(request, 404, str(exc) or "not found")


@api.exception_handler(AuthenticationError)
def _unauthenticated(request, exc: AuthenticationError):
    response = _error(request, 401, TokenRefused().message)
    response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


@api.exception_handler(AuthorizationError)
def _forbidden(request, exc: AuthorizationError):
    return _error(request, 403, exc.message)


@api.exception_handler(Throttled)
def _throttled(request, exc: Throttled):
    return _error(request, 429, "too many requests for this token; wait for Retry-After seconds (API_THROTTLE_RATE)")


@api.exception_handler(LessonReportsBounded)
def _lesson_reports_bounded(request, exc: LessonReportsBounded):
    response = _error(request, 429, str(exc))
    response["Retry-After"] = str(exc.retry_after)
    return response


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    # django-ninja's own refusals, e.g. a body that is not JSON: 400 "Cannot parse request body".
    if exc.status_code == 400:
        return _error(request, 400, f"the request body could not be read as JSON: {exc.message}", "body")
    return _error(request, exc.status_code, str(exc.message))


@api.exception_handler(RequestDataTooBig)
def _too_big(request, exc: RequestDataTooBig):
    return _error(
        request,
        413,
        f"the request body is larger than the {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes this API takes "
        "(DATA_UPLOAD_MAX_MEMORY_SIZE); nothing was read or written",
    )


@api.exception_handler(Exception)
def _server_error(request, exc: Exception):
    # The request's writes are rolled back already (api_write); the traceback is for the logs only.
    log.error("Internal Server Error: %s %s", request.method, request.path, exc_info=exc)
    return _error(request, 500, "the dashboard failed to answer; nothing was written. The error is logged")
