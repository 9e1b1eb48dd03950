"""manage.py node_reregister's waves: --stale with --canary-farm / --canary-share / --batch-size / --budget,
and --job J --resume / --stop / --rollback."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import AuditEvent, Job, Node, WaveRun


def command(*args) -> str:
    out = StringIO()
    call_command("node_reregister", *[str(a) for a in args], stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_it_queues_a_run_in_waves_with_its_flags(legacy_fleet):
    legacy_fleet(3)
    command("--stale", "--canary-farm", 1, "--batch-size", 2, "--budget", 4)
    wave = WaveRun.objects.get()
    assert (wave.canary_farm, wave.batch_size, wave.budget) == (1, 2, 4)
    assert "in waves" in Job.objects.get().described


@pytest.mark.django_db
def test_it_refuses_a_canary_farm_and_share_together(legacy_fleet):
    with pytest.raises(CommandError, match="not both") as caught:
        command("--stale", "--canary-farm", 1, "--canary-share", 5)
    assert caught.value.returncode == 2 and not Job.objects.exists()


@pytest.mark.django_db
def test_it_refuses_a_budget_below_zero_and_queues_nothing(legacy_fleet):
    legacy_fleet(1)
    with pytest.raises(CommandError, match="budget"):
        command("--stale", "--budget", -1)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_it_stops_and_resumes_a_run_from_the_command_line(legacy_fleet):
    legacy_fleet(2)
    command("--stale", "--waves")
    job = Job.objects.get()
    WaveRun.objects.filter(job=job).update(state=WaveRun.State.PAUSED)
    assert "resumed" in command("--job", job.pk, "--resume")
    assert "stopping" in command("--job", job.pk, "--stop")
    assert WaveRun.objects.get(job=job).state == WaveRun.State.STOPPING
    assert AuditEvent.objects.filter(action="waves.resumed", job=job, source="command").exists()


@pytest.mark.django_db
def test_it_rolls_a_finished_run_back_from_the_command_line(legacy_fleet):
    legacy_fleet(2)
    command("--stale", "--waves")
    job = Job.objects.get()
    job_execute(job=job_claim(job_id=job.pk), grid=legacy_fleet.grid)
    assert "node 1 rolled back" in command("--job", job.pk, "--rollback", "--rollback-node", 1)
    assert "1 node(s) rolled back, 0 blocked" in command("--job", job.pk, "--rollback")
    assert set(Node.objects.values_list("carved_policy_name", flat=True)) == {"legacy"}


@pytest.mark.django_db
def test_it_refuses_to_roll_a_run_back_beside_that_runs_rollback_job(legacy_fleet):
    from dashboard.catalogs.services.reregister.rollback import run_rollback_request

    legacy_fleet(1)
    command("--stale", "--waves")
    job = Job.objects.get()
    job_execute(job=job_claim(job_id=job.pk), grid=legacy_fleet.grid)
    rollback = run_rollback_request(job=job).job
    with pytest.raises(CommandError, match=f"is being rolled back by job #{rollback.pk} \\(queued\\); wait for it"):
        command("--job", job.pk, "--rollback")
    assert set(Node.objects.values_list("carved_policy_name", flat=True)) == {"zos"}
