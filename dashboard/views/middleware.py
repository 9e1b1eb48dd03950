"""What every answer gets: no caching and a session that ends for a signed-in person, and the
product's own error pages in the embedded demo.

- Cache-Control: no-store on every page, fragment and export for a signed-in user: fleet
  figures and raw ZOS errors must not stay in a shared cache or a browser's disk cache.
- A session ends after SESSION_IDLE_TIMEOUT without a request, and SESSION_COOKIE_AGE after
  the login whatever happens; Django alone only has the second, and it slides with every save.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import Http404, JsonResponse
from django.utils.cache import add_never_cache_headers
from django.views.defaults import page_not_found, server_error

SIGNED_IN_AT = "dashboard.signed_in_at"
LAST_SEEN_AT = "dashboard.last_seen_at"
# The last request's time is written at most this often: a page that polls every second must
# not write its session every second.
LAST_SEEN_RESOLUTION = 60


class NoStoreForSignedIn:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            add_never_cache_headers(response)
        return response


class GridRequestsStore:
    """After each request, add the Grid Proxy requests it made to the /metrics tally (one upsert, or nothing)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        from dashboard.jobs.services.grid_requests import grid_requests_store  # the models load after this module

        grid_requests_store()
        return response


class SessionExpiry:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.user.is_authenticated:
            session_check(request)
        return self.get_response(request)


def session_check(request) -> None:
    """Log out a session that was idle too long or is too old; note the time of this request."""
    now = int(time.time())
    session = request.session
    signed_in_at = session.get(SIGNED_IN_AT)
    last_seen_at = session.get(LAST_SEEN_AT)
    too_old = signed_in_at is not None and now - signed_in_at > settings.SESSION_COOKIE_AGE
    idle = last_seen_at is not None and now - last_seen_at > settings.SESSION_IDLE_TIMEOUT
    if too_old or idle:
        logout(request)  # the view then answers as to anyone signed out: the login page
        return
    if signed_in_at is None:  # a session from before this check existed
        session[SIGNED_IN_AT] = now
    if last_seen_at is None or now - last_seen_at >= LAST_SEEN_RESOLUTION:
        session[LAST_SEEN_AT] = now


@receiver(user_logged_in)
def session_started(sender, request, user, **kwargs) -> None:
    # A login in an existing session (Django keeps its data) starts both clocks again.
    if request is not None and hasattr(request, "session"):
        now = int(time.time())
        request.session[SIGNED_IN_AT] = now
        request.session[LAST_SEEN_AT] = now


# Django's technical 404 and 500 pages carry this tag; the product's own pages do not.
_TECHNICAL_PAGE_MARK = b'<meta name="robots" content="NONE,NOARCHIVE">'


class ProductErrorPages:
    """With DEBUG on (the embedded demo), answer "not found" and "server error" with the product's
    own pages instead of Django's technical ones.

    The demo runs with DEBUG on, and a newcomer clicking a stale link would otherwise get a yellow
    page of URL patterns (with inline styles the CSP refuses). The traceback of a 500 is still
    logged by Django, so a developer loses nothing; DEBUG_ERROR_PAGES=true brings the technical
    pages back. With DEBUG off Django already uses templates/404.html and 500.html.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not settings.DEBUG or settings.DEBUG_ERROR_PAGES or response.status_code not in (404, 500):
            return response
        if response.streaming or _TECHNICAL_PAGE_MARK not in response.content:
            return response
        if response.status_code == 404:
            return page_not_found(request, getattr(request, "_not_found", None) or Http404())
        return server_error(request)

    def process_exception(self, request, exception):
        # Kept so the page can still say what was not found ("node 99 is not registered").
        if isinstance(exception, Http404):
            request._not_found = exception


API_PREFIX = "/api/"
_API_WORDS = {
    400: "the request could not be read; see /api/v1/docs for what each operation takes",
    403: "forbidden",
    404: "there is no such API operation; the operations are listed at /api/v1/docs",
    405: "this path does not take that method",
    413: "the request body is too large (DATA_UPLOAD_MAX_MEMORY_SIZE)",
    500: "the dashboard failed to answer; nothing was written. The error is logged",
}
# Headers of the answer that say what to do next: kept on the JSON one.
_API_KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")
# The longest query string the API reads. gunicorn.conf.py sets gunicorn's request line (method, path,
# query, protocol) to 8,190 bytes, its most, so an over-long query is this documented JSON 414, never
# gunicorn's plain-text one, whichever server runs the API (the OpenAPI lists 414 on every operation).
API_QUERY_MAX = 8000


class ApiErrorShape:
    """Every error under /api/ is {"detail", "field"} JSON, whoever made it; a query string longer than
    API_QUERY_MAX is refused here (414) before any view reads it.

    The API's own views already answer so (api/main.py); this is for the answers Django makes
    around them: an unknown path (404), a method a path does not take (405), a request Django
    itself refused (400). Outermost but for security, so it sees every inner layer's answer.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        query = request.META.get("QUERY_STRING", "")
        if request.path.startswith(API_PREFIX) and len(query) > API_QUERY_MAX:
            return JsonResponse(
                {
                    "detail": f"the query string is {len(query):,} bytes, more than the {API_QUERY_MAX:,} this API "
                    "reads; send long lists (exclude_nodes, exclude_farms) in pieces",
                    "field": None,
                },
                status=414,
            )
        response = self.get_response(request)
        if (
            not request.path.startswith(API_PREFIX)
            or response.status_code < 400
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        detail = _API_WORDS.get(response.status_code, response.reason_phrase.lower())
        if response.status_code == 405 and response.get("Allow"):
            detail += f": it takes {response['Allow']}"
        shaped = JsonResponse({"detail": detail, "field": None}, status=response.status_code)
        for name in _API_KEPT_HEADERS:
            if response.has_header(name):
                shaped[name] = response[name]
        return shaped
