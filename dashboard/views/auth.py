"""Logging in: the forms behind /login/ and /admin/login/, and the username django-axes counts.

A username longer than any account's cannot be right. It is answered as the wrong login it is
and counted by the throttle, but without asking the database for a user, and django-axes never
sees more of it than its 255-character column holds (a 256-character username used to end in
a database error and an HTTP 500, before anyone was told the login was wrong).
"""

from __future__ import annotations

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_login_failed

# django-axes' AccessAttempt.username and AccessLog.username.
AXES_USERNAME_LENGTH = 255


def axes_username(request, credentials: dict | None = None) -> str | None:
    """AXES_USERNAME_CALLABLE: the username as axes would read it, cut to what its column holds."""
    if credentials:
        username = credentials.get("username")
    else:
        data = getattr(request, "data", None) or request.POST
        username = data.get("username")
    return username[:AXES_USERNAME_LENGTH] if isinstance(username, str) else username


def username_max_length() -> int:
    user_model = get_user_model()
    return user_model._meta.get_field(user_model.USERNAME_FIELD).max_length or AXES_USERNAME_LENGTH


class _RefusesImpossibleUsernames:
    """Django's AuthenticationForm sets max_length on its field after building it, so no validator checks it."""

    def clean(self):
        username = self.cleaned_data.get("username")
        if isinstance(username, str) and len(username) > username_max_length():
            # What authenticate() does for any wrong login, so django-axes counts it (and locks out).
            user_login_failed.send(sender=__name__, credentials={"username": username}, request=self.request)
            raise self.get_invalid_login_error()
        return super().clean()


class LoginForm(_RefusesImpossibleUsernames, AuthenticationForm):
    pass


class AdminLoginForm(_RefusesImpossibleUsernames, AdminAuthenticationForm):
    pass
