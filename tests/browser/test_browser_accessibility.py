"""axe-core (the copy bundled by axe-playwright-python; nothing is downloaded) on every main page,
as an admin and as support: no serious or critical violation."""

import pytest
from axe_playwright_python.sync_playwright import Axe

from dashboard.models import Deployment, Job, Node
from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SERIOUS = {"serious", "critical"}


def _pages(role: str) -> list[str]:
    node = Node.objects.order_by("grid_id").first()
    job = Job.objects.order_by("pk").first()
    pages = [
        "/",
        "/map/",
        f"/nodes/{node.grid_id}/",
        "/jobs/",
        "/deployments/failed/",
        "/placement/?cru=1&mru=4GiB&sru=50GiB",
        "/policy/",
        "/alerts/",
    ]
    if job is not None:
        pages.append(f"/jobs/{job.pk}/")
    if role == "admin":
        pages += ["/nodes/add/", "/api-tokens/"]
    return pages


def _serious(page) -> list[str]:
    results = Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes'][:3]]}"
        for v in results.response["violations"]
        if v["impact"] in SERIOUS
    ]


@pytest.mark.parametrize("role", ["admin", "support"])
@pytest.mark.django_db(transaction=True)
def test_it_finds_no_serious_or_critical_violation_on_any_main_page(browser_page, demo_fleet, role):
    from dashboard.jobs.services.jobs import job_request

    if not Job.objects.exists():
        job_request(kind=Job.Kind.PRECHECK, node=Node.objects.order_by("grid_id").first(), source="command")
    # The failed deployments page must have rows for axe to check (the demo makes real failures).
    assert Deployment.objects.filter(state=Deployment.State.FAILED).exists()
    # Firing alerts, so that the strip on every page and the alerts page's buttons are checked too.
    from django.utils import timezone

    from dashboard.alerts import rules
    from dashboard.alerts.services.alerts import alerts_record

    alerts_record(
        conditions=[
            rules.Condition(rules.FAILURES, "memory", "7 deployments failed for memory in the last 15 min", "See ..."),
            rules.Condition(rules.STALE, "fleet", "2 nodes have had a stale catalog for over 1 day", "Re-register."),
        ],
        now=timezone.now(),
    )
    page = browser_page
    log_in(page, role, demo_fleet[role])
    found = {}
    for path in _pages(role):
        page.goto(path)
        page.wait_for_load_state()
        violations = _serious(page)
        if violations:
            found[path] = violations
    assert found == {}
