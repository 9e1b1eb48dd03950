"""Issue 33 in a browser: the node page says where its pools came from (the node itself, over RMB,
through the stand-in peer) and its ZOS build; a node that stayed silent says its pools are unknown."""

import pytest
from playwright.sync_api import expect

from dashboard.capacity import GiB
from dashboard.nodes.services.registration import node_register_from_grid
from sim.grid import SimulatedGrid
from tests.browser.conftest import log_in
from tests.conftest import stand_in_peer_serving

pytestmark = pytest.mark.browser
PASSWORD = "not-a-real-password-1774"
HALF_SSD = int(465.75 * GiB)


@pytest.fixture
def heard_fleet(simgrid_path, settings, rmb_redis_url):
    """2311 (two SSDs) answered over RMB when registered; 2312 was silent (the peer sees it down)."""
    url = rmb_redis_url
    grid = SimulatedGrid(simgrid_path)
    grid.add_node(2311, cru=8, mru=31 * GiB, sru=2 * HALF_SSD, pools=[HALF_SSD, HALF_SSD], twin_id=3311)
    grid.add_node(2312, cru=8, mru=31 * GiB, sru=2 * HALF_SSD, pools=[HALF_SSD, HALF_SSD], twin_id=3312)
    seen = SimulatedGrid(simgrid_path.with_name("peer.sqlite3"))
    # The peer answers each node's own ZOS build (zos.system.version), as a real node does.
    seen.add_node(
        2311, cru=8, mru=31 * GiB, sru=2 * HALF_SSD, pools=[HALF_SSD, HALF_SSD], twin_id=3311, zos_build="v3.14.0-sim"
    )
    seen.add_node(2312, cru=8, mru=31 * GiB, sru=2 * HALF_SSD, twin_id=3312, status="down")
    settings.RMB_REDIS_URL, settings.RMB_DEADLINE = url, 1.0
    with stand_in_peer_serving(seen, url):
        for node_id in (2311, 2312):
            node_register_from_grid(live=grid.node(node_id))


@pytest.mark.django_db(transaction=True)
def test_the_node_page_says_its_pools_came_from_the_node_over_rmb(browser_page, role_user, heard_fleet):
    role_user("support", username="pools-support", password=PASSWORD)
    page = browser_page
    log_in(page, "pools-support", PASSWORD, then="/nodes/2311/")

    expect(page.locator("#pools")).to_contain_text("465.75 GiB, 465.75 GiB")
    expect(page.locator("#pools-source")).to_contain_text("reported by the node itself, over RMB (through rmb-peer)")
    expect(page.locator("#zos-version")).to_contain_text("v3.14.0-sim")

    page.goto("/nodes/2312/")
    expect(page.locator("#pools-unknown")).to_contain_text("sized to deploy under every plausible layout")
    expect(page.locator("#zos-version")).to_have_count(0)
