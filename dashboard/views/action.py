"""The one guard of every button: a login, POST only (so Django's CSRF check applies), then the permission
for what the button does. Anonymous users are sent to the login page, a GET answers 405, a user without
the permission 403, in that order for every action (tests/test_architecture.py: no view guards a POST
by hand)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.contrib.auth.decorators import login_required, permission_required
from django.views.decorators.http import require_POST


def action(perms: str | Sequence[str]) -> Callable:
    """A view the button posts to, open to users with `perms` (one permission or all of several)."""

    def guarded(view: Callable) -> Callable:
        return login_required(require_POST(permission_required(perms, raise_exception=True)(view)))

    return guarded
