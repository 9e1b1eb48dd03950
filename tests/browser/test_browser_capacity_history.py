"""Capacity over time in the browser: the fleet's and a node's sparklines with the trend and its method."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from dashboard.figures.services.snapshots import snapshot_take
from dashboard.models import Node
from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.django_db(transaction=True)
def test_the_fleet_and_node_pages_draw_their_capacity_over_time(browser_page, demo_fleet):
    now = timezone.now()
    for days in (6, 4, 2):
        snapshot_take(now=now - timedelta(days=days))
    page = browser_page
    log_in(page, "support", demo_fleet["support"])
    history = page.locator("#history-fleet")
    expect(history.get_by_role("img")).to_have_count(4)
    expect(history.locator(".trend")).to_contain_text("Free deployable slices")
    expect(history).to_contain_text("Least-squares line through the 4 snapshots of the last 14 days")

    node = Node.objects.order_by("grid_id").first()
    page.goto(f"/nodes/{node.grid_id}/")
    expect(page.locator("#history-node").get_by_role("img").first).to_be_visible()
    screenshot(page, "node-history.png")
