"""An admin adds a farm from the grid: the form, the preview, the job, the new nodes with their ages."""

import pytest
from playwright.sync_api import expect

from dashboard.capacity import GiB
from sim.grid import SimulatedGrid
from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.worker]


@pytest.mark.django_db(transaction=True)
def test_an_admin_onboards_a_farm_and_sees_the_new_nodes_with_their_ages(
    browser_page, simgrid_path, role_user, celery_worker, settings
):
    settings.GRID_PAGE_SIZE = 2  # three nodes: two pages, the second one short
    grid = SimulatedGrid(simgrid_path)
    for node_id in (501, 502, 503):
        grid.add_node(node_id, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana")
    role_user("admins", username="ada", password="not-a-real-password-1774")
    page = browser_page
    log_in(page, "ada", "not-a-real-password-1774", then="/nodes/add/")

    page.get_by_label("Farm ids").fill("4242")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_role("heading", name="Would be registered (3 nodes, 18 deployable slices)")).to_be_visible()
    expect(page.locator("#onboard-nodes tbody tr")).to_have_count(3)

    page.get_by_role("button", name="Register 3 new nodes").click()
    expect(page.get_by_role("heading", name="Registered (3 nodes, 18 deployable slices)")).to_be_visible()
    expect(page.locator("#onboard-nodes td.reading-age").first).to_have_text("read just now, node reported just now")
    screenshot(page, "onboard.png")

    page.get_by_role("link", name="Farm 4242 in the fleet table").click()
    rows = page.locator("#fleet-results tbody tr[data-node]")
    expect(rows).to_have_count(3)
    expect(rows.first.locator("td.reading-age")).to_contain_text("read just now")
    expect(rows.first.locator("td.reading-age")).to_contain_text("reported just now")
