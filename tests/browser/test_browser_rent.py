"""Issue 27 in a browser: a node rented by another twin and the node the marketplace rents, as an admin
and as support, with MARKETPLACE_TWIN_ID set; the fleet table names the reason."""

import pytest
from playwright.sync_api import expect

from dashboard.nodes.services.registration import node_register_from_grid
from sim.grid import SimulatedGrid
from tests.browser.conftest import log_in
from tests.factories import node_1774

pytestmark = pytest.mark.browser
PASSWORD = "not-a-real-password-1774"


@pytest.fixture
def rented_fleet(simgrid_path, settings):
    """1774 rented by the marketplace (twin 7) in its dedicated farm; 3150 rented by twin 4711."""
    settings.MARKETPLACE_TWIN_ID = (7,)
    grid = SimulatedGrid(simgrid_path, deployer_twin=7)
    grid.farm_dedicated(4242)
    grid.add_node(1774, **node_1774())
    ours = grid.rent(1774, 7)
    grid.add_node(3150, **node_1774(farm_id=1210, farm_name="nile-edge"))
    grid.rent(3150, 4711)
    for node_id in (1774, 3150):
        node_register_from_grid(live=grid.node(node_id), policy_name="zos")
    return ours


@pytest.mark.parametrize("role", ["admins", "support"])
@pytest.mark.django_db(transaction=True)
def test_the_rented_nodes_say_who_rents_them(browser_page, role_user, rented_fleet, role):
    role_user(role, username="renter-" + role, password=PASSWORD)
    page = browser_page
    log_in(page, "renter-" + role, PASSWORD, then="/nodes/3150/")

    away = page.locator("#away-line")
    expect(away).to_contain_text("is rented by twin 4711, not by the marketplace")
    expect(away).to_contain_text("none of its 6 free slices can be placed")
    expect(page.locator("#phantom-card")).to_contain_text("free, none placeable: rented by another twin")
    expect(page.locator("#rent-line")).to_contain_text("Rented by twin 4711")
    # An admin may still precheck it (the reading may have changed); support only reads.
    expect(page.get_by_role("button", name="Run precheck")).to_have_count(1 if role == "admins" else 0)

    page.goto("/nodes/1774/")
    expect(page.locator("#rent-line")).to_contain_text(
        f"Rented by the marketplace (twin 7) under rent contract {rented_fleet}"
    )
    expect(page.locator("#away-line")).to_have_count(0)

    page.goto("/")
    row = page.locator('#fleet-results tbody tr[data-node="3150"]')
    expect(row.locator(".closure")).to_have_text("rented by another twin: 4711")
    expect(page.locator('#fleet-results tbody tr[data-node="1774"] .closure')).to_have_count(0)
    expect(page.locator("#rent-judged")).to_contain_text("twin 7")
