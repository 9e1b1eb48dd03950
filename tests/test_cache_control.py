"""Cache-Control: no-store on everything a signed-in person is shown, pages and exports alike."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def no_store(response) -> bool:
    return "no-store" in response.get("Cache-Control", "")


@pytest.mark.parametrize("url", ["/", "/export.csv", "/jobs/", "/deployments/failed/", "/policy/", "/admin/"])
def test_it_forbids_storing_what_a_signed_in_user_is_shown(admins_client, role_user, url):
    admins_client.force_login(role_user("admins", username="root", is_staff=True, is_superuser=True))
    response = admins_client.get(url)
    assert response.status_code == 200 and no_store(response)


def test_it_forbids_storing_the_refusal_page_too(nogroup_client):
    assert no_store(nogroup_client.get(reverse("fleet")))
