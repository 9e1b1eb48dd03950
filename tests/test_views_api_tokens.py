"""The API tokens page: admins make (shown once) and revoke tokens; nobody else gets in."""

import pytest
from django.urls import reverse

from dashboard.models import ApiToken, AuditEvent
from dashboard.services.tokens import token_hash

pytestmark = pytest.mark.django_db
URL = reverse("api-tokens")


@pytest.fixture
def holder(role_user):
    return role_user("support", username="reader")


def _make(client, holder, **fields):
    data = {"user": holder.pk, "name": "grafana", "scopes": ["read"], "expires_days": "", **fields}
    return client.post(URL, data)


def test_it_shows_a_new_token_once(admins_client, holder):
    response = _make(admins_client, holder)
    secret = response.context["issued"].secret
    assert ApiToken.objects.get().key_hash == token_hash(secret)
    assert secret.encode() in response.content
    assert secret.encode() not in admins_client.get(URL).content


def test_it_audits_who_made_it(admins_client, holder):
    _make(admins_client, holder)
    event = AuditEvent.objects.get(action="api-token.created")
    assert (event.actor.username, event.source) == ("ada", "web")


def test_it_refuses_a_scope_beyond_the_holders_rights(admins_client, holder):
    response = _make(admins_client, holder, scopes=["read", "act"])
    assert response.status_code == 400
    assert b"may not hold the act scope" in response.content


def test_it_revokes(admins_client, holder):
    _make(admins_client, holder)
    token = ApiToken.objects.get()
    response = admins_client.post(reverse("api-token-revoke", args=[token.pk]))
    assert response.status_code == 302
    assert ApiToken.objects.get().revoked_at is not None


def test_it_refuses_support_users(support_client):
    assert support_client.get(URL).status_code == 403


def test_it_sends_anonymous_visitors_to_the_login_page(client):
    assert client.get(URL)["Location"].startswith(reverse("login"))


def test_it_refuses_a_get_on_revoke(admins_client, holder):
    _make(admins_client, holder)
    assert admins_client.get(reverse("api-token-revoke", args=[ApiToken.objects.get().pk])).status_code == 405
