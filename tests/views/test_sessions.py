"""Sessions end: SESSION_IDLE_TIMEOUT after the last request, SESSION_COOKIE_AGE after the login."""

import time

import pytest
from django.urls import reverse

from dashboard.views.middleware import LAST_SEEN_AT, SIGNED_IN_AT

pytestmark = pytest.mark.django_db


def session_set(client, **values) -> None:
    session = client.session
    for key, value in values.items():
        session[key] = value
    session.save()


def test_it_keeps_a_session_in_use(support_client):
    assert support_client.get(reverse("fleet")).status_code == 200
    assert support_client.get(reverse("fleet")).status_code == 200


def test_it_ends_a_session_idle_longer_than_the_idle_timeout(support_client, settings):
    session_set(support_client, **{LAST_SEEN_AT: int(time.time()) - settings.SESSION_IDLE_TIMEOUT - 1})
    response = support_client.get(reverse("fleet"))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_it_ends_a_session_older_than_the_cookie_age_even_in_use(support_client, settings):
    session_set(support_client, **{SIGNED_IN_AT: int(time.time()) - settings.SESSION_COOKIE_AGE - 1})
    response = support_client.get(reverse("fleet"))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_it_starts_both_clocks_again_at_a_login(client, role_user):
    role_user("support", username="sam", password="s3cret-enough-pw")
    session_set(client, **{SIGNED_IN_AT: 1, LAST_SEEN_AT: 1})
    client.post(reverse("login"), {"username": "sam", "password": "s3cret-enough-pw"})
    assert client.get(reverse("fleet")).status_code == 200


def test_it_notes_the_last_request_at_most_once_a_minute(support_client):
    support_client.get(reverse("fleet"))
    first = support_client.session[LAST_SEEN_AT]
    support_client.get(reverse("fleet"))
    assert support_client.session[LAST_SEEN_AT] == first
