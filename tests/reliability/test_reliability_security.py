"""Every view in the URL conf, tried anonymously, as support, and without a CSRF token.

The views are read from config.urls at collection time, so a new page is covered (or the
test asks for a sample value for its URL argument) without anyone remembering to add it.
Django's admin is tried at its root; it is Django's own and has its own login.

`manage.py check --deploy` with production settings is tests/test_settings.py's.
"""

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from dashboard import capacity
from dashboard.models import Job
from tests.conftest import rolled_back_after, sim_node_add, simgrid_copy
from tests.invariants import state_snapshot
from tests.url_conf import ACTIONS, HTMX, TOKEN_DOORS, VIEWS, url_of, url_world

# Long: part of `make test` and `make reliability`, not of the quick loop (`make check`).
pytestmark = pytest.mark.slow

GiB = capacity.GiB
# Pages whose POST reads and writes nothing, open to support: the failure page's Explain box posts so a
# pasted error never lands in a URL or an access log (issue 34). A bad form there is a 400, and the
# test below still checks that nothing was written.
READING_POSTS = {"deployments-failed"}


@pytest.fixture(scope="module")
def world_built_once(django_db_setup, django_db_blocker, tmp_path_factory):
    """conftest's `world` (the same node, registered from the same simulated grid) built once for the
    module's 305 tests instead of once each; its simulated grid in a folder of its own, its rows rolled
    back after the module (tests/conftest.py rolled_back_after)."""
    from django.test import override_settings

    from sim.grid import SimulatedGrid

    path = tmp_path_factory.mktemp("security-world") / "simgrid.sqlite3"
    grid = SimulatedGrid(path)
    with override_settings(SIMGRID_PATH=path, GRID_BACKEND="simulator"), rolled_back_after(django_db_blocker):
        node = sim_node_add(grid, 1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, policy_name="legacy")
        yield path, url_world(node)


@pytest.fixture
def world(world_built_once, simgrid_path, db):
    """The module's world on a copy of its simulated grid; what a test writes is undone after it."""
    path, world = world_built_once
    simgrid_copy(path, simgrid_path)
    return world


def refused_by_token_door(name: str, response) -> bool:
    return name in TOKEN_DOORS and response.status_code in (401, 404, 405)


def is_login_redirect(response) -> bool:
    location = response.get("Location", "")
    return response.status_code == 302 and (
        location.startswith(reverse(settings.LOGIN_URL) + "?next=") or location.startswith("/admin/login/")
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "route"), ACTIONS, ids=[n for n, _ in ACTIONS])
@pytest.mark.parametrize("method", ["get", "post"])
def test_it_shows_anonymous_visitors_nothing_but_the_login_page(client, world, name, route, method):
    before = state_snapshot()
    response = getattr(client, method)(url_of(name, route, world))
    assert is_login_redirect(response) or response.status_code == 403 or refused_by_token_door(name, response), (
        response.status_code,
        response.get("Location"),
    )
    assert state_snapshot() == before


@pytest.mark.django_db
def test_it_shows_anonymous_visitors_the_login_form_without_data(client, world):
    response = client.get(reverse("login"))
    assert response.status_code == 200 and b"1774" not in response.content


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "route"), ACTIONS, ids=[n for n, _ in ACTIONS])
@pytest.mark.parametrize("headers", [{}, HTMX], ids=["form", "htmx"])
def test_it_refuses_every_action_to_support(support_client, world, name, route, headers):
    before = state_snapshot()
    response = support_client.post(url_of(name, route, world), {"save": "1", "name": "x"}, **headers)
    if name in READING_POSTS:
        assert response.status_code in (200, 400), response.status_code
    else:
        assert (
            response.status_code in (403, 405) or is_login_redirect(response) or refused_by_token_door(name, response)
        ), response.status_code
    assert state_snapshot() == before


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "route"), ACTIONS, ids=[n for n, _ in ACTIONS])
def test_it_lets_support_read_every_page_without_an_error(support_client, world, name, route):
    response = support_client.get(url_of(name, route, world), **HTMX)
    assert response.status_code in (200, 302, 403, 405) or refused_by_token_door(name, response), response.status_code


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "route"), VIEWS, ids=[n for n, _ in VIEWS])
def test_it_refuses_a_post_without_a_csrf_token(role_user, world, name, route):
    admin = Client(enforce_csrf_checks=True)
    admin.force_login(role_user("admins", username="ada", is_staff=True, is_superuser=True))
    before = state_snapshot()
    response = admin.post(url_of(name, route, world), {"save": "1"}, **HTMX)
    assert response.status_code == 403 or refused_by_token_door(name, response), response.status_code
    assert state_snapshot() == before


@pytest.mark.django_db
def test_it_accepts_the_same_action_with_its_csrf_token(role_user, world, django_capture_on_commit_callbacks):
    # The control for the test above: what refused it was the missing token, not the view.
    admin = Client(enforce_csrf_checks=True)
    admin.force_login(role_user("admins", username="ada"))
    token = admin.get(reverse("node", args=[1774])).cookies[settings.CSRF_COOKIE_NAME].value
    response = admin.post(reverse("node-precheck", args=[1774]), HTTP_X_CSRFTOKEN=token)
    assert (
        response.status_code == 302 and Job.objects.filter(kind=Job.Kind.PRECHECK, state=Job.State.QUEUED).count() == 1
    )
