"""The node page: capacity bars, catalog, verdicts, and the admin actions that start jobs."""

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from dashboard import capacity
from dashboard.catalogs.services.precheck import precheck_run
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import Job, Node, Slice
from tests.conftest import rolled_back_after, sim_node_add, simgrid_copy
from tests.factories import sim_node_1774

GiB = capacity.GiB
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(scope="class")
def node_1774_built(django_db_setup, django_db_blocker, tmp_path_factory):
    """Node 1774 as the marketplace has it: the legacy 7-slice catalog, slice 0 deployed, prechecked;
    built once for the class (its simulated grid in a folder of its own, its rows rolled back after)."""
    from sim.grid import SimulatedGrid

    path = tmp_path_factory.mktemp("node-1774") / "simgrid.sqlite3"
    grid = SimulatedGrid(path)

    def add(node_id, **options):
        return sim_node_add(grid, node_id, **options)

    add.grid = grid
    with override_settings(SIMGRID_PATH=path, GRID_BACKEND="simulator"), rolled_back_after(django_db_blocker):
        precheck_run(node=sim_node_1774(add, deployed=(0,)), grid=grid)
        yield path


@pytest.fixture
def node_1774(node_1774_built, simgrid_path, db):
    """The class's node 1774 on a copy of its simulated grid; what a test writes is undone after it."""
    simgrid_copy(node_1774_built, simgrid_path)
    return Node.objects.get(grid_id=1774)


@pytest.mark.django_db
class TestNode1774:
    def test_it_sends_anonymous_visitors_to_the_login_page(self, client, node_1774):
        response = client.get(reverse("node", args=[1774]))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))

    def test_it_shows_the_whole_catalog(self, support_client, node_1774):
        response = support_client.get(reverse("node", args=[1774]))
        assert response.status_code == 200
        assert response.content.count(b"data-slice=") == 7

    def test_it_draws_a_bar_for_memory_and_disk_with_exact_bytes_on_hover(self, support_client, node_1774):
        response = support_client.get(reverse("node", args=[1774]))
        assert b'data-resource="mru"' in response.content and b'data-resource="sru"' in response.content
        assert f"{31 * GiB:,} bytes".encode() in response.content

    def test_it_shows_how_far_the_legacy_catalog_overshoots_the_node(self, support_client, node_1774):
        memory = support_client.get(reverse("node", args=[1774])).context["detail"].bars[0]
        # 3.1 GiB reserve + 7 slices of 4 GiB = 31.1 GiB promised on a 31 GiB node.
        assert memory.over == 31 * GiB // 10 + 28 * GiB - 31 * GiB

    def test_it_names_the_phantom_slice_in_words(self, support_client, node_1774):
        response = support_client.get(reverse("node", args=[1774]))
        assert b"phantom" in response.content
        assert b"does not fit: memory" in response.content

    def test_it_shows_the_policy_in_force_and_that_the_catalog_is_stale(self, support_client, node_1774):
        detail = support_client.get(reverse("node", args=[1774])).context["detail"]
        assert detail.stale is True
        assert detail.deployable == 6

    def test_it_shows_the_buttons_to_admins(self, admins_client, node_1774):
        content = admins_client.get(reverse("node", args=[1774])).content
        assert b">Re-register now</button>" in content and b">Re-register\xe2\x80\xa6</summary>" in content
        assert b">Preview</button>" in content
        assert b">Run precheck</button>" in content

    def test_it_shows_no_button_to_support(self, support_client, node_1774):
        content = support_client.get(reverse("node", args=[1774])).content
        assert b"Re-register now</button>" not in content and b"reregister-confirm" not in content
        assert b"Run precheck</button>" not in content

    @pytest.mark.parametrize("action", ["node-reregister", "node-preview", "node-precheck"])
    def test_it_refuses_support_staff_the_actions(self, support_client, node_1774, action):
        response = support_client.post(reverse(action, args=[1774]))
        assert response.status_code == 403
        assert not Job.objects.exists()

    @pytest.mark.parametrize("action", ["node-reregister", "node-preview", "node-precheck"])
    def test_it_refuses_a_get_on_an_action(self, admins_client, node_1774, action):
        assert admins_client.get(reverse(action, args=[1774])).status_code == 405

    def test_it_sends_an_anonymous_post_to_the_login_page(self, client, node_1774):
        response = client.post(reverse("node-reregister", args=[1774]))
        assert response.status_code == 302
        assert not Job.objects.exists()

    def test_it_refuses_a_post_without_the_csrf_token(self, role_user, node_1774):
        client = Client(enforce_csrf_checks=True)
        client.force_login(role_user("admins"))
        assert client.post(reverse("node-reregister", args=[1774])).status_code == 403
        assert not Job.objects.exists()

    def test_it_starts_a_reregister_and_redirects_to_the_job_without_javascript(self, admins_client, node_1774):
        response = admins_client.post(reverse("node-reregister", args=[1774]))
        job = Job.objects.get()
        assert (job.kind, job.dry_run, job.node_id) == ("reregister", False, node_1774.pk)
        assert response["Location"] == reverse("job", args=[job.pk])

    def test_it_answers_htmx_with_the_polling_job_card(self, admins_client, node_1774):
        response = admins_client.post(reverse("node-reregister", args=[1774]), **HTMX)
        assert response.status_code == 200
        assert b'hx-trigger="every 1s"' in response.content
        assert b'hx-swap="outerHTML"' in response.content

    def test_it_shows_the_running_job_on_a_second_click(self, admins_client, node_1774):
        first = admins_client.post(reverse("node-reregister", args=[1774]), **HTMX)
        second = admins_client.post(reverse("node-reregister", args=[1774]), **HTMX)
        assert Job.objects.count() == 1
        assert b"Already running" in second.content and b"Already running" not in first.content

    def test_it_starts_a_dry_run_for_preview(self, admins_client, node_1774):
        admins_client.post(reverse("node-preview", args=[1774]))
        assert Job.objects.get().dry_run is True

    def test_it_starts_a_precheck(self, admins_client, node_1774):
        admins_client.post(reverse("node-precheck", args=[1774]))
        assert Job.objects.get().kind == "precheck"

    def test_it_answers_404_for_a_node_that_is_not_registered(self, support_client, node_1774):
        assert support_client.get(reverse("node", args=[999])).status_code == 404

    def test_it_answers_404_when_an_admin_acts_on_an_unknown_node(self, admins_client, node_1774):
        assert admins_client.post(reverse("node-reregister", args=[999])).status_code == 404
        assert not Job.objects.exists()

    def test_it_renders_the_catalog_region_alone_for_htmx(self, support_client, node_1774):
        response = support_client.get(reverse("node-catalog", args=[1774]), **HTMX)
        assert response.content.lstrip().startswith(b'<div id="catalog"')
        assert b'hx-trigger="catalog-changed from:body"' in response.content

    def test_it_sends_a_plain_request_for_the_catalog_region_to_the_page(self, support_client, node_1774):
        response = support_client.get(reverse("node-catalog", args=[1774]))
        assert response["Location"] == reverse("node", args=[1774])

    def test_it_shows_the_new_catalog_once_the_reregister_has_run(self, admins_client, node_1774):
        admins_client.post(reverse("node-reregister", args=[1774]), **HTMX)
        job = Job.objects.get()
        job_execute(job=job_claim(job_id=job.pk))  # what the worker does, in this thread
        progress = admins_client.get(reverse("job-progress", args=[job.pk]), **HTMX)
        catalog = admins_client.get(reverse("node-catalog", args=[1774]), **HTMX)
        assert "catalog-changed" in progress["HX-Trigger"]
        assert catalog.content.count(b"data-slice=") == 6

    def test_the_catalog_region_brings_the_headers_reading_age_along_out_of_band(self, support_client, node_1774):
        # Issue 25: after a precheck or re-register the catalog changed but the header still said the old age.
        from django.utils import timezone

        Node.objects.filter(pk=node_1774.pk).update(seen_at=timezone.now())
        region = support_client.get(reverse("node-catalog", args=[1774]), **HTMX).content.decode()
        assert '<span id="reading-age" hx-swap-oob="true">read <time' in region and "just now" in region
        page = support_client.get(reverse("node", args=[1774])).content.decode()
        assert page.count('id="reading-age"') == 1 and "hx-swap-oob" not in page

    def test_it_shows_the_same_placeable_and_phantom_figures_as_the_fleet_page(self, support_client, node_1774):
        detail = support_client.get(reverse("node", args=[1774])).context["detail"]
        row = support_client.get(reverse("fleet"), {"q": "1774"}).context["page"][0]
        assert (detail.placeable_now, detail.phantom) == (row.placeable_now, row.phantom) == (5, 1)

    def test_it_refuses_a_post_to_the_page_and_the_catalog_region(self, admins_client, node_1774):
        assert admins_client.post(reverse("node", args=[1774])).status_code == 405
        assert admins_client.post(reverse("node-catalog", args=[1774])).status_code == 405


