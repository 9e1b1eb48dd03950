"""Login throttling (django-axes): guessing a password is cut short, a good login is not."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def attempt(client, password):
    return client.post(reverse("login"), {"username": "ada", "password": password})


def test_it_locks_out_a_username_after_the_failure_limit(client, django_user_model, settings):
    django_user_model.objects.create_user("ada", password="right-horse-battery")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        attempt(client, "wrong")
    response = attempt(client, "right-horse-battery")
    assert response.status_code == 429
    assert b"Too many failed logins" in response.content


def test_it_lets_a_good_login_through_after_a_few_mistakes(client, django_user_model, settings):
    django_user_model.objects.create_user("ada", password="right-horse-battery")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        attempt(client, "wrong")
    assert attempt(client, "right-horse-battery").status_code == 302


def test_it_says_a_wrong_password_is_wrong_before_the_limit(client, django_user_model):
    django_user_model.objects.create_user("ada", password="right-horse-battery")
    assert attempt(client, "wrong").status_code == 200


LONG_USERNAME = "a" * 10_000


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_it_answers_a_10000_character_username_as_a_wrong_login(client, url):
    response = client.post(url, {"username": LONG_USERNAME, "password": "whatever"})
    # Each form's own words for a wrong login ("a correct" here, "the correct ... staff account" in the admin).
    assert response.status_code == 200
    assert b"correct username and password" in response.content


def test_it_counts_an_overlong_username_toward_the_lockout(client, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert client.post(reverse("login"), {"username": LONG_USERNAME, "password": "x"}).status_code == 200
    response = client.post(reverse("login"), {"username": LONG_USERNAME, "password": "x"})
    assert response.status_code == 429 and b"Too many failed logins" in response.content


def test_it_records_no_more_of_the_username_than_the_throttle_holds(client):
    from axes.models import AccessAttempt

    client.post(reverse("login"), {"username": LONG_USERNAME, "password": "x"})
    assert [len(u) for u in AccessAttempt.objects.values_list("username", flat=True)] == [255]


def test_it_still_lets_a_user_with_the_longest_allowed_name_log_in(client, django_user_model):
    django_user_model.objects.create_user("u" * 150, password="right-horse-battery")
    assert client.post(reverse("login"), {"username": "u" * 150, "password": "right-horse-battery"}).status_code == 302
