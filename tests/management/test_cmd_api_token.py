"""manage.py api_token create | list | revoke."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard.access.services.tokens import api_token_use, token_hash
from dashboard.models import ApiToken, AuditEvent

pytestmark = pytest.mark.django_db


def _run(*args) -> str:
    out = StringIO()
    call_command("api_token", *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


@pytest.fixture
def marketplace(role_user):
    return role_user("admins", username="marketplace")


def test_it_prints_the_token_once_and_stores_only_its_hash(marketplace):
    secret = _run("create", "marketplace", "--scope", "read,report", "--name", "mp")
    token = ApiToken.objects.get()
    assert (token.key_hash, token.scopes, token.name) == (token_hash(secret), ["read", "report"], "mp")
    assert secret not in str(ApiToken.objects.values().get())


def test_it_makes_a_token_that_works(marketplace):
    assert api_token_use(secret=_run("create", "marketplace", "--scope", "read")) is not None


def test_it_sets_the_expiry(marketplace):
    _run("create", "marketplace", "--scope", "read", "--expires-days", "30")
    assert ApiToken.objects.get().expires_at is not None


def test_it_refuses_more_than_read_to_a_support_user(role_user):
    role_user("support", username="sam")
    with pytest.raises(CommandError, match="may not hold the report scope"):
        _run("create", "sam", "--scope", "read,report")
    assert ApiToken.objects.count() == 0


def test_it_refuses_an_unknown_scope(marketplace):
    with pytest.raises(CommandError, match="unknown scope write"):
        _run("create", "marketplace", "--scope", "write")


def test_it_refuses_an_unknown_user(db):
    with pytest.raises(CommandError, match="no user named 'nobody'"):
        _run("create", "nobody", "--scope", "read")


def test_it_lists_live_tokens_without_the_secret(marketplace):
    secret = _run("create", "marketplace", "--scope", "read", "--name", "mp")
    listed = _run("list")
    assert "marketplace\tmp\tread\tnever expires\tnever used" in listed
    assert secret not in listed


def test_it_revokes_by_prefix_and_audits(marketplace):
    secret = _run("create", "marketplace", "--scope", "read")
    assert _run("revoke", secret[:12]).startswith("revoked")
    assert api_token_use(secret=secret) is None
    assert AuditEvent.objects.filter(action="api-token.revoked", source="command").count() == 1


def test_it_hides_revoked_tokens_unless_asked(marketplace):
    _run("create", "marketplace", "--scope", "read", "--name", "old")
    _run("revoke", str(ApiToken.objects.get().pk))
    assert (_run("list"), "revoked" in _run("list", "--all")) == ("no tokens", True)
