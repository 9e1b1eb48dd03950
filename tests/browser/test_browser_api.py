"""The marketplace reports a ZOS memory refusal through the API; support staff see it explained."""

from datetime import timedelta

import requests
from django.utils import timezone
from playwright.sync_api import expect

from dashboard.capacity import GiB
from tests.browser.conftest import log_in

MEMORY_ERROR = (
    "workload s1774_6 within deployment 7 failed with error: failed to satisfy required capacity: "
    "cannot fulfil required memory size 4294967296 bytes out of usable 4187593113 bytes"
)


def test_it_shows_a_reported_memory_refusal_classified_on_the_failed_deployments_page(
    browser_page, live_server, sim_node, role_user, api_token
):
    from dashboard.models import Slice

    node = sim_node(1774, policy_name="legacy", cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242)
    Slice.objects.filter(node=node).update(created_at=timezone.now() - timedelta(days=1))  # before the report
    report = {
        "node_id": 1774,
        "slice_index": 6,
        "marketplace_id": "contract-81723",
        "outcome": "failed",
        "error": MEMORY_ERROR,
        "at": (timezone.now() - timedelta(minutes=5)).isoformat(),
    }
    answer = requests.post(
        f"{live_server.url}/api/v1/deployments",
        json=report,
        timeout=10,
        headers={"Authorization": f"Bearer {api_token('report')}"},
    )
    assert answer.status_code == 201, answer.text
    role_user("support", username="sam")
    log_in(browser_page, "sam", "not-a-real-password-1774", then="/deployments/failed/")
    row = browser_page.locator('#failed-deployments tbody tr[data-cause="memory"]')
    expect(row).to_contain_text("ZOS refused the VM for memory: it needs 4.00 GiB but only 3.90 GiB is usable")
    expect(row).to_contain_text("cannot fulfil required memory size")
