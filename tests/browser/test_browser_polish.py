"""No console error after a Back-button history restore; the product's own 404 page; a favicon everywhere."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _history_go(page, step: int) -> None:
    """Back or Forward, and wait until the page has been loaded again (htmx's refreshOnHistoryMiss)."""
    with page.expect_event("load"):
        page.evaluate(f"setTimeout(() => history.go({step}), 0)")


@pytest.mark.django_db(transaction=True)
def test_back_after_filtering_the_fleet_restores_the_page_without_a_csp_error(browser_page, demo_fleet):
    page = browser_page
    messages = []
    page.on("console", lambda message: messages.append(message.text))
    log_in(page, "support", demo_fleet["support"])
    page.get_by_label("Stale catalog").select_option("yes")
    expect(page).to_have_url(re.compile(r"[?&]stale=yes"))
    page.get_by_label("Status").select_option("up")
    expect(page).to_have_url(re.compile(r"[?&]status=up"))
    _history_go(page, -1)
    expect(page).not_to_have_url(re.compile(r"status=up"))
    expect(page.locator("#fleet-table tbody tr[data-node]").first).to_be_visible()
    _history_go(page, -1)
    expect(page).not_to_have_url(re.compile(r"stale=yes"))
    expect(page.locator("#fleet-table tbody tr[data-node]").first).to_be_visible()
    _history_go(page, 1)
    expect(page).to_have_url(re.compile(r"[?&]stale=yes"))
    expect(page.locator("#fleet-table tbody tr[data-node]").first).to_be_visible()
    page.wait_for_timeout(300)
    assert not [m for m in messages if "Content Security Policy" in m], messages


@pytest.mark.django_db(transaction=True)
def test_back_from_a_node_to_a_sorted_and_filtered_fleet_has_no_csp_error(browser_page, demo_fleet):
    page = browser_page
    messages = []
    page.on("console", lambda message: messages.append(f"{message.type}: {message.text}"))
    log_in(page, "admin", demo_fleet["admin"])
    page.get_by_role("link", name="Nominal → deployable").click()
    expect(page).to_have_url(re.compile(r"sort=-gap"))
    page.get_by_label("Status").select_option("up")
    expect(page).to_have_url(re.compile(r"status=up"))
    page.locator("#fleet-table tbody tr[data-node] a").first.click()
    expect(page).to_have_url(re.compile(r"/nodes/\d+/"))
    _history_go(page, -1)
    expect(page).to_have_url(re.compile(r"status=up"))
    _history_go(page, -1)
    expect(page).not_to_have_url(re.compile(r"status=up"))
    _history_go(page, -1)
    expect(page).not_to_have_url(re.compile(r"sort="))
    _history_go(page, 1)
    _history_go(page, 1)
    expect(page.locator("#fleet-table tbody tr[data-node]").first).to_be_visible()
    page.wait_for_timeout(300)
    assert not [m for m in messages if "Content Security Policy" in m], messages


@pytest.mark.django_db(transaction=True)
def test_the_admin_and_the_pages_load_a_favicon_without_a_404(browser_page, demo_fleet, django_user_model):
    django_user_model.objects.filter(username="admin").update(is_staff=True, is_superuser=True)
    page = browser_page
    refused = []
    page.on("response", lambda response: refused.append(response.url) if response.status >= 400 else None)
    log_in(page, "admin", demo_fleet["admin"], then="/admin/")
    expect(page.get_by_role("link", name="Slice catalog administration")).to_be_visible()
    icon = page.evaluate("fetch('/favicon.ico').then(r => [r.status, r.headers.get('content-type')])")
    assert icon[0] == 200 and "icon" in icon[1], icon
    page.goto("/")
    assert page.locator('link[rel="icon"]').count() == 2
    assert refused == []


@pytest.mark.django_db(transaction=True)
def test_an_unknown_address_shows_the_products_404_page(browser_page, demo_fleet):
    page = browser_page
    log_in(page, "support", demo_fleet["support"])
    response = page.goto("/nodes/999999/")
    assert response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    page.get_by_role("link", name="Back to the fleet").click()
    expect(page.locator("#fleet-table")).to_be_visible()
    page.console_errors.clear()  # the browser logs the 404 itself
