"""Steering a run in waves through the API, as its job page does: approve, resume, stop, roll back the run
(a job of its own, 202) or one node (at once); the act scope and the bulk re-register permission."""

import pytest
from django.contrib.auth.models import Permission

from dashboard.catalogs.services.reregister.waves import bulk_request
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import AuditEvent, CatalogGeneration, Job, Node, WaveRun

pytestmark = pytest.mark.django_db


def paused_run(legacy_fleet) -> Job:
    legacy_fleet(3)
    job = bulk_request(parameters={"budget": 1, "batch_size": 2}).job
    WaveRun.objects.filter(job=job).update(state=WaveRun.State.PAUSED, failures=2, paused_reason="paused itself")
    return job


def finished_run(legacy_fleet, count: int = 2) -> Job:
    legacy_fleet(count)
    job = bulk_request(parameters={"waves": True}).job
    job_execute(job=job_claim(job_id=job.pk), grid=legacy_fleet.grid)
    return job


def test_it_resumes_a_paused_run_and_audits_it_as_the_api(api_call, api_token, legacy_fleet):
    job = paused_run(legacy_fleet)
    response = api_call("post", f"/api/v1/jobs/{job.pk}/waves/resume", api_token("act"))
    assert response.status_code == 200 and response.json()["state"] == "running"
    assert AuditEvent.objects.get(action="waves.resumed", job=job).source == "api"


def test_resuming_a_run_that_is_not_paused_is_a_409_with_the_services_words(api_call, api_token, legacy_fleet):
    job = paused_run(legacy_fleet)
    WaveRun.objects.filter(job=job).update(state=WaveRun.State.RUNNING)
    response = api_call("post", f"/api/v1/jobs/{job.pk}/waves/resume", api_token("act"))
    assert response.status_code == 409 and response.json()["detail"] == f"job #{job.pk} is not paused (running)"


def test_it_stops_a_run_after_the_batch_in_hand(api_call, api_token, legacy_fleet):
    job = paused_run(legacy_fleet)
    response = api_call("post", f"/api/v1/jobs/{job.pk}/waves/stop", api_token("act"))
    assert response.status_code == 200 and response.json()["state"] == "stopping"
    assert WaveRun.objects.get(job=job).stopped_by.username == "api-admins"


def test_a_second_admin_approves_and_the_one_who_asked_cannot(
    api_call, api_token, role_user, legacy_fleet, settings, django_capture_on_commit_callbacks
):
    settings.BULK_APPROVAL_OVER = 1
    legacy_fleet(2)
    ada = role_user("admins", username="ada")
    job = bulk_request(by=ada).job
    own = api_call("post", f"/api/v1/jobs/{job.pk}/waves/approve", api_token("act", user=ada))
    assert own.status_code == 409 and "not the one who asked" in own.json()["detail"]
    with django_capture_on_commit_callbacks() as sent:
        response = api_call("post", f"/api/v1/jobs/{job.pk}/waves/approve", api_token("act"))
    assert response.status_code == 200 and response.json()["approved_by"] == "api-admins"
    assert len(sent) == 1  # the job's message, after the commit


def test_a_job_without_waves_or_no_job_is_a_404(api_call, api_token, legacy_fleet):
    token = api_token("act")
    assert api_call("post", "/api/v1/jobs/999/waves/stop", token).status_code == 404
    job = finished_run(legacy_fleet, 1)
    WaveRun.objects.filter(job=job).delete()
    response = api_call("post", f"/api/v1/jobs/{job.pk}/waves/stop", token)
    assert response.status_code == 404 and "has no waves to steer" in response.json()["detail"]


def test_no_token_is_a_401_and_a_read_token_a_403(api_call, api_token, legacy_fleet):
    job = paused_run(legacy_fleet)
    assert api_call("post", f"/api/v1/jobs/{job.pk}/waves/resume").status_code == 401
    read = api_call("post", f"/api/v1/jobs/{job.pk}/waves/resume", api_token("read", role="support"))
    assert read.status_code == 403 and "needs the 'act' scope" in read.json()["detail"]
    assert WaveRun.objects.get(job=job).state == WaveRun.State.PAUSED


