"""What every answer to a signed-in person gets: no caching, and a session that ends.

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
from django.utils.cache import add_never_cache_headers

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
        from dashboard.services.grid_requests import grid_requests_store  # the models load after this module

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
