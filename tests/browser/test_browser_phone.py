"""At a phone's width (390 px) and a desktop's (1440 px) no page is wider than the screen, and every
navigation link is reachable on a phone.

Wide tables scroll inside their own box; the page itself never scrolls sideways.
"""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}
PAGES = (
    "/",
    "/nodes/1774/",
    "/jobs/",
    "/deployments/failed/",
    "/policy/",
    "/map/",
    "/placement/?cru=1&mru=4GiB&sru=151GiB",
    "/nodes/add/",
    "/api-tokens/",
    "/alerts/",
)
NAV_LINKS = ("Fleet", "Failed deployments", "Jobs", "Policy", "Alerts", "API tokens", "Admin")

# The elements that stick out past the viewport, to say which one made the page too wide.
WIDER_THAN_VIEWPORT = """() => {
  const width = document.documentElement.clientWidth;
  return [...document.querySelectorAll("body *")]
    .filter(el => el.getBoundingClientRect().right > width + 0.5)
    .filter(el => !el.closest(".table-wrap, .scroll-x"))
    .slice(0, 8)
    .map(el => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (el.className ? "." + String(el.className).trim().replace(/ +/g, ".") : ""));
}"""


@pytest.fixture
def phone(chromium, live_server):
    context = chromium.new_context(viewport=PHONE, base_url=live_server.url, is_mobile=True, has_touch=True)
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.console_errors = errors
    yield page
    context.close()
    assert not errors, f"the browser console reported errors: {errors}"


@pytest.mark.django_db(transaction=True)
def test_no_page_is_wider_than_a_desktop_screen(chromium, live_server, demo_fleet, django_user_model):
    django_user_model.objects.filter(username="admin").update(is_staff=True)
    context = chromium.new_context(viewport=DESKTOP, base_url=live_server.url)
    page = context.new_page()
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    try:
        log_in(page, "admin", demo_fleet["admin"])
        for path in PAGES:
            page.goto(path)
            scroll_width = page.evaluate("document.documentElement.scrollWidth")
            assert scroll_width <= DESKTOP["width"], (path, scroll_width, page.evaluate(WIDER_THAN_VIEWPORT))
    finally:
        context.close()
    assert not errors, f"the browser console reported errors: {errors}"


@pytest.mark.django_db(transaction=True)
def test_no_page_is_wider_than_a_phone(phone, demo_fleet, django_user_model):
    django_user_model.objects.filter(username="admin").update(is_staff=True)  # so the Admin link shows too
    log_in(phone, "admin", demo_fleet["admin"])
    for path in PAGES:
        phone.goto(path)
        scroll_width = phone.evaluate("document.documentElement.scrollWidth")
        assert scroll_width <= PHONE["width"], (path, scroll_width, phone.evaluate(WIDER_THAN_VIEWPORT))
    phone.goto("/")
    screenshot(phone, "phone.png", full_page=False)


@pytest.mark.django_db(transaction=True)
def test_every_navigation_link_and_log_out_is_on_screen_at_phone_width(phone, demo_fleet, django_user_model):
    django_user_model.objects.filter(username="admin").update(is_staff=True)
    log_in(phone, "admin", demo_fleet["admin"])
    nav = phone.get_by_role("navigation", name="Main")
    for name in NAV_LINKS:
        link = nav.get_by_role("link", name=name, exact=True)
        expect(link).to_be_in_viewport()
    expect(phone.get_by_role("button", name="Log out")).to_be_in_viewport()
    nav.get_by_role("link", name="Policy", exact=True).click()
    expect(phone).to_have_url(re.compile(r"/policy/$"))


@pytest.mark.django_db(transaction=True)
def test_the_fleet_table_scrolls_in_its_own_box_at_phone_width(phone, demo_fleet):
    log_in(phone, "support", demo_fleet["support"])
    wrap = phone.locator(".table-wrap").first
    expect(wrap).to_be_visible()
    sizes = wrap.evaluate("el => [el.scrollWidth, el.clientWidth]")
    assert sizes[0] > sizes[1]  # the table is wider than its box ...
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # ... and the page is not


@pytest.mark.django_db(transaction=True)
def test_a_map_cells_figures_stay_on_a_phones_screen(phone, demo_fleet):
    log_in(phone, "support", demo_fleet["support"], then="/map/")
    cells = phone.locator("#fleet-map a.cell")
    rightmost = max(range(cells.count()), key=lambda i: cells.nth(i).bounding_box()["x"])
    cells.nth(rightmost).focus()
    assert "Node " in cells.nth(rightmost).evaluate("el => getComputedStyle(el, '::after').content")
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
