"""Issue 45, defect 10: the fleet's filters change the address, so a filtered fleet can be bookmarked, shared
and reloaded; a search typed, pasted or picked from the browser's suggestions filters alike."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.django_db(transaction=True)
def test_the_fleets_filters_are_in_the_address_and_a_reload_keeps_them(browser_page, demo_fleet):
    page = browser_page
    log_in(page, "support", demo_fleet["support"])
    all_rows = page.locator("#fleet-table tbody tr[data-node]").count()
    # fill() sends the input event a paste or a suggestion sends, without a key.
    page.locator("#id_q").fill("mitana")
    expect(page).to_have_url(re.compile(r"[?&]q=mitana"))
    page.select_option("#id_status", "standby")
    expect(page).to_have_url(re.compile(r"[?&]status=standby"))
    shown = page.locator("#fleet-table tbody tr[data-node]").count()
    assert shown < all_rows
    page.reload()
    expect(page.locator("#id_q")).to_have_value("mitana")
    assert page.locator("#fleet-table tbody tr[data-node]").count() == shown
