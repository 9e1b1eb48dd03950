"""The slice audit page: an admin runs a dry run, reads the orphan and the foreign VM, fixes them once;
support reads the same page and has no button."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from dashboard.capacity import GiB, SliceSize
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.nodes.services.registration import node_register_from_grid
from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.worker]
PASSWORD = "not-a-real-password-1774"


@pytest.fixture
def planted(simgrid_path):
    """Node 1774 with slices 0 and 1 deployed; slice 1's VM deleted on the grid (an orphan) and a VM
    deployed there outside the catalog (a foreign one)."""
    from dashboard.models import Deployment
    from sim.grid import SimulatedGrid

    grid = SimulatedGrid(simgrid_path)
    grid.add_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana")
    node = node_register_from_grid(live=grid.node(1774))
    slice_deploy(node=node, slice_index=0, grid=grid)
    gone = slice_deploy(node=node, slice_index=1, grid=grid)
    grid.delete_vm(1774, gone.grid_workload_id)
    grid.deploy_vm(1774, SliceSize(cru=1, mru=2 * GiB, sru=50 * GiB), name="outside")
    # Taken long enough ago that the proxy would list its contract: past the orphan's grace (issue 35).
    Deployment.objects.filter(pk=gone.pk).update(started_at=timezone.now() - timedelta(hours=1))
    return grid


def _finished(page):
    expect(page.locator("article.job")).to_have_attribute("data-job-state", "succeeded", timeout=30_000)


@pytest.mark.django_db(transaction=True)
def test_an_admin_runs_a_dry_run_and_fixes_what_it_found(browser_page, planted, role_user, celery_worker):
    role_user("admins", username="ada", password=PASSWORD)
    page = browser_page
    log_in(page, "ada", PASSWORD, then="/audit/")
    expect(page.locator("#audit-none")).to_be_visible()

    page.get_by_role("button", name="Run a dry run now").click()
    _finished(page)
    page.goto("/audit/")
    expect(page.locator('.totals [data-kind="orphan"]')).to_have_attribute("data-count", "1")
    expect(page.locator('.totals [data-kind="foreign"]')).to_have_attribute("data-count", "1")
    expect(page.locator('table[data-kind="orphan"]')).to_contain_text("slice 1 of node 1774")
    screenshot(page, "audit.png")

    page.get_by_role("button", name="Fix the 2 findings this dry run shows").click()
    _finished(page)
    page.goto("/audit/")
    expect(page.locator("#audit-latest")).to_have_attribute("data-dry-run", "no")
    expect(page.locator("tr[data-fixed=yes]")).to_have_count(2)
    expect(page.get_by_role("button", name="Fix the 2 findings this dry run shows")).to_have_count(0)

    page.get_by_role("button", name="Run a dry run now").click()
    _finished(page)
    page.goto("/audit/")
    expect(page.locator("#audit-latest")).to_contain_text("nothing out of place")


@pytest.mark.django_db(transaction=True)
def test_support_reads_the_audit_and_has_no_button(browser_page, planted, role_user):
    from dashboard.catalogs.selectors.catalog_audit import Pace
    from dashboard.catalogs.services.catalog_audit import catalog_audit_here

    catalog_audit_here(fix=False, grid=planted, pace=Pace(rate=1000.0, sleep=lambda _s: None))
    role_user("support", username="sam", password=PASSWORD)
    page = browser_page
    log_in(page, "sam", PASSWORD, then="/audit/")

    expect(page.locator('table[data-kind="foreign"]')).to_contain_text("a VM the catalog does not know")
    expect(page.locator("table[data-kind=foreign] time").first).to_have_text("just now")
    expect(page.get_by_role("button")).to_have_count(1)  # log out only
    expect(page.get_by_role("link", name="Audit")).to_have_attribute("aria-current", "page")
