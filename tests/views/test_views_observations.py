"""What a node's refusals taught, on its page: shown to anyone who may read it, cleared by an admin only."""

from dataclasses import replace

import pytest
from django.test import override_settings
from django.urls import reverse

from dashboard.capacity import GiB
from dashboard.deployments.services.deploy import slices_deploy_all_free
from dashboard.models import AuditEvent, Node
from dashboard.nodes.services.registration import node_register_from_grid
from sim.grid import SimulatedGrid
from tests.conftest import rolled_back_after

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def taught_once(django_db_setup, django_db_blocker, tmp_path_factory):
    """Node 2877 hides 1 GiB per VM; deploying its catalog teaches it (one ZOS refusal). Taught once for
    the module (its 14 deploys were most of each test), on a simulated grid of its own, rolled back after."""
    path = tmp_path_factory.mktemp("taught") / "simgrid.sqlite3"
    with override_settings(SIMGRID_PATH=path, GRID_BACKEND="simulator"), rolled_back_after(django_db_blocker):
        grid = SimulatedGrid(path)
        grid.add_node(2877, cru=24, mru=64 * GiB, sru=1863 * GiB, farm_id=902, per_vm_overhead_mru=GiB)
        node = node_register_from_grid(live=replace(grid.node(2877), pools_sru=(1863 * GiB,)))
        slices_deploy_all_free(node=node)
        yield path


@pytest.fixture
def taught(taught_once, db, settings):
    settings.SIMGRID_PATH, settings.GRID_BACKEND = taught_once, "simulator"
    return Node.objects.get(grid_id=2877)


def test_it_shows_the_lesson_with_zos_words_and_the_calibration(support_client, taught):
    page = support_client.get(reverse("node", args=[2877])).content.decode()
    assert "1 GiB hidden memory per running VM" in page
    assert "cannot fulfil required memory size" in page
    assert 'id="calibration"' in page


def test_it_offers_admins_a_farm_policy_counting_the_hidden_use(admins_client, taught):
    page = admins_client.get(reverse("node", args=[2877])).content.decode()
    assert f"?scope=farm&amp;farm=902&amp;overhead_mru_per_vm={GiB}" in page
    form = admins_client.get(reverse("policy-new") + f"?scope=farm&farm=902&overhead_mru_per_vm={GiB}").content.decode()
    assert 'value="1 GiB"' in form or 'value="1GiB"' in form


def test_an_admin_clears_the_lessons_and_the_figures_follow(admins_client, taught):
    response = admins_client.post(reverse("node-observations-clear", args=[2877]))
    node = Node.objects.get(grid_id=2877)
    assert response.status_code == 302
    assert (node.hidden_mru_per_vm, node.observations.filter(cleared_at__isnull=True).count()) == (0, 0)
    assert AuditEvent.objects.filter(action="observation.cleared", node=node, actor__isnull=False).exists()


def test_support_cannot_clear_the_lessons(support_client, taught):
    assert support_client.post(reverse("node-observations-clear", args=[2877])).status_code == 403
    assert Node.objects.get(grid_id=2877).hidden_mru_per_vm == GiB


def test_clearing_needs_a_post(admins_client, taught):
    assert admins_client.get(reverse("node-observations-clear", args=[2877])).status_code == 405


def test_issue_45_defect_8_the_page_says_which_per_vm_figure_counts(support_client, taught):
    page = support_client.get(reverse("node", args=[2877])).content.decode()
    assert "The precheck and the carve count <strong>1 GiB hidden memory per running VM</strong>" in page
    # One refusal is one source: its reading counts on its node alone (issue 44), and the page says so.
    assert "its own reading alone: it reaches the node's group only once a second source agrees" in page
    assert "Counting" not in page
