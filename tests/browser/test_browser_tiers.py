"""The fleet page shows deployable slices now / after wake / blocked, and each total filters the table."""

import pytest
from playwright.sync_api import expect

from dashboard.capacity import GiB
from dashboard.nodes.services.registration import node_register_from_grid
from sim.grid import SimulatedGrid
from tests.browser.conftest import log_in

pytestmark = pytest.mark.browser


@pytest.mark.django_db(transaction=True)
def test_the_fleet_page_shows_now_after_wake_and_blocked_totals(browser_page, simgrid_path, role_user):
    grid = SimulatedGrid(simgrid_path)
    for node_id, status in ((601, "up"), (602, "up"), (603, "standby"), (604, "down")):
        grid.add_node(node_id, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=77, farm_name="tiers", status=status)
        node_register_from_grid(live=grid.node(node_id))
    role_user("support", username="sam", password="not-a-real-password-1774")
    page = browser_page
    log_in(page, "sam", "not-a-real-password-1774", then="/")

    tiers = page.locator("#deployable-tiers")
    expect(tiers.locator('[data-tier="now"]')).to_have_text("12 now")
    expect(tiers.locator('[data-tier="after-wake"]')).to_have_text("6 after wake")
    expect(tiers.locator('[data-tier="blocked"]')).to_have_text("6 blocked")

    tiers.locator('[data-tier="after-wake"]').click()
    rows = page.locator("#fleet-results tbody tr[data-node]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("603")
    expect(page.get_by_label("Deployable")).to_have_value("after-wake")
