"""The alerts strip: one line collapsed at a desktop's and a phone's width, worst first, the details and the
acknowledge buttons on the alerts page, and an acknowledged alert gone from the strip (issue 25)."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from dashboard.alerts import rules
from dashboard.alerts.services.alerts import alerts_record
from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LONG = "Farm {n} offers 37 phantom slices on 12 up nodes (memory 30, disk (no pool holds it) 7) " * 2


def five_alerts():
    conditions = [rules.Condition(rules.PHANTOM, f"farm {n}", LONG.format(n=n), "node 1774 (3)") for n in range(1, 5)]
    conditions.append(
        rules.Condition(rules.FAILURES, "memory", "9 deployments failed for memory in the last 15 min", "")
    )
    alerts_record(conditions=conditions, now=timezone.now())


@pytest.mark.parametrize("width", [1440, 390])
@pytest.mark.django_db(transaction=True)
def test_the_strip_takes_one_line_collapsed_and_opens_to_all(chromium, live_server, demo_fleet, width):
    five_alerts()
    context = chromium.new_context(viewport={"width": width, "height": 900}, base_url=live_server.url)
    page = context.new_page()
    try:
        log_in(page, "support", demo_fleet["support"])
        summary = page.locator("#alert-strip > summary")
        expect(summary).to_contain_text("5 alerts")
        expect(summary).to_contain_text("and 4 more")
        expect(summary.locator(".alert-worst")).to_contain_text("9 deployments failed")  # the worst first
        line = summary.evaluate("el => parseFloat(getComputedStyle(el).lineHeight) || 20")
        box = summary.bounding_box()
        assert box["height"] <= 2 * line + 1, (box, line)  # one line, its padding included
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        summary.click()
        expect(page.locator("#alert-strip li")).to_have_count(5)
        page.locator("#alert-strip").get_by_role("link").click()
        expect(page.get_by_role("heading", name="Alerts", exact=True)).to_be_visible()
        expect(page.get_by_role("button", name="Acknowledge")).to_have_count(0)  # support reads
    finally:
        context.close()


@pytest.mark.django_db(transaction=True)
def test_an_admin_acknowledges_on_the_alerts_page_and_the_strip_forgets_it(browser_page, demo_fleet):
    five_alerts()
    page = browser_page
    log_in(page, "admin", demo_fleet["admin"], then="/alerts/")
    page.get_by_role("button", name="Acknowledge").first.click()
    expect(page.get_by_text("Acknowledged by admin")).to_be_visible()
    page.goto("/")
    expect(page.locator("#alert-strip > summary")).to_contain_text("4 alerts")