def _count_queries(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.django_db
def test_it_reads_a_large_node_with_as_many_queries_as_a_small_one(admins_client, sim_node):
    small = sim_node(11, cru=4, mru=8 * GiB, sru=250 * GiB)
    large = sim_node(12, cru=64, mru=256 * GiB, sru=7452 * GiB)
    for node in (small, large):
        slice_deploy(node=node, slice_index=0, grid=sim_node.grid, source="command")
        admins_client.post(reverse("node-precheck", args=[node.grid_id]))
    Slice.objects.filter(node=large, index__in=range(1, 20)).update(state=Slice.State.RENTED)
    Job.objects.update(state=Job.State.SUCCEEDED)
    for _ in range(5):
        Job.objects.create(kind=Job.Kind.PRECHECK, node=large, state=Job.State.SUCCEEDED)
    assert _count_queries(admins_client, reverse("node", args=[12])) == _count_queries(
        admins_client, reverse("node", args=[11])
    )


@pytest.mark.django_db
def test_it_says_nothing_can_be_placed_on_a_node_that_is_down(support_client, sim_node):
    sim_node(3021, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=317, status="down")
    response = support_client.get(reverse("node", args=[3021]))
    assert b"The node is down: none of its 6 free slices can be placed until it is up again" in response.content
    assert b"the node is down; nothing can be placed" not in response.content  # one line, not one per slice


@pytest.mark.django_db
def test_it_shows_the_country_and_city_the_grid_reported(support_client, sim_node):
    from dashboard.models import Node

    sim_node(1774, cru=8, mru=31 * 1024**3, sru=931 * 1024**3, farm_id=4242)
    Node.objects.filter(grid_id=1774).update(country="Egypt", city="Cairo")
    assert "Cairo, Egypt" in support_client.get("/nodes/1774/").content.decode()
