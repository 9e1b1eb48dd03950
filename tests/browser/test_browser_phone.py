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


# Every cell of a stacked table (table.stack) on the screen, each with its column's name beside it.
CELLS_OFF_SCREEN = """(table) => {
  const width = document.documentElement.clientWidth;
  return [...table.querySelectorAll("tbody td, tbody th")]
    .filter(c => c.offsetParent !== null && !c.classList.contains("empty"))
    .map(c => [c.getAttribute("data-label") || c.tagName, c.getBoundingClientRect()])
    .filter(([, r]) => r.left < -0.5 || r.right > width + 0.5)
    .slice(0, 5).map(([label, r]) => `${label}: ${Math.round(r.left)}..${Math.round(r.right)}`);
}"""


@pytest.mark.django_db(transaction=True)
def test_issue_45_at_390_px_the_fleet_tables_rows_stack_with_every_figure_on_screen(phone, demo_fleet):
    """Every figure of a fleet row (free, placeable now, catalog, reading age, not only deployable and phantom)
    is on the screen, under its column's name: no figure hides past the edge or behind a tap."""
    log_in(phone, "support", demo_fleet["support"])
    table = phone.locator("#fleet-table")
    row = table.locator("tbody tr[data-node]").first
    expect(row).to_be_visible()
    assert table.evaluate(CELLS_OFF_SCREEN) == []
    for label in ("Free", "Placeable now", "Phantom", "Catalog", "Reading age"):
        expect(row.locator(f'td[data-label="{label}"]')).to_be_visible()
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


@pytest.mark.django_db(transaction=True)
def test_a_map_cells_figures_stay_on_a_phones_screen(phone, demo_fleet):
    log_in(phone, "support", demo_fleet["support"], then="/map/")
    cells = phone.locator("#fleet-map a.cell")
    rightmost = max(range(cells.count()), key=lambda i: cells.nth(i).bounding_box()["x"])
    cells.nth(rightmost).focus()
    assert "Node " in cells.nth(rightmost).evaluate("el => getComputedStyle(el, '::after').content")
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


# Each label of a form against its input: the label's `for` names one element, an input of the same form,
# and every visible input of the form has a label naming it.
LABELS_OF = """(form) => {
  const problems = [];
  for (const label of form.querySelectorAll("label")) {
    const id = label.htmlFor;
    const named = document.querySelectorAll(`[id="${CSS.escape(id)}"]`);
    if (named.length !== 1) problems.push(`label "${label.textContent.trim()}" for=${id}: ${named.length} elements with that id`);
    else if (!form.contains(named[0])) problems.push(`label "${label.textContent.trim()}" names #${id} outside its form`);
    else if (!named[0].matches("input, select, textarea")) problems.push(`label "${label.textContent.trim()}" names a ${named[0].tagName}`);
  }
  for (const input of form.querySelectorAll("input:not([type=hidden]), select, textarea")) {
    if (!input.labels || input.labels.length !== 1) problems.push(`#${input.id} has ${input.labels ? input.labels.length : 0} labels`);
  }
  return problems;
}"""


@pytest.mark.django_db(transaction=True)
def test_at_390_px_the_fleet_tables_deployable_and_phantom_are_on_screen(phone, demo_fleet):
    """Issue 34: on a phone the deployable and phantom columns are on the screen itself, not past its
    right edge inside the table's scroll box (every row of the first page; the stacked rows keep their
    header for screen readers only, issue 45)."""
    log_in(phone, "support", demo_fleet["support"])
    table = phone.locator("#fleet-table")
    expect(table.locator("tbody tr[data-node]").first).to_be_visible()
    headers = table.locator("thead th")
    names = [headers.nth(i).inner_text().strip() for i in range(headers.count())]
    for wanted in ("deployable", "Phantom"):
        column = next(i for i, name in enumerate(names) if wanted in name)
        cells = table.locator(f"tbody tr > :nth-child({column + 1})")  # the header row is for screen readers
        boxes = cells.evaluate_all(
            "cells => cells.map(c => { const r = c.getBoundingClientRect(); return [r.left, r.right]; })"
        )
        assert boxes and all(0 <= left and right <= PHONE["width"] for left, right in boxes), (wanted, boxes[:3])
    table.scroll_into_view_if_needed()
    screenshot(phone, "phone-fleet-table.png", full_page=False)


