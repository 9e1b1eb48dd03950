"""A run in waves watched in the browser: the job page shows it pause itself past its budget, live, and resume."""

import pytest

from dashboard.models import AuditEvent, Job, WaveRun
from tests.browser.conftest import log_in, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.slow]


@pytest.mark.django_db(transaction=True)
def test_the_wave_runs_page_pauses_and_resumes_live(
    browser_page, legacy_fleet, role_user, celery_worker, settings, monkeypatch
):
    legacy_fleet(9)
    # Each batch slowed down (jobs.services.job_pause: inert unless DEBUG), so the page is seen running first.
    settings.DEBUG = True
    monkeypatch.setenv("JOB_TEST_PAUSE", "swapped:1.5")
    legacy_fleet.grid.remove_node(2)  # the first batch fails on it: over a budget of 0
    role_user("admins", username="ada", password="not-a-real-password-1774")
    page = browser_page
    log_in(page, "ada", "not-a-real-password-1774", then="/fleet/reregister-stale/")
    page.get_by_label("Canary share (%)").fill("0")
    page.get_by_label("Batch size").fill("3")
    page.get_by_label("Budget").fill("0")
    page.get_by_role("button", name="Re-register in waves (9 nodes)").click()

    waves = page.locator("section.waves")
    assert waves.get_attribute("data-wave-state") == "running"  # so only its polling can show the pause
    waves.and_(page.locator('[data-wave-state="paused"]')).wait_for(timeout=60_000)
    assert "over its budget of 0" in page.locator(".paused-reason").inner_text()
    assert page.locator("tr.wave-done").count() == 1 and page.locator("tr.wave-pending").count() == 2
    screenshot(page, "waves-paused.png")

    page.get_by_role("button", name="Resume").click()
    card = page.locator("article.job")
    card.and_(page.locator('[data-job-state="succeeded"]')).wait_for(timeout=60_000)
    assert page.locator('section.waves[data-wave-state="done"]').count() == 1
    assert page.locator("tr.wave-done").count() == 3
    assert page.get_by_role("button", name="Resume").count() == 0
    job = Job.objects.get(kind=Job.Kind.BULK_REREGISTER)
    assert (job.result["reregistered"], job.result["failed"]) == (8, 1)
    assert WaveRun.objects.get(job=job).spent_at_resume == 1
    assert AuditEvent.objects.filter(action="waves.resumed", job=job, actor__username="ada").exists()


@pytest.mark.django_db(transaction=True)
def test_the_run_rollback_button_goes_to_the_rollback_jobs_page_which_follows_it_live(
    browser_page, legacy_fleet, role_user, celery_worker, job_finished
):
    from dashboard.catalogs.services.reregister.waves import bulk_request
    from dashboard.models import Slice

    nodes = legacy_fleet(3)
    # The worker runs the run: claiming it here too raced the worker for it (one of the two got None).
    run = bulk_request(parameters={"waves": True}).job
    assert job_finished(run, timeout=60).state == Job.State.SUCCEEDED
    Slice.objects.filter(pk=nodes[2].slices.order_by("index").last().pk).update(state="rented", rented_by_twin_id=7)
    role_user("admins", username="ada", password="not-a-real-password-1774")
    page = browser_page
    log_in(page, "ada", "not-a-real-password-1774", then=f"/jobs/{run.pk}/")
    # The run's rollback asks first, naming its count (issue 34); the admin accepts.
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.get_by_role("button", name="Roll back the run (3 nodes)").click()

    # htmx sends the browser to the rollback job's page (HX-Redirect); the run's own card is finished already.
    page.wait_for_url(lambda url: not url.rstrip("/").endswith(f"/jobs/{run.pk}"), timeout=30_000)
    card = page.locator("article.job")
    card.and_(page.locator('[data-job-state="succeeded"]')).wait_for(timeout=60_000)
    rollback = Job.objects.get(kind=Job.Kind.RUN_ROLLBACK)
    assert page.url.endswith(f"/jobs/{rollback.pk}/")
    assert "2 of 3 node(s)" in card.inner_text()
    assert "node 3 cannot be rolled back" in page.locator(".rollback-blocked").inner_text()
    assert asked and asked[0].startswith("Roll back 3 nodes of job #")
