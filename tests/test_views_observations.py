"""What a node's refusals taught, on its page: shown to anyone who may read it, cleared by an admin only."""

import pytest
from django.urls import reverse

from dashboard.capacity import GiB
from dashboard.models import AuditEvent, Node
from dashboard.services.deploy import slices_deploy_all_free

pytestmark = pytest.mark.django_db


@pytest.fixture
def taught(sim_node):
    """Node 2877 hides 1 GiB per VM; deploying its catalog teaches it (one ZOS refusal)."""
    node = sim_node(2877, cru=24, mru=64 * GiB, sru=1863 * GiB, farm_id=902, per_vm_overhead_mru=GiB)
    slices_deploy_all_free(node=node)
    node.refresh_from_db()
    return node


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
