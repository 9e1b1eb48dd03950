"""The node page's "learnt from" line (issue 32): a node never refused says its memory is decided by
its ZOS build's lesson, learnt from the nodes that were; an admin reverts it there and it is gone.
Two nodes are refused: one node's refusal is its own until a second source agrees (issue 44)."""

import pytest
from playwright.sync_api import expect

from dashboard.capacity import GiB
from dashboard.deployments.services.deploy import slices_deploy_all_free
from dashboard.models import AuditEvent, Node
from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]
PASSWORD = "not-a-real-password-1774"
BUILD = "v3.14.0-sim"


@pytest.fixture
def taught(transactional_db, sim_node):
    """Three 62.8 GiB nodes of one build (as RMB tells it); 3001 and 3003 filled until ZOS refused."""
    nodes = []
    for grid_id in (3001, 3002, 3003):
        node = sim_node(grid_id, cru=32, mru=round(62.8 * GiB), sru=4000 * GiB, farm_id=77, zos_build=BUILD)
        Node.objects.filter(pk=node.pk).update(zos_version=BUILD)
        nodes.append(node)
    for taught_by in (nodes[0], nodes[2]):
        slices_deploy_all_free(node=Node.objects.get(pk=taught_by.pk))
    return nodes


@pytest.mark.django_db(transaction=True)
def test_the_node_page_says_which_lesson_decides_and_an_admin_reverts_it(browser_page, taught, role_user):
    page = browser_page
    role_user("admins", username="ada", password=PASSWORD)
    log_in(page, "ada", PASSWORD, then="/nodes/3002/")
    line = page.locator("#memory-lesson")
    expect(line).to_contain_text(f"its ZOS build's lesson ({BUILD})")
    expect(line).to_contain_text("learnt from nodes 3001, 3003")
    page.locator("#memory-lesson-revert").click()
    page.wait_for_load_state()
    expect(page.locator("#memory-lesson")).to_have_count(0)
    assert AuditEvent.objects.filter(action="memory_lesson.reverted", actor__username="ada").exists()
