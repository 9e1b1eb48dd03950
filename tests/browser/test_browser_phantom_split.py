"""At a desktop's and a phone's width, the first screen shows phantom slices on up nodes apart from
capacity waiting on a wake or a repair: red only when an up node has one (issue 25)."""

import pytest
from playwright.sync_api import expect

from dashboard.figures.services.farm_totals import farm_totals_refresh
from dashboard.models import Node
from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("width", [1440, 390])
@pytest.mark.django_db(transaction=True)
def test_the_phantom_card_is_red_only_for_up_nodes(chromium, live_server, demo_fleet, width):
    Node.objects.filter(status="up").update(phantom_slices=0)
    waiting = sum(
        Node.objects.exclude(status="up").values_list("phantom_slices", flat=True).exclude(phantom_slices=None)
    )
    assert waiting > 0  # the demo has standby and down nodes with free slices
    farm_totals_refresh()
    context = chromium.new_context(viewport={"width": width, "height": 900}, base_url=live_server.url)
    page = context.new_page()
    try:
        log_in(page, "support", demo_fleet["support"])
        up, rest = page.locator("#phantom-up"), page.locator("#phantom-waiting")
        expect(up).not_to_have_class("total bad")
        expect(up).to_contain_text("none to fix")
        expect(rest).to_contain_text(f"{waiting:,}")
        expect(up).to_be_in_viewport()

        node = Node.objects.filter(status="up").order_by("grid_id").first()
        Node.objects.filter(pk=node.pk).update(phantom_slices=2)
        farm_totals_refresh()
        page.reload()
        expect(up).to_have_class("total bad")
        expect(up.locator("dd")).to_contain_text("2")
    finally:
        context.close()
