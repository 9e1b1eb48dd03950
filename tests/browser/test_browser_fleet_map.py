"""The fleet map with a keyboard and a mouse; "where can it go instead" from a failed deployment's row."""

import re

import pytest
from playwright.sync_api import expect

from dashboard.models import Node
from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.django_db(transaction=True)
def test_the_map_is_reached_from_the_table_and_used_with_the_keyboard(browser_page, demo_fleet):
    page = browser_page
    log_in(page, "support", demo_fleet["support"])
    page.get_by_role("link", name="Map", exact=True).click()
    expect(page).to_have_url(re.compile(r"/map/"))
    cells = page.locator("#fleet-map a.cell")
    expect(cells).to_have_count(Node.objects.count())
    screenshot(page, "fleet-map.png", full_page=False)

    first = cells.first
    first.focus()
    page.keyboard.press("Tab")
    second = cells.nth(1)
    expect(second).to_be_focused()
    tooltip = second.evaluate("el => getComputedStyle(el, '::after').content")
    assert f"Node {second.get_attribute('data-node')}, farm" in tooltip
    node_id = second.get_attribute("data-node")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"/nodes/{node_id}/$"))


@pytest.mark.django_db(transaction=True)
def test_a_click_on_a_cell_opens_the_node_and_filters_are_shared(browser_page, demo_fleet):
    page = browser_page
    log_in(page, "support", demo_fleet["support"], then="/map/?status=down")
    cells = page.locator("#fleet-map a.cell")
    expect(cells).to_have_count(Node.objects.filter(status="down").count())
    expect(cells.first).to_have_attribute("data-state", "down")
    page.get_by_role("link", name="Table", exact=True).click()
    expect(page).to_have_url(re.compile(r"/\?status=down$"))
    page.goto("/map/?q=1774")
    page.locator('#fleet-map a.cell[data-node="1774"]').click()
    expect(page).to_have_url(re.compile(r"/nodes/1774/$"))


@pytest.mark.django_db(transaction=True)
def test_a_failed_deployment_shows_where_it_can_go_instead(browser_page, demo_fleet):
    page = browser_page
    log_in(page, "support", demo_fleet["support"], then="/deployments/failed/")
    page.locator("#failed-deployments [data-placement-link]").first.click()
    answer = page.locator("#placement-answer")
    expect(answer).to_be_visible()
    nodes = int(answer.get_attribute("data-nodes"))
    can_host = int(answer.get_attribute("data-can-host"))
    blocked = page.locator("#placement-blocked tr[data-block]").evaluate_all("rows => rows.map(r => +r.dataset.count)")
    assert can_host + sum(blocked) == nodes == Node.objects.count()
    best = page.locator("#placement-best tbody tr")
    expect(best.first).to_be_visible()
    screenshot(page, "placement.png", full_page=False)
    best.first.get_by_role("link").click()
    expect(page).to_have_url(re.compile(r"/nodes/\d+/$"))
