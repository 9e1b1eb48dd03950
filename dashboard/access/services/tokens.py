"""API tokens: made, used and revoked here, each change audited.

A token is `sdk_` and 43 URL-safe characters (256 random bits). Only its SHA-256 is stored: with
that much entropy a slow password hash adds nothing but latency to every API call. The token is
returned once, by `api_token_create`; nobody can read it back afterwards.

A scope is only as strong as the holder's own permission: `api_token_allows` checks both on every
request, so taking someone out of the admins group also takes the power out of their tokens, and a
support user (who may only read the pages) can only ever be given, and use, `read`.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from dashboard.access.services.audit_trail import actor_of, audit_record
from dashboard.models import ApiToken

TOKEN_PREFIX = "sdk_"
# Characters of the token kept in clear to recognise it in lists: "sdk_" and 8 of the secret.
SHOWN_CHARACTERS = 12
# last_used_at is written at most this often per token: one UPDATE per minute, not per request.
LAST_USED_RESOLUTION = timedelta(seconds=60)
MAX_EXPIRES_DAYS = 3650

# The permission (as the pages check it) that each scope stands for.
SCOPE_PERMISSIONS = {
    ApiToken.Scope.READ: "dashboard.view_node",
    ApiToken.Scope.PRECHECK: "dashboard.precheck_node",
    # Reporting an outcome writes a deployment and moves a slice: the same right as deploying one.
    ApiToken.Scope.REPORT: "dashboard.deploy_slice",
    ApiToken.Scope.ACT: "dashboard.reregister_node",
}


class TokenError(ValueError):
    """A token that cannot be made or revoked as asked; `field` names the input at fault."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    secret: str  # the bearer token itself; shown once, never stored


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", errors="surrogatepass")).hexdigest()


def scopes_parse(text: str | list[str]) -> list[str]:
    """'read,report' (or a list) -> ['read', 'report'] in the canonical order; TokenError otherwise."""
    items = text.split(",") if isinstance(text, str) else list(text)
    wanted = {item.strip() for item in items if item.strip()}
    if not wanted:
        raise TokenError(f"give at least one scope: {', '.join(ApiToken.Scope.values)}", field="scopes")
    unknown = sorted(wanted - set(ApiToken.Scope.values))
    if unknown:
        raise TokenError(
            f"unknown scope {', '.join(unknown)}; scopes are {', '.join(ApiToken.Scope.values)}", field="scopes"
        )
    return [scope for scope in ApiToken.Scope.values if scope in wanted]


def _check_may_hold(*, user, maker, scopes: list[str]) -> None:
    """TokenError unless `maker` (None: the operator's shell) may make `user` a token with these scopes:
    oneself or, for a superuser, anyone; an active user; no scope beyond what the user may do."""
    if maker is not None and maker.pk != user.pk and not maker.is_superuser:
        raise TokenError(
            f"{maker.get_username()} may make tokens for themselves only, not for {user.get_username()}: whatever "
            f"a token does is done in its user's name. A superuser can make one for someone else",
            field="user",
        )
    if not user.is_active:
        raise TokenError(f"{user.get_username()} is not an active user; tokens are for active users only", field="user")
    refused = [scope for scope in scopes if not user.has_perm(SCOPE_PERMISSIONS[scope])]
    if refused:
        raise TokenError(
            f"{user.get_username()} may not hold the {', '.join(refused)} scope"
            f"{'s' if len(refused) > 1 else ''}: a token can do no more than its user may do on the pages "
            f"(support users can hold read only)",
            field="scopes",
        )


def api_token_create(
    *,
    user,
    name: str,
    scopes: list[str] | str,
    expires_days: int | None = None,
    by=None,
    source: str = "web",
) -> IssuedToken:
    """Make a token for `user`; the result carries the secret, the only time it exists in clear.

    TokenError (nothing written) when the name is empty or taken by another live token of the
    user, a scope is unknown or beyond the user's own permissions, the expiry is out of range, or
    `by` makes it for someone else without being a superuser: a token is made for oneself (its
    jobs and reports then read "asked by" the one who made it), or by a superuser for anyone. The
    command line (`by` None) is the operator's shell, which may already do anything.
    """
    name = (name or "").strip()
    if not name or len(name) > ApiToken._meta.get_field("name").max_length:
        raise TokenError("a token needs a name of 1 to 80 characters, e.g. the program that will use it", field="name")
    chosen = scopes_parse(scopes)
    maker = actor_of(by)
    _check_may_hold(user=user, maker=maker, scopes=chosen)
    if expires_days is not None and not (1 <= expires_days <= MAX_EXPIRES_DAYS):
        raise TokenError(f"expiry must be 1 to {MAX_EXPIRES_DAYS} days, not {expires_days}", field="expires_days")

    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = timezone.now()
    expires_at = now + timedelta(days=expires_days) if expires_days is not None else None
    actor = actor_of(by)
    try:
        with transaction.atomic():
            token = ApiToken.objects.create(
                user=user,
                name=name,
                prefix=secret[:SHOWN_CHARACTERS],
                key_hash=token_hash(secret),
                scopes=chosen,
                created_by=actor,
                expires_at=expires_at,
            )
            audit_record(
                action="api-token.created",
                actor=actor,
                source=source,
                message=f"API token {token.prefix}… {name!r} made for {user.get_username()} with scope "
                f"{', '.join(chosen)}, {_expiry_words(expires_at)}",
                detail=_token_detail(token),
            )
    except IntegrityError:
        raise TokenError(
            f"{user.get_username()} already has a live token named {name!r}; pick another name or revoke that one",
            field="name",
        ) from None
    return IssuedToken(token=token, secret=secret)


def api_token_revoke(*, token: ApiToken, by=None, source: str = "web") -> bool:
    """Revoke the token from now on; False when it was revoked already (nothing written then)."""
    now = timezone.now()
    actor = actor_of(by)
    with transaction.atomic():
        changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now, revoked_by=actor)
        if changed:
            token.revoked_at, token.revoked_by = now, actor
            audit_record(
                action="api-token.revoked",
                actor=actor,
                source=source,
                message=f"API token {token.prefix}… {token.name!r} of {token.user.get_username()} revoked",
                detail=_token_detail(token),
            )
    return bool(changed)


def api_token_use(*, secret: str, now: datetime | None = None) -> ApiToken | None:
    """The live token with this secret (its user loaded), or None: unknown, revoked or expired.

    Stamps last_used_at, at most once per LAST_USED_RESOLUTION, so a busy client costs one
    SELECT per request and one UPDATE per minute.
    """
    if not secret or not secret.startswith(TOKEN_PREFIX) or len(secret) > 128:
        return None
    now = now or timezone.now()
    token = ApiToken.objects.select_related("user").filter(key_hash=token_hash(secret)).first()
    if token is None or not token.is_usable(now) or not token.user.is_active:
        return None
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def api_token_allows(token: ApiToken, scope: str) -> bool:
    """The token holds `scope` and its user still has the permission behind it."""
    return scope in token.scopes and token.user.has_perm(SCOPE_PERMISSIONS[scope])


def _expiry_words(expires_at: datetime | None) -> str:
    return f"expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "never expires"


def _token_detail(token: ApiToken) -> dict:
    """What the trail keeps of a token: never its secret, nor its hash."""
    return {
        "token": token.pk,
        "prefix": token.prefix,
        "name": token.name,
        "user": token.user.get_username(),
        "scopes": token.scopes,
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
    }
