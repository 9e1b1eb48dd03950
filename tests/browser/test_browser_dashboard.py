"""The dashboard in a real browser, on the demo fleet, with a real Celery worker behind it."""

import csv
import io
import re

import pytest
from playwright.sync_api import expect

from dashboard.models import Job, Node
from tests.browser.conftest import confirm_reregister, log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_reregisters_node_1774_live_without_reloading_the_page(browser_page, demo_fleet, celery_worker):
    page = browser_page
    log_in(page, "admin", demo_fleet["admin"], then="/nodes/1774/")
    expect(page.locator("#catalog-table tbody tr[data-slice]")).to_have_count(7)

    navigations = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url) if frame == page.main_frame else None)
    page.evaluate("window.stillTheSamePage = true")
    confirm_reregister(page)

    expect(page.locator("#job-panel .job")).to_be_visible()
    expect(page.locator("#job-panel progress")).to_be_attached()
    expect(page.locator('#job-panel .job[data-job-state="succeeded"]')).to_be_visible(timeout=60_000)
    expect(page.locator("#catalog-table tbody tr[data-slice]")).to_have_count(6)
    assert navigations == []
    assert page.evaluate("window.stillTheSamePage") is True
    assert Node.objects.get(grid_id=1774).slices.count() == 6
    screenshot(page, "node.png")


@pytest.mark.django_db(transaction=True)
def test_it_shows_the_running_job_when_re_register_is_clicked_twice(browser_page, demo_fleet):
    # No worker here: the first job stays queued, so the second click must find it running.
    page = browser_page
    log_in(page, "admin", demo_fleet["admin"], then="/nodes/1774/")
    confirm_reregister(page)
    expect(page.locator("#job-panel .job")).to_be_visible()
    confirm_reregister(page)
    expect(page.locator("#job-panel")).to_contain_text("Already running")
    assert Job.objects.filter(node__grid_id=1774).count() == 1


@pytest.mark.django_db(transaction=True)
def test_it_shows_support_staff_no_button_and_the_memory_failures_of_node_1774(browser_page, demo_fleet):
    page = browser_page
    log_in(page, "support", demo_fleet["support"], then="/nodes/1774/")
    expect(page.locator("#catalog-table")).to_be_visible()
    expect(page.get_by_role("button", name="Re-register")).to_have_count(0)
    expect(page.get_by_role("button", name="Run precheck")).to_have_count(0)

    page.goto("/deployments/failed/")
    page.get_by_label("Node id").fill("1774")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("#failed-deployments tbody tr[data-cause]")
    expect(rows.first).to_be_visible()
    assert "memory" in set(rows.evaluate_all("rows => rows.map(r => r.dataset.cause)"))

    page.get_by_label("Cause").select_option("memory")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#failed-deployments tbody tr[data-cause]").first).to_be_visible()
    assert set(rows.evaluate_all("rows => rows.map(r => r.dataset.cause)")) == {"memory"}
    expect(rows.first).to_contain_text("node 1774")
    expect(rows.first.locator("td").nth(4)).to_contain_text("needs 4 GiB")


@pytest.mark.django_db(transaction=True)
def test_it_shows_a_refusal_when_support_staff_post_anyway(browser_page, demo_fleet):
    """htmx does not swap a 403: the page must say so instead of doing nothing."""
    page = browser_page
    log_in(page, "support", demo_fleet["support"], then="/nodes/1774/")
    with page.expect_response("**/nodes/1774/reregister/") as answer:
        page.evaluate("htmx.ajax('POST', '/nodes/1774/reregister/', {target: '#job-panel'})")
    assert answer.value.status == 403
    expect(page.locator("#htmx-error")).to_contain_text("not allowed")
    page.console_errors.clear()  # the browser logs the 403 itself; that is the point of this test


@pytest.mark.django_db(transaction=True)
def test_it_filters_the_overview_and_exports_the_filtered_set(browser_page, demo_fleet):
    page = browser_page
    log_in(page, "support", demo_fleet["support"])
    expect(page.locator("#fleet-table tbody tr[data-node]").first).to_be_visible()
    screenshot(page, "overview.png", full_page=False)

    page.get_by_label("Stale catalog").select_option("yes")
    expect(page).to_have_url(re.compile(r"[?&]stale=yes"))
    shown = page.locator("#fleet-table tbody tr[data-node]")
    expect(shown.first).to_be_visible()
    stale_ids = sorted(n.grid_id for n in Node.objects.all() if _is_stale(n))
    expect(shown).to_have_count(min(len(stale_ids), 50))
    expect(shown.locator("text=stale")).to_have_count(min(len(stale_ids), 50))

    with page.expect_download() as download:
        page.get_by_role("link", name="Export CSV").click()
    rows = list(csv.DictReader(io.StringIO(open(download.value.path()).read())))
    assert sorted(int(row["node_id"]) for row in rows) == stale_ids
    assert {row["stale"] for row in rows} == {"yes"}


def _is_stale(node) -> bool:
    from dashboard.policies.selectors.policy_book import catalog_is_stale, policy_for_node

    occupied = [s.size.resources for s in node.slices.all() if s.is_occupied]
    return catalog_is_stale(node, policy_for_node(node), occupied=occupied)[0]
