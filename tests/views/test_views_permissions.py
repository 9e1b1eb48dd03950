"""Least privilege: a signed-in account in no group reads nothing, and is told whom to ask.

Every view in the URL conf is tried, as in test_reliability_security.py, so a new page is
covered without anyone remembering to add it.
"""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from tests.conftest import rolled_back_after
from tests.url_conf import ACTIONS, HTMX, TOKEN_DOORS, url_of, url_world

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def world_built_once(django_db_setup, django_db_blocker):
    """conftest's `world` once for the module (its tests only read it), rolled back after it; the node
    registered from its totals (no page here reads the grid: every one refuses first)."""
    from dashboard.capacity import GiB, Resources
    from dashboard.nodes.services.registration import node_register

    with rolled_back_after(django_db_blocker):
        total = Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
        yield url_world(node_register(node_id=1774, total=total, farm_id=4242, policy_name="legacy"))


@pytest.fixture
def world(world_built_once, db):
    return world_built_once


# The API and /metrics are doors for tokens, not sessions: tests/api/test_api_auth.py and
# tests/views/test_views_metrics.py show they refuse a session, whatever its groups.
PAGES = [(name, route) for name, route in ACTIONS if not name.endswith(":root") and name not in TOKEN_DOORS]


@pytest.mark.parametrize(("name", "route"), PAGES, ids=[n for n, _ in PAGES])
@pytest.mark.parametrize("headers", [{}, HTMX], ids=["page", "htmx"])
def test_it_refuses_every_page_to_a_user_in_no_group(nogroup_client, world, name, route, headers):
    response = nogroup_client.get(url_of(name, route, world), **headers)
    assert response.status_code in (403, 405), response.status_code
    assert b"1774" not in response.content


@pytest.mark.parametrize("url", ["/export.csv", "/?format=csv"])
def test_it_refuses_the_csv_export_to_a_user_in_no_group(nogroup_client, world, url):
    response = nogroup_client.get(url)
    assert response.status_code == 403
    assert response["Content-Type"].startswith("text/html") and b"1774" not in response.content


def test_it_tells_a_user_in_no_group_whom_to_ask(nogroup_client, settings):
    settings.ACCESS_REQUEST_CONTACT = "the operations desk (ops@example.com)"
    content = nogroup_client.get(reverse("fleet")).content.decode()
    assert "nora" in content and "in no group" in content
    assert "Ask the operations desk (ops@example.com) to add you to the <strong>support</strong> group" in content


def test_it_shows_a_user_in_no_group_no_navigation_to_pages_it_cannot_read(nogroup_client):
    content = nogroup_client.get(reverse("fleet")).content.decode()
    assert 'href="/jobs/"' not in content and 'href="/deployments/failed/"' not in content


@pytest.mark.parametrize("role", ["support", "admins"])
def test_it_lets_both_groups_read_the_fleet_and_the_csv(client, role_user, world, role):
    client.force_login(role_user(role))
    assert client.get(reverse("fleet")).status_code == 200
    assert b"1774" in client.get(reverse("fleet-export")).content


@pytest.mark.parametrize("role", ["support", "admins"])
def test_it_gives_both_groups_every_view_permission_by_migration(role_user, role):
    role_user(role)
    codenames = set(Group.objects.get(name=role).permissions.values_list("codename", flat=True))
    assert {"view_node", "view_slice", "view_deployment", "view_job", "view_policy", "view_capacitysample"} <= codenames


def test_it_still_tells_support_that_acting_is_for_admins(support_client, world):
    response = support_client.post(reverse("node-precheck", args=[1774]))
    assert response.status_code == 403 and b"for the <strong>admins</strong> group" in response.content
