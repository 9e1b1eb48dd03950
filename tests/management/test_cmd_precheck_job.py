"""manage.py precheck NODE_ID --job: the precheck as a job on the worker (the --job flag only;
the inline command is tested in test_cmd_precheck.py)."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard.models import AuditEvent, Job


def precheck(*args) -> str:
    out = StringIO()
    call_command("precheck", *[str(a) for a in args], stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_it_queues_a_precheck_job_from_the_command_line(legacy_node_1774):
    out = precheck(1774, "--job")
    job = Job.objects.get()
    assert out == f"queued: job #{job.pk} (node 1774, queued)\n"
    assert (job.kind, job.source, AuditEvent.objects.filter(job=job, action="job.requested").count()) == (
        Job.Kind.PRECHECK,
        "command",
        1,
    )


@pytest.mark.django_db
def test_it_says_which_job_is_already_running_on_the_node(legacy_node_1774):
    active = Job.objects.create(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    out = precheck(1774, "--job")
    assert out == f"already running: job #{active.pk} (node 1774, a re-register, queued)\n"


@pytest.mark.django_db
def test_it_refuses_wait_without_job(legacy_node_1774):
    with pytest.raises(CommandError, match="--wait only goes with --job"):
        precheck(1774, "--wait")
    assert not Job.objects.exists()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_waits_for_the_job_and_prints_the_report(legacy_node_1774, live_worker):
    out = precheck(1774, "--job", "--wait")
    assert "  free slices: 6   placeable now: 5   phantom slices: 1" in out
    assert "  slice   6 PHANTOM does not fit: memory" in out


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_prints_the_jobs_report_as_json(legacy_node_1774, live_worker):
    outcome = json.loads(precheck(1774, "--job", "--wait", "--json"))
    assert (outcome["status"], outcome["placeable_now"], outcome["phantom_slices"]) == ("succeeded", 5, [6])


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_exits_1_when_the_job_fails(legacy_node_1774, gridproxy_down, live_worker):
    with pytest.raises(CommandError) as caught:
        precheck(1774, "--job", "--wait")
    assert caught.value.returncode == 1 and gridproxy_down.split("//")[1] in str(caught.value)
