"""The one guard of every page a user reads: a login, GET only, then the permission to read what it shows.
Anonymous users are sent to the login page, another method answers 405, a user without the permission 403,
in that order for every page, as views.action orders them for every button."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.contrib.auth.decorators import login_required, permission_required
from django.views.decorators.http import require_GET


def page(perms: str | Sequence[str]) -> Callable:
    """A page (or a region of one) open to users with `perms` (one permission or all of several)."""

    def guarded(view: Callable) -> Callable:
        return login_required(require_GET(permission_required(perms, raise_exception=True)(view)))

    return guarded
