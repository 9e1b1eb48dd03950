"""Who may call the API: a bearer token with the operation's scope, and how often.

Only `Authorization: Bearer <token>` is read; the session cookie is never looked at, so a browser
signed in to the pages gets a 401 here (and, with no cookie auth, no CSRF hole to guard). The
pages, the other way round, only know the session: a token there is a visitor to send to login.
"""

from __future__ import annotations

from django.conf import settings
from django.core.cache import caches
from django.http import HttpRequest
from ninja.errors import AuthenticationError, AuthorizationError
from ninja.security import HttpBearer
from ninja.throttling import SimpleRateThrottle

from dashboard.access.services.tokens import SCOPE_PERMISSIONS, api_token_allows, api_token_use
from dashboard.models import ApiToken


class ScopeRefused(AuthorizationError):
    """A live token without the scope this operation needs (or whose user lost the permission)."""

    def __init__(self, token: ApiToken, scope: str):
        if scope in token.scopes:
            why = f"its user {token.user.get_username()} no longer has the permission behind it ({SCOPE_PERMISSIONS[scope]})"
        else:
            why = f"it holds {', '.join(token.scopes) or 'no scope'}"
        super().__init__(message=f"this operation needs the {scope!r} scope and token {token.prefix}… lacks it: {why}")


class TokenRefused(AuthenticationError):
    def __init__(self):
        super().__init__(
            message="send a live API token as 'Authorization: Bearer <token>'; none was sent, or it is unknown, "
            "revoked or expired (a signed-in browser session does not count here)"
        )


class TokenAuth(HttpBearer):
    """A live token holding `scope`; request.auth is then the ApiToken (its user loaded)."""

    def __init__(self, scope: str):
        if scope not in ApiToken.Scope.values:
            raise ValueError(f"unknown scope {scope!r}")
        self.scope = str(scope.value if isinstance(scope, ApiToken.Scope) else scope)
        super().__init__()

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        api_token = api_token_use(secret=token)
        if api_token is None:
            return None
        if not api_token_allows(api_token, self.scope):
            raise ScopeRefused(api_token, self.scope)
        return api_token


READ = TokenAuth(ApiToken.Scope.READ)
PRECHECK = TokenAuth(ApiToken.Scope.PRECHECK)
REPORT = TokenAuth(ApiToken.Scope.REPORT)
ACT = TokenAuth(ApiToken.Scope.ACT)


class TokenRateThrottle(SimpleRateThrottle):
    """settings.API_THROTTLE_RATE requests per token, counted in the `api-throttle` cache.

    The rate is read on every request (tests and operators change it without a restart of this
    object), and the count is kept per token, not per address: one marketplace behind a NAT
    is many clients, one leaked token is one budget.
    """

    scope = "api-token"
    THROTTLE_RATES = {"api-token": None}

    def __init__(self):
        super().__init__(rate="1/s")  # replaced on each request by the setting

    def allow_request(self, request: HttpRequest) -> bool:
        self.rate = settings.API_THROTTLE_RATE
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self.cache = caches["api-throttle"]
        return super().allow_request(request)

    def get_cache_key(self, request: HttpRequest) -> str | None:
        token = getattr(request, "auth", None)
        if not isinstance(token, ApiToken):
            return None
        return f"throttle_api_token_{token.pk}"
