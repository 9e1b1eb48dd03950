"""manage.py node_reregister: queues the same job as the button; --wait follows it; clear exits."""

import json
import threading
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import AuditEvent, Job
from tests.manage_in_process import manage

BASE_DIR = Path(__file__).resolve().parents[2]


def command(*args) -> str:
    out = StringIO()
    call_command("node_reregister", *[str(a) for a in args], stdout=out)
    return out.getvalue()


def refused(*args) -> CommandError:
    with pytest.raises(CommandError) as caught:
        command(*args)
    return caught.value


# --- queueing -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_queues_a_reregister_job_from_the_command_line(legacy_node_1774):
    out = command(1774)
    job = Job.objects.get()
    assert out == f"queued: job #{job.pk} (re-register of node 1774)\n"
    assert (job.kind, job.source, job.dry_run) == (Job.Kind.REREGISTER, "command", False)


@pytest.mark.django_db
def test_it_audits_the_request_as_coming_from_the_command_line(legacy_node_1774):
    # A dry run waits for its plan; no worker runs here, so it gives up at once (and says so, exit 3).
    assert refused(1774, "--dry-run", "--timeout", "0.1").returncode == 3
    event = AuditEvent.objects.get(action="job.requested")
    assert (event.source, event.actor, "dry run" in event.message) == ("command", None, True)


@pytest.mark.django_db
def test_it_says_a_job_is_already_running_instead_of_queueing_another(legacy_node_1774):
    first = Job.objects.get(pk=json.loads(command(1774, "--json"))["job"])
    out = command(1774)
    assert out.startswith(f"already running: job #{first.pk} ")
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_it_prints_json_for_a_queued_job(legacy_node_1774):
    outcome = json.loads(command(1774, "--json"))
    assert (outcome["status"], outcome["created"], outcome["node_id"]) == ("queued", True, 1774)


@pytest.mark.django_db
def test_it_queues_a_bulk_job_for_one_farm(legacy_node_1774):
    command("--stale", "--farm-id", 1)
    job = Job.objects.get()
    assert (job.kind, job.farm_id, job.node) == (Job.Kind.BULK_REREGISTER, 1, None)


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args, words",
    [
        ((999999,), "node 999999 is not registered"),
        ((), "give either a NODE_ID or --stale"),
        ((1774, "--stale"), "give either a NODE_ID or --stale"),
        ((1774, "--farm-id", 3), "--farm-id only goes with --stale"),
        ((1774, "--wait", "--timeout", 0), "--timeout must be more than 0"),
    ],
)
def test_it_refuses_bad_arguments_and_queues_nothing(legacy_node_1774, args, words):
    error = refused(*args)
    assert (words in str(error), error.returncode) == (True, 2)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_it_gives_up_waiting_with_exit_3_and_the_job_keeps_going(legacy_node_1774):
    error = refused(1774, "--wait", "--timeout", "0.2")
    assert (error.returncode, "still queued after 0.2 s" in str(error)) == (3, True)
    assert Job.objects.get().state == Job.State.QUEUED


@pytest.mark.django_db
def test_it_exits_2_without_a_traceback_from_the_shell(legacy_node_1774):
    done = manage("node_reregister", "424242", "--skip-checks")
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "CommandError: node 424242 is not registered; run manage.py node_register 424242",
    )


# --- waiting (a real worker) --------------------------------------------------------------------


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_waits_and_prints_the_change(legacy_node_1774, live_worker):
    out = command(1774, "--wait")
    assert "  before:    7 slices (6 free, 6 deployable, 5 placeable now, 1 phantom)" in out
    assert "  after:     6 slices (5 free, 6 deployable, 5 placeable now, 0 phantom)" in out


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_waits_and_prints_the_result_as_json(legacy_node_1774, live_worker):
    outcome = json.loads(command(1774, "--wait", "--json"))
    assert (outcome["status"], outcome["before"]["slices"], outcome["after"]["slices"]) == ("succeeded", 7, 6)
    assert len(outcome["removed"]) == 6 and outcome["dry_run"] is False


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_exits_1_with_the_reason_when_the_job_fails(legacy_node_1774, gridproxy_down, live_worker):
    error = refused(1774, "--wait")
    assert error.returncode == 1 and gridproxy_down.split("//")[1] in str(error)


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_waits_for_a_bulk_job(legacy_fleet, live_worker):
    legacy_fleet(3)
    outcome = json.loads(command("--stale", "--wait", "--json"))
    assert (outcome["status"], outcome["stale"], outcome["reregistered"], outcome["failures"]) == (
        "succeeded",
        3,
        3,
        [],
    )


@pytest.mark.django_db(transaction=True)
def test_it_follows_the_job_already_running_to_its_end(legacy_node_1774):
    # This test is the worker: it holds the job, and finishes it while the command waits.
    holder = job_claim(job_id=Job.objects.create(kind=Job.Kind.REREGISTER, node=legacy_node_1774).pk)

    def finish():
        try:
            job_execute(job=holder)
        finally:
            connection.close()

    timer = threading.Timer(0.3, finish)
    timer.start()
    out = command(1774, "--wait", "--timeout", 30)
    timer.join()
    assert out.startswith(f"already running: job #{holder.pk} ")
    assert f"job #{holder.pk}: re-register of node 1774 succeeded" in out


@pytest.mark.django_db(transaction=True)
def test_it_counts_the_bulk_failures_it_does_not_list(legacy_fleet):
    from dashboard.catalogs.services.reregister import BulkLimits

    legacy_fleet(3)
    for gone in (1, 2, 3):
        legacy_fleet.grid.remove_node(gone)
    # This test is the worker: it holds the bulk job, and finishes it while the command waits.
    holder = job_claim(job_id=Job.objects.create(kind=Job.Kind.BULK_REREGISTER).pk)

    def finish():
        try:
            job_execute(job=holder, limits=BulkLimits(failures_kept=1))
        finally:
            connection.close()

    timer = threading.Timer(0.3, finish)
    timer.start()
    out = command("--stale", "--wait", "--timeout", 30)
    timer.join()
    assert "  node 1 failed: " in out and "node 2 failed" not in out
    assert "  and 2 more failed node(s), not listed" in out


@pytest.mark.django_db(transaction=True)
def test_a_dry_run_without_wait_waits_for_its_plan_and_prints_it(legacy_node_1774):
    # Issue 25: "--dry-run" without "--wait" printed only "queued: job #7". This test is the worker.
    def work():
        try:
            while not (job := Job.objects.filter(state=Job.State.QUEUED).first()):
                threading.Event().wait(0.05)
            job_execute(job=job_claim(job_id=job.pk))
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    out = command(1774, "--dry-run", "--timeout", 30)
    worker.join()
    assert out.startswith("queued: job #")
    assert "would be:" in out and "removed (" in out and "dry run" in out
    assert legacy_node_1774.slices.count() == 7  # nothing changed
