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