@pytest.mark.django_db(transaction=True)
def test_the_maintenance_forms_labels_name_their_inputs(phone, demo_fleet):
    """Issue 34: the withhold (maintenance) form, on a node page and a farm's fleet page, each label for its
    own input; and axe finds no label problem there."""
    from axe_playwright_python.sync_playwright import Axe

    from dashboard.models import Node

    log_in(phone, "admin", demo_fleet["admin"], then="/nodes/1774/")
    form = phone.locator("#withhold-form")
    expect(form).to_be_attached()
    assert form.evaluate(LABELS_OF) == []
    assert sorted(form.locator("label").all_inner_texts()) == ["From (UTC)", "Reason", "Until (UTC)"]
    farm = Node.objects.get(grid_id=1774).farm_id
    phone.goto(f"/?farm={farm}")
    phone.locator("#farm-withhold summary").click()
    farm_form = phone.locator("#farm-withhold form")
    assert farm_form.evaluate(LABELS_OF) == []
    for path in ("/nodes/1774/", f"/?farm={farm}"):
        phone.goto(path)
        label_rules = {
            "label",
            "label-title-only",
            "form-field-multiple-labels",
            "duplicate-id",
            "label-content-name-mismatch",
        }
        found = [v["id"] for v in Axe().run(phone).response["violations"] if v["id"] in label_rules]
        assert found == [], (path, found)


# Each label of the form directly above its own input (same column, nothing between): never beside the next one.
LABEL_ABOVE_ITS_INPUT = """(form) => {
  const problems = [];
  for (const label of form.querySelectorAll("label")) {
    const input = document.getElementById(label.htmlFor);
    const l = label.getBoundingClientRect(), i = input.getBoundingClientRect();
    if (!(l.bottom <= i.top + 1 && i.top - l.bottom < 12 && Math.abs(l.left - i.left) < 2))
      problems.push(`${label.textContent.trim()}: label ${Math.round(l.left)},${Math.round(l.bottom)} input ${Math.round(i.left)},${Math.round(i.top)}`);
  }
  return problems;
}"""


@pytest.mark.django_db(transaction=True)
def test_issue_45_at_390_px_a_withheld_nodes_page_fits_and_its_form_pairs_each_label_with_its_input(phone, demo_fleet):
    from dashboard.models import Node
    from dashboard.nodes.services.withholds import node_withhold

    # Any node will do: the first the demo registered that is up (not one of the tour's).
    node = Node.objects.filter(status="up").order_by("-grid_id").first()
    node_withhold(nodes=[node], reason="disk swap in rack 4, planned with the farmer", via="cli")
    log_in(phone, "admin", demo_fleet["admin"], then=f"/nodes/{node.grid_id}/")
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], phone.evaluate(WIDER_THAN_VIEWPORT)
    assert phone.locator("#withhold-form").evaluate(LABEL_ABOVE_ITS_INPUT) == []
    for table in ("table.windows", "#reconciliation table", "#catalog-table"):
        assert phone.locator(table).evaluate(CELLS_OFF_SCREEN) == [], table


@pytest.mark.django_db(transaction=True)
def test_issue_45_at_390_px_a_failed_deployments_cause_and_figures_are_on_screen(phone, demo_fleet):
    log_in(phone, "support", demo_fleet["support"], then="/deployments/failed/")
    table = phone.locator("#failed-deployments")
    expect(table.locator('tbody td[data-label="Cause"]').first).to_be_visible()
    assert table.evaluate(CELLS_OFF_SCREEN) == []
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
