"""Logging in and out, and the layout every page shares (CSP, CSRF header for htmx, navigation)."""

import re

import pytest
from django.urls import reverse


@pytest.mark.django_db
def test_it_shows_the_login_form(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b'name="password"' in response.content


@pytest.mark.django_db
def test_it_logs_in_and_lands_on_the_fleet(client, role_user):
    role_user("support", username="sam", password="s3cret-enough-pw")
    response = client.post(reverse("login"), {"username": "sam", "password": "s3cret-enough-pw"})
    assert response["Location"] == reverse("fleet")


@pytest.mark.django_db
def test_it_refuses_a_wrong_password(client, role_user):
    role_user("support", username="sam", password="s3cret-enough-pw")
    response = client.post(reverse("login"), {"username": "sam", "password": "guess"})
    assert response.status_code == 200
    assert b"enter a correct username and password" in response.content


@pytest.mark.django_db
def test_it_logs_out_only_with_a_post(support_client):
    assert support_client.get(reverse("logout")).status_code == 405
    assert support_client.post(reverse("logout")).status_code == 302
    assert support_client.get(reverse("fleet")).status_code == 302


@pytest.mark.django_db
def test_it_sends_a_strict_content_security_policy(support_client):
    policy = support_client.get(reverse("fleet"))["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/", "/deployments/failed/", "/jobs/", "/policy/", "/login/"])
def test_it_has_no_inline_script_or_style(admins_client, url):
    content = admins_client.get(url).content.decode()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", content)
    assert " style=" not in content and "<style" not in content


@pytest.mark.django_db
def test_it_gives_htmx_the_csrf_token_once_on_the_body(support_client):
    content = support_client.get(reverse("fleet")).content.decode()
    assert re.search(
        r"<body hx-headers='\{&quot;x-csrftoken&quot;: &quot;\w+&quot;\}'>|<body hx-headers='\{\"x-csrftoken\": \"\w+\"\}'>",
        content,
    )


@pytest.mark.django_db
def test_it_shows_the_admin_link_to_staff_only(client, role_user):
    client.force_login(role_user("admins", username="boss", is_staff=True))
    assert b'href="/admin/"' in client.get(reverse("fleet")).content
    client.force_login(role_user("support", username="helper"))
    assert b'href="/admin/"' not in client.get(reverse("fleet")).content
