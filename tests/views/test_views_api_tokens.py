"""The API tokens page: admins make tokens for themselves (shown once) and revoke tokens; a superuser
makes them for anyone; nobody else gets in."""

import pytest
from django.urls import reverse

from dashboard.access.services.tokens import token_hash
from dashboard.models import ApiToken, AuditEvent

pytestmark = pytest.mark.django_db
URL = reverse("api-tokens")


@pytest.fixture
def holder(admins_client, django_user_model):
    """The signed-in admin: a token is made for oneself."""
    return django_user_model.objects.get(username="ada")


@pytest.fixture
def root_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="not-a-real-password-1774"))
    return client


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


def test_it_refuses_a_scope_beyond_the_holders_rights(root_client, role_user):
    response = _make(root_client, role_user("support", username="reader"), scopes=["read", "act"])
    assert response.status_code == 400
    assert b"may not hold the act scope" in response.content


def test_an_admin_makes_tokens_for_themselves_only(admins_client, role_user, django_user_model):
    root = django_user_model.objects.create_superuser("root", password="not-a-real-password-1774")
    for someone in (root, role_user("support", username="reader")):
        response = _make(admins_client, someone)
        assert response.status_code == 400
        assert not ApiToken.objects.exists()
    assert list(response.context["form"].fields["user"].queryset.values_list("username", flat=True)) == ["ada"]


def test_a_superuser_makes_a_token_for_anyone(root_client, role_user):
    reader = role_user("support", username="reader")
    assert _make(root_client, reader).status_code == 200
    assert ApiToken.objects.get().user == reader


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
