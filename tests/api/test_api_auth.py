"""Who may call the API: bearer tokens with scopes; no session, no revoked or expired token."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from dashboard.access.services.tokens import api_token_revoke
from dashboard.models import ApiToken, Deployment

FLEET = "/api/v1/fleet"


@pytest.mark.django_db
def test_it_refuses_a_request_without_a_token(api_call):
    response = api_call("get", FLEET)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
def test_it_refuses_an_unknown_token(api_call):
    assert api_call("get", FLEET, "sdk_not-a-token-at-all").status_code == 401


@pytest.mark.django_db
def test_it_answers_a_token_with_the_scope(api_call, api_token):
    response = api_call("get", FLEET, api_token("read"))
    assert response.status_code == 200
    assert response.json()["nodes"] == 0


@pytest.mark.django_db
def test_it_refuses_a_token_without_the_scope_with_403(api_call, api_token):
    response = api_call("post", "/api/v1/explain", api_token("report"), json={"error": "x"})
    assert response.status_code == 403
    assert "'read' scope" in response.json()["detail"]


@pytest.mark.django_db
def test_it_refuses_a_revoked_token(api_call, api_token):
    secret = api_token("read")
    api_token_revoke(token=api_token.tokens[-1])
    assert api_call("get", FLEET, secret).status_code == 401


@pytest.mark.django_db
def test_it_refuses_an_expired_token(api_call, api_token):
    secret = api_token("read", expires_days=1)
    ApiToken.objects.filter(pk=api_token.tokens[-1].pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api_call("get", FLEET, secret).status_code == 401


@pytest.mark.django_db
def test_it_refuses_a_signed_in_session_on_the_api(admins_client):
    assert admins_client.get("/api/v1/fleet").status_code == 401


@pytest.mark.django_db
def test_it_refuses_a_session_cookie_on_an_action_too(admins_client):
    response = admins_client.post("/api/v1/explain", {"error": "x"}, content_type="application/json")
    assert response.status_code == 401


@pytest.mark.django_db
def test_it_sends_a_token_on_the_pages_to_the_login(client, api_token):
    response = client.get("/", headers={"Authorization": f"Bearer {api_token('read')}"})
    assert response.status_code == 302
    assert "/login/" in response["Location"]


@pytest.mark.django_db
def test_it_takes_a_post_with_a_token_and_no_csrf_cookie(api_token):
    strict = Client(enforce_csrf_checks=True)
    response = strict.post(
        "/api/v1/explain",
        {"error": "cpu capcity can't be 0"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_token('read')}"},
    )
    assert response.status_code == 200


@pytest.mark.django_db
def test_it_refuses_a_scope_whose_permission_the_user_lost(api_call, api_token, role_user):
    from django.contrib.auth.models import Group

    user = role_user("admins")
    secret = api_token("act", user=user)
    user.groups.remove(Group.objects.get(name="admins"))
    response = api_call("post", "/api/v1/nodes/1/reregister", secret, json={})
    assert response.status_code == 403
    assert "no longer has the permission" in response.json()["detail"]


@pytest.mark.django_db
def test_it_stamps_last_used(api_call, api_token):
    secret = api_token("read")
    api_call("get", FLEET, secret)
    assert ApiToken.objects.get(pk=api_token.tokens[-1].pk).last_used_at is not None


@pytest.mark.django_db
def test_it_throttles_per_token(api_call, api_token, settings):
    from django.core.cache import caches

    caches["api-throttle"].clear()
    settings.API_THROTTLE_RATE = "2/m"
    first, second = api_token("read"), api_token("read")
    responses = [api_call("get", FLEET, first) for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert int(responses[-1]["Retry-After"]) > 0
    assert api_call("get", FLEET, second).status_code == 200


def _send(client, method: str, path: str):
    return client.get(path) if method == "get" else getattr(client, method)(path, "{}", content_type="application/json")


def _operations(client):
    schema = client.get("/api/v1/openapi.json").json()
    return [(method, path.replace("{node_id}", "1774")) for path, ops in schema["paths"].items() for method in ops]


@pytest.mark.django_db
def test_it_refuses_every_operation_without_a_token_and_writes_nothing(client, sim_node):
    from dashboard.capacity import GiB
    from tests.invariants import state_snapshot

    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    before = (state_snapshot(), Deployment.objects.count())
    statuses = {(m, p): _send(client, m, p).status_code for m, p in _operations(client)}
    assert set(statuses.values()) == {401}, statuses
    assert (state_snapshot(), Deployment.objects.count()) == before


@pytest.mark.django_db
def test_it_refuses_every_operation_to_a_signed_in_admin_session(admins_client, sim_node):
    from dashboard.capacity import GiB
    from tests.invariants import state_snapshot

    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    before = (state_snapshot(), Deployment.objects.count())
    statuses = {(m, p): _send(admins_client, m, p).status_code for m, p in _operations(admins_client)}
    assert set(statuses.values()) == {401}, statuses
    assert (state_snapshot(), Deployment.objects.count()) == before
