"""manage.py api_token create USERNAME --scope read,report [--name N] [--expires-days D]
manage.py api_token list [--user USERNAME] [--all]
manage.py api_token revoke (TOKEN_ID | PREFIX)

`create` prints the token once, on stdout alone (so `TOKEN=$(manage.py api_token create ...)` works);
nothing can show it again. Exit statuses: dashboard/management/cli.py (listed by --help).
"""

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from dashboard.access.services.tokens import TokenError, api_token_create, api_token_revoke
from dashboard.management.cli import ProductCommand, usage_error
from dashboard.models import ApiToken


class Command(ProductCommand):
    help = "Make, list and revoke API tokens (Authorization: Bearer <token> on /api/v1/)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="make a token for a user and print it once")
        create.add_argument("username")
        create.add_argument("--scope", required=True, help="comma-separated: read, precheck, report, act")
        create.add_argument("--name", default=None, help="what will use it (default: cli-<date>)")
        create.add_argument(
            "--expires-days", type=int, default=None, help="days until it stops working (default: never)"
        )
        listing = sub.add_parser("list", help="tokens, newest first (never the tokens themselves)")
        listing.add_argument("--user", default=None, help="only this user's")
        listing.add_argument("--all", action="store_true", help="revoked and expired ones too")
        revoke = sub.add_parser("revoke", help="stop a token from working, from now on")
        revoke.add_argument("token", help="its id (from list) or its prefix, e.g. sdk_AbCd1234")

    def handle(self, *args, action, **options):
        return getattr(self, f"_{action}")(**options)

    def _create(self, *, username, scope, name, expires_days, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise usage_error(f"no user named {username!r}")
        name = name or f"cli-{timezone.now():%Y%m%d-%H%M%S}"
        try:
            issued = api_token_create(user=user, name=name, scopes=scope, expires_days=expires_days, source="command")
        except TokenError as exc:
            raise usage_error(f"{exc.field}: {exc}") from None
        self.stderr.write(
            f"made {issued.token.prefix}… {issued.token.name!r} for {username} (scope {', '.join(issued.token.scopes)}); "
            "copy the token below now, it will not be shown again"
        )
        self.stdout.write(issued.secret)

    def _list(self, *, user, all, **options):
        tokens = ApiToken.objects.select_related("user")
        if user:
            tokens = tokens.filter(user__username=user)
        now = timezone.now()
        if not all:
            tokens = tokens.filter(revoked_at__isnull=True).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        rows = list(tokens)
        if not rows:
            self.stdout.write("no tokens")
            return
        for t in rows:
            state = (
                f"revoked {t.revoked_at:%Y-%m-%d %H:%M}"
                if t.revoked_at
                else f"expired {t.expires_at:%Y-%m-%d %H:%M}"
                if not t.is_usable(now)
                else f"expires {t.expires_at:%Y-%m-%d %H:%M}"
                if t.expires_at
                else "never expires"
            )
            used = f"last used {t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never used"
            self.stdout.write(
                f"{t.pk}\t{t.prefix}…\t{t.user.get_username()}\t{t.name}\t{','.join(t.scopes)}\t{state}\t{used}"
            )

    def _revoke(self, *, token, **options):
        matches = ApiToken.objects.select_related("user")
        found = (
            list(matches.filter(pk=int(token))) if token.isdigit() else list(matches.filter(prefix=token.rstrip("…")))
        )
        if not found:
            raise usage_error(f"no token {token!r}; see manage.py api_token list --all")
        if len(found) > 1:
            raise usage_error(f"{token!r} names {len(found)} tokens; revoke by id")
        target = found[0]
        if api_token_revoke(token=target, source="command"):
            self.stdout.write(f"revoked {target.prefix}… {target.name!r} of {target.user.get_username()}")
        else:
            self.stdout.write(f"{target.prefix}… {target.name!r} was revoked already")
