"""The job page of a run in waves: the waves, the budget, and an admin's approve, resume, stop and rollback."""

import pytest

from dashboard.catalogs.services.reregister.waves import bulk_request
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import AuditEvent, Job, Node, WaveRun


def paused_run(legacy_fleet, by=None) -> Job:
    legacy_fleet(3)
    job = bulk_request(parameters={"budget": 1, "batch_size": 2}, by=by).job
    WaveRun.objects.filter(job=job).update(
        state=WaveRun.State.PAUSED, failures=2, paused_reason="paused itself: 0 refusal(s) and 2 failure(s)"
    )
    return job


@pytest.mark.django_db
def test_it_shows_the_waves_budget_and_a_resume_button_to_an_admin(admins_client, legacy_fleet):
    job = paused_run(legacy_fleet)
    page = admins_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Paused itself: 0 refusal(s) and 2 failure(s)" in page and "Left before it pauses" in page
    assert f'action="/jobs/{job.pk}/waves/resume/"' in page


@pytest.mark.django_db
def test_support_reads_the_waves_without_buttons_and_cannot_resume(support_client, legacy_fleet):
    job = paused_run(legacy_fleet)
    page = support_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Left before it pauses" in page and "/waves/resume/" not in page
    assert support_client.post(f"/jobs/{job.pk}/waves/resume/").status_code == 403
    assert WaveRun.objects.get(job=job).state == WaveRun.State.PAUSED


@pytest.mark.django_db
def test_an_admin_resumes_a_paused_run_with_htmx_and_it_is_audited(admins_client, legacy_fleet):
    job = paused_run(legacy_fleet)
    response = admins_client.post(f"/jobs/{job.pk}/waves/resume/", headers={"HX-Request": "true"})
    assert response.status_code == 200 and 'data-wave-state="running"' in response.content.decode()
    assert WaveRun.objects.get(job=job).spent_at_resume == 2
    assert AuditEvent.objects.filter(action="waves.resumed", job=job).exists()


@pytest.mark.django_db
def test_the_actions_take_only_a_post(admins_client, legacy_fleet):
    job = paused_run(legacy_fleet)
    assert admins_client.get(f"/jobs/{job.pk}/waves/stop/").status_code == 405


@pytest.mark.django_db
def test_resuming_a_run_that_is_not_paused_says_so(admins_client, legacy_fleet):
    job = paused_run(legacy_fleet)
    WaveRun.objects.filter(job=job).update(state=WaveRun.State.RUNNING)
    response = admins_client.post(f"/jobs/{job.pk}/waves/resume/", headers={"HX-Request": "true"})
    assert "is not paused (running)" in response.content.decode()


@pytest.mark.django_db
def test_the_one_who_asked_cannot_approve_their_own_run(client, role_user, legacy_fleet, settings):
    settings.BULK_APPROVAL_OVER = 1
    legacy_fleet(2)
    ada = role_user("admins", username="ada")
    job = bulk_request(by=ada).job
    client.force_login(ada)
    response = client.post(f"/jobs/{job.pk}/waves/approve/", follow=True)
    assert "not the one who asked" in response.content.decode()
    assert WaveRun.objects.get(job=job).state == WaveRun.State.AWAITING_APPROVAL
    client.force_login(role_user("admins", username="bob"))
    client.post(f"/jobs/{job.pk}/waves/approve/")
    assert WaveRun.objects.get(job=job).approved_by.username == "bob"


@pytest.mark.django_db
def test_an_admin_rolls_a_finished_run_back_from_its_page(admins_client, legacy_fleet):
    legacy_fleet(2)
    job = bulk_request(parameters={"waves": True}).job
    job_execute(job=job_claim(job_id=job.pk), grid=legacy_fleet.grid)
    page = admins_client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Roll back the run (2 nodes)" in page and "Roll back node 1" in page
    # The run's rollback asks first, with its count (issue 34); a node's own rollback is one click.
    assert f'hx-confirm="Roll back 2 nodes of job #{job.pk} to their catalogs before it?' in page
    assert "2 nodes&#x27; previous catalogs kept" in page or "2 nodes' previous catalogs kept" in page
    response = admins_client.post(f"/jobs/{job.pk}/rollback/1/", headers={"HX-Request": "true"})
    assert "Node 1 rolled back" in response.content.decode()
    response = admins_client.post(f"/jobs/{job.pk}/rollback/")
    rollback = Job.objects.get(kind=Job.Kind.RUN_ROLLBACK)
    assert response.status_code == 302 and response["Location"] == f"/jobs/{rollback.pk}/"
    job_execute(job=job_claim(job_id=rollback.pk))
    assert set(Node.objects.values_list("carved_policy_name", flat=True)) == {"legacy"}
    assert "2 rolled back" in admins_client.get(f"/jobs/{job.pk}/").content.decode()
    page = admins_client.get(f"/jobs/{rollback.pk}/").content.decode()
    assert "1 of 1 node(s) of job" in page and f'href="/jobs/{job.pk}/"' in page