def test_an_act_token_whose_user_may_not_bulk_reregister_is_a_403(api_call, api_token, role_user, legacy_fleet):
    job = paused_run(legacy_fleet)
    role_user("admins", username="ada")  # the roles and their permissions made again after a transactional test
    user = role_user(None, username="carol")
    granted = Permission.objects.filter(content_type__app_label="dashboard")
    granted = granted.filter(codename__in=("view_node", "reregister_node", "view_job"))
    assert granted.count() == 3
    user.user_permissions.add(*granted)
    for path in ("waves/resume", "rollback", "rollback/1"):
        response = api_call("post", f"/api/v1/jobs/{job.pk}/{path}", api_token("act", user=user))
        assert response.status_code == 403 and "bulk re-register permission" in response.json()["detail"], path
    assert WaveRun.objects.get(job=job).state == WaveRun.State.PAUSED


def test_the_run_rollback_is_a_job_202_and_a_second_call_gets_it_200(api_call, api_token, legacy_fleet):
    job = finished_run(legacy_fleet)
    token = api_token("act")
    first = api_call("post", f"/api/v1/jobs/{job.pk}/rollback", token)
    assert first.status_code == 202, first.json()
    started = first.json()
    assert (started["created"], started["job"]["kind"], started["job"]["source"]) == (True, "run-rollback", "api")
    assert started["job"]["requested_token"]["prefix"]
    second = api_call("post", f"/api/v1/jobs/{job.pk}/rollback", token)
    assert second.status_code == 200 and second.json()["job"]["id"] == started["job"]["id"]
    assert not second.json()["created"] and Job.objects.filter(kind=Job.Kind.RUN_ROLLBACK).count() == 1
    assert set(Node.objects.values_list("carved_policy_name", flat=True)) == {"zos"}  # a worker does it


def test_the_run_rollback_of_an_active_run_is_a_409_and_of_a_job_with_no_catalogs_a_404(
    api_call, api_token, legacy_fleet
):
    job = paused_run(legacy_fleet)
    token = api_token("act")
    response = api_call("post", f"/api/v1/jobs/{job.pk}/rollback", token)
    assert response.status_code == 409 and "stop it first, then roll it back" in response.json()["detail"]
    assert api_call("post", "/api/v1/jobs/999/rollback", token).status_code == 404
    assert not Job.objects.filter(kind=Job.Kind.RUN_ROLLBACK).exists()


def test_one_node_rolls_back_at_once_and_a_second_time_is_a_409(api_call, api_token, legacy_fleet):
    job = finished_run(legacy_fleet)
    token = api_token("act")
    response = api_call("post", f"/api/v1/jobs/{job.pk}/rollback/1", token)
    assert response.status_code == 200, response.json()
    assert response.json() | {"removed": 0, "restored": 0} == {
        "job_id": job.pk,
        "node_id": 1,
        "removed": 0,
        "restored": 0,
        "kept": 0,
    }
    assert Node.objects.get(grid_id=1).carved_policy_name == "legacy"
    assert AuditEvent.objects.get(action="job.node-rolled-back", job=job).source == "api"
    again = api_call("post", f"/api/v1/jobs/{job.pk}/rollback/1", token)
    assert again.status_code == 409 and "node 1 was already rolled back" in again.json()["detail"]


def test_a_node_the_job_kept_no_catalog_of_is_a_404(api_call, api_token, legacy_fleet):
    job = finished_run(legacy_fleet)
    response = api_call("post", f"/api/v1/jobs/{job.pk}/rollback/77", api_token("act"))
    assert response.status_code == 404 and "kept no catalog of node 77" in response.json()["detail"]
    assert CatalogGeneration.objects.filter(rolled_back_at__isnull=False).count() == 0
