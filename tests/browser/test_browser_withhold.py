"""Withholding in the browser: an admin withholds node 1774 with a reason and sees it on the node page,
the fleet table and the map; support sees the reason and has no way to withhold."""

import re

import pytest
from playwright.sync_api import expect

from dashboard.models import AuditEvent, Node, NodeWithhold
from dashboard.nodes.services.withholds import node_withhold
from tests.browser.conftest import log_in, screenshot
from tests.factories import node_1774, sim_node_1774

pytestmark = [pytest.mark.browser, pytest.mark.slow]
PASSWORD = "not-a-real-password-1774"


@pytest.fixture
def fleet(transactional_db, sim_node):
    """Node 1774 (legacy catalog) and a neighbour in its farm, both up and read."""
    sim_node_1774(sim_node)
    sim_node(1775, **node_1774())
    return Node.objects.get(grid_id=1774)


@pytest.mark.django_db(transaction=True)
def test_an_admin_withholds_a_node_and_sees_it_everywhere(browser_page, fleet, role_user):
    page = browser_page
    role_user("admins", username="ada", password=PASSWORD)
    log_in(page, "ada", PASSWORD, then="/nodes/1774/")
    panel = page.locator("#withhold")
    panel.get_by_label("Reason").fill("disk swap")
    panel.get_by_label("Until (UTC)").fill("2027-06-01T18:00")
    panel.get_by_role("button", name="Withhold").click()
    # htmx swaps the panel and the catalog refreshes on the event it sends: no reload.
    expect(page.locator("#withheld-reason")).to_have_text("disk swap")
    expect(page.locator("#withheld-now")).to_contain_text("until 2027-06-01 18:00 UTC")
    expect(page.locator("#phantom-card")).to_contain_text("withheld")
    expect(page.locator("#node-figures")).to_have_attribute("data-placeable", "0")
    assert AuditEvent.objects.filter(action="node withheld", actor__username="ada").count() == 1
    screenshot(page, "node-withheld.png")

    page.goto("/")
    row = page.locator('tr[data-node="1774"]')
    expect(row.locator('.closure[data-closure="withheld"]')).to_have_text(
        "withheld (maintenance or quarantine): disk swap, until 2027-06-01 18:00 UTC"
    )
    expect(row).to_have_attribute("data-placeable", "0")
    expect(page.locator('tr[data-node="1775"] [data-closure]')).to_have_count(0)

    page.goto("/map/")
    cell = page.locator('#fleet-map a.cell[data-node="1774"]')
    expect(cell).to_have_attribute("data-state", "withheld")
    expect(cell).to_have_attribute(
        "aria-label", re.compile(r"the node is withheld \(disk swap, until 2027-06-01 18:00 UTC\)")
    )
    expect(page.locator('.map-legend li[data-state="withheld"]')).to_have_attribute("data-count", "1")

    page.goto("/nodes/1774/")
    page.get_by_role("button", name="Release every window").click()
    expect(page.locator("#withheld-now")).to_contain_text("Not withheld")
    assert Node.objects.get(grid_id=1774).withheld_reason == ""


@pytest.mark.django_db(transaction=True)
def test_a_refused_window_says_why_in_the_panel(browser_page, fleet, role_user):
    page = browser_page
    role_user("admins", username="ada", password=PASSWORD)
    log_in(page, "ada", PASSWORD, then="/nodes/1774/")
    panel = page.locator("#withhold")
    panel.get_by_label("Reason").fill("disk swap")
    panel.get_by_label("From (UTC)").fill("2027-06-02T10:00")
    panel.get_by_label("Until (UTC)").fill("2027-06-01T10:00")
    panel.get_by_role("button", name="Withhold").click()
    expect(page.locator("#withhold-error")).to_contain_text("before it starts")
    assert NodeWithhold.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_support_sees_the_reason_and_cannot_withhold(browser_page, fleet, role_user):
    node_withhold(nodes=[fleet], reason="disk swap")
    page = browser_page
    role_user("support", username="sam", password=PASSWORD)
    log_in(page, "sam", PASSWORD, then="/nodes/1774/")
    expect(page.locator("#withheld-reason")).to_have_text("disk swap")
    expect(page.locator("#withheld-badge")).to_be_visible()
    expect(page.locator("#withhold-form")).to_have_count(0)
    expect(page.get_by_role("button", name="Release every window")).to_have_count(0)
    page.goto("/?farm=4242")
    expect(page.locator('tr[data-node="1774"] .closure')).to_contain_text("disk swap, until released")
    expect(page.locator("#farm-withhold")).to_have_count(0)
    # A post made by hand (the CSRF token the page holds) is refused: support may not withhold.
    token = re.search(r'"x-csrftoken": "([^"]+)"', page.locator("body").get_attribute("hx-headers")).group(1)
    answer = page.request.post("/nodes/1775/withhold/", form={"reason": "nope"}, headers={"X-CSRFToken": token})
    status = answer.status
    assert (status, Node.objects.get(grid_id=1775).withheld_reason) == (403, "")