@pytest.mark.django_db
def test_the_run_rollback_button_starts_a_job_and_a_second_click_finds_it(admins_client, legacy_fleet):
    legacy_fleet(2)
    job = bulk_request(parameters={"waves": True}).job
    job_execute(job=job_claim(job_id=job.pk), grid=legacy_fleet.grid)
    first = admins_client.post(f"/jobs/{job.pk}/rollback/", headers={"HX-Request": "true"})
    rollback = Job.objects.get(kind=Job.Kind.RUN_ROLLBACK)
    assert first.status_code == 200 and first["HX-Redirect"] == f"/jobs/{rollback.pk}/"
    second = admins_client.post(f"/jobs/{job.pk}/rollback/", follow=True)
    assert "already being rolled back" in second.content.decode()
    assert Job.objects.filter(kind=Job.Kind.RUN_ROLLBACK).count() == 1
    page = admins_client.get(f"/jobs/{job.pk}/").content.decode()
    assert f'Being rolled back now by <a href="/jobs/{rollback.pk}/">' in page and "Roll back the run" not in page
    assert set(Node.objects.values_list("carved_policy_name", flat=True)) == {"zos"}  # only the worker rolls back


@pytest.mark.django_db
def test_support_cannot_start_a_run_rollback(support_client, legacy_fleet):
    legacy_fleet(1)
    job = bulk_request(parameters={"waves": True}).job
    job_execute(job=job_claim(job_id=job.pk), grid=legacy_fleet.grid)
    assert support_client.post(f"/jobs/{job.pk}/rollback/").status_code == 403
    assert not Job.objects.filter(kind=Job.Kind.RUN_ROLLBACK).exists()


@pytest.mark.django_db
def test_a_run_rollback_of_a_job_still_running_is_refused_on_the_card(admins_client, legacy_fleet):
    job = paused_run(legacy_fleet)
    response = admins_client.post(f"/jobs/{job.pk}/rollback/", headers={"HX-Request": "true"})
    assert "stop it first, then roll it back" in response.content.decode()
    assert not Job.objects.filter(kind=Job.Kind.RUN_ROLLBACK).exists()


@pytest.mark.django_db
def test_the_stale_page_starts_a_run_in_waves(admins_client, legacy_fleet):
    legacy_fleet(2)
    page = admins_client.get("/fleet/reregister-stale/").content.decode()
    assert "Re-register in waves (2 nodes)" in page
    response = admins_client.post("/fleet/reregister-stale/", {"waves": "on", "canary_share": "50", "budget": "0"})
    wave = WaveRun.objects.get()
    assert response.status_code == 302 and (wave.canary_share, wave.budget) == (50, 0)


@pytest.mark.django_db
def test_the_stale_page_refuses_a_share_over_100_and_starts_nothing(admins_client, legacy_fleet):
    legacy_fleet(1)
    response = admins_client.post("/fleet/reregister-stale/", {"waves": "on", "canary_share": "150"})
    assert response.status_code == 400 and not Job.objects.exists()


@pytest.mark.django_db
def test_the_api_shows_a_runs_waves_and_what_was_rolled_back(api_token, api_call, legacy_fleet):
    from dashboard.catalogs.services.reregister.rollback import run_rollback

    legacy_fleet(3)
    job = bulk_request(parameters={"canary_share": 0, "batch_size": 2}).job
    job_execute(job=job_claim(job_id=job.pk), grid=legacy_fleet.grid)
    run_rollback(job=job)
    token = api_token("read")
    response = api_call("get", f"/api/v1/jobs/{job.pk}/waves", token=token)
    body = response.json()
    assert response.status_code == 200, body
    assert [(w["label"], w["nodes"], w["state"]) for w in body["waves"]] == [
        ("batch 1", 2, "done"),
        ("batch 2", 1, "done"),
    ]
    assert (body["state"], body["kept"], body["rolled_back"], body["rolled_back_nodes"]) == ("done", 3, 3, [1, 2, 3])


@pytest.mark.django_db
def test_the_api_says_404_for_a_job_with_no_waves(api_token, api_call):
    response = api_call("get", "/api/v1/jobs/999/waves", token=api_token("read"))
    assert response.status_code == 404 and "not a re-register" in response.json()["detail"]
