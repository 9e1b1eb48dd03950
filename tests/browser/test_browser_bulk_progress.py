"""A bulk re-register of 1,000 nodes watched in the browser: nodes done, failures and time left move live."""

import time

import pytest

from dashboard.models import Job
from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.slow]

# (nodes done, time left, failures) as the progress region shows them now, or null without one.
_PROGRESS_NOW = """() => {
    const region = document.querySelector(".job-progress");
    if (!region) return null;
    const left = region.querySelector(".time-left");
    return [region.dataset.done, left ? left.innerText : "", region.dataset.failed];
}"""


@pytest.mark.django_db(transaction=True)
def test_a_bulk_reregister_of_1000_nodes_shows_its_progress_live(
    browser_page, legacy_fleet, role_user, celery_worker, settings, monkeypatch
):
    legacy_fleet(1000)
    legacy_fleet.grid.remove_node(17)  # one failure to count
    # Slow each batch of 100 down (jobs.services.job_pause: inert unless DEBUG), so the page has time to see it.
    settings.DEBUG = True
    monkeypatch.setenv("JOB_TEST_PAUSE", "swapped:0.8")
    role_user("admins", username="ada", password="not-a-real-password-1774")
    page = browser_page
    log_in(page, "ada", "not-a-real-password-1774", then="/fleet/reregister-stale/")
    page.get_by_role("button", name="Re-register 1000 nodes").click()

    seen: list[tuple[str, str, str]] = []
    deadline = time.monotonic() + 120
    card = page.locator("article.job")
    while time.monotonic() < deadline and card.get_attribute("data-job-state") in ("queued", "running"):
        # One look at the page, in one script: htmx may swap the region between two locator calls
        # (the last swap, when the job ends, has no time left to show).
        state = page.evaluate(_PROGRESS_NOW)
        if state is not None:
            state = tuple(state)
            if not seen or seen[-1] != state:
                seen.append(state)
                if len(seen) == 3:
                    screenshot(page, "bulk-progress.png")
        page.wait_for_timeout(150)

    intermediate = [s for s in seen if 0 < int(s[0]) < 1000 and s[1].startswith("about")]
    assert len({s[0] for s in intermediate}) >= 3, seen
    assert any(s[2] == "1" for s in seen), seen
    assert card.get_attribute("data-job-state") == "succeeded"
    job = Job.objects.get(kind=Job.Kind.BULK_REREGISTER)
    assert (job.result["reregistered"], job.result["failed"]) == (999, 1)
    assert page.get_by_text("Steps (").count() == 1
