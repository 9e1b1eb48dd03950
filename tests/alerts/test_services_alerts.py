"""dashboard.alerts.services.alerts: firing/resolved transitions, one message per transition, delivery at the edge."""

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.alerts import rules
from dashboard.alerts.services.alerts import (
    AlertError,
    alert_acknowledge,
    alerts_deliver,
    alerts_evaluate,
    alerts_record,
)
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import Alert, AuditEvent, Job, Node
from tests.alert_receiver import AlertReceiver

pytestmark = pytest.mark.django_db

PHANTOM_FARM_1 = rules.Condition(
    rules.PHANTOM, "farm 1", "Farm 1 offers 1 phantom slice on 1 up node (memory 1)", "node 1774 (1)"
)


def record(*conditions, minutes=0):
    return alerts_record(conditions=list(conditions), now=timezone.now() + timedelta(minutes=minutes))


def run_job(kind, node) -> Job:
    """As tests/jobs/test_services_jobs.py: request, claim and execute in this process."""
    job = job_claim(job_id=job_request(kind=kind, node=node).job.pk)
    job_execute(job=job)
    job.refresh_from_db()
    assert job.state == Job.State.SUCCEEDED, job.error
    return job


# --- recording ----------------------------------------------------------------------------------


def test_it_records_a_condition_as_a_firing_alert():
    evaluation = record(PHANTOM_FARM_1)
    alert = Alert.objects.get()
    assert (alert.rule, alert.subject, alert.state, alert.notified_state) == (rules.PHANTOM, "farm 1", "firing", "")
    assert evaluation.fired == [alert]


def test_it_keeps_one_row_while_the_rule_keeps_firing():
    first = record(PHANTOM_FARM_1)
    second = record(PHANTOM_FARM_1, minutes=1)
    assert (Alert.objects.count(), len(first.fired), len(second.fired)) == (1, 1, 0)


def test_it_keeps_the_words_current_while_firing():
    record(PHANTOM_FARM_1)
    worse = rules.Condition(rules.PHANTOM, "farm 1", "Farm 1 offers 4 phantom slices on 2 up nodes (memory 4)", "…")
    record(worse, minutes=1)
    assert Alert.objects.get().summary == worse.summary


def test_it_resolves_an_alert_whose_condition_is_gone():
    record(PHANTOM_FARM_1)
    evaluation = record(minutes=1)
    alert = Alert.objects.get()
    assert (alert.state, evaluation.resolved) == (Alert.State.RESOLVED, [alert])


def test_it_fires_again_as_a_new_episode_without_the_old_acknowledgement(role_user):
    record(PHANTOM_FARM_1)
    alert_acknowledge(alert=Alert.objects.get(), by=role_user("admins"))
    record(minutes=1)
    again = record(PHANTOM_FARM_1, minutes=2)
    alert = Alert.objects.get()
    assert (alert.state, alert.acknowledged_by, again.fired) == (Alert.State.FIRING, None, [alert])


def test_it_audits_each_transition():
    record(PHANTOM_FARM_1)
    record(minutes=1)
    assert list(AuditEvent.objects.order_by("at", "pk").values_list("action", "source")) == [
        ("alert.firing", "beat"),
        ("alert.resolved", "beat"),
    ]


def test_it_keeps_subjects_apart():
    record(PHANTOM_FARM_1, rules.Condition(rules.PHANTOM, "farm 9", "Farm 9 …", ""))
    record(PHANTOM_FARM_1, minutes=1)
    assert dict(Alert.objects.values_list("subject", "state")) == {"farm 1": "firing", "farm 9": "resolved"}


# --- acknowledging ------------------------------------------------------------------------------


def test_it_acknowledges_once_and_audits_who(role_user):
    ada = role_user("admins")
    record(PHANTOM_FARM_1)
    alert = Alert.objects.get()
    assert (alert_acknowledge(alert=alert, by=ada), alert_acknowledge(alert=alert, by=ada)) == (True, False)
    assert AuditEvent.objects.get(action="alert.acknowledged").actor == ada


def test_it_refuses_to_acknowledge_a_resolved_alert(role_user):
    record(PHANTOM_FARM_1)
    record(minutes=1)
    with pytest.raises(AlertError, match="has resolved"):
        alert_acknowledge(alert=Alert.objects.get(), by=role_user("admins"))


# --- delivering ---------------------------------------------------------------------------------


def test_it_tells_a_start_once_however_often_it_is_evaluated(alert_receiver):
    record(PHANTOM_FARM_1)
    alerts_deliver()
    record(PHANTOM_FARM_1, minutes=1)
    alerts_deliver()
    assert [m["title"] for m in alert_receiver.messages] == ["[firing] Phantom slices on up nodes: farm 1"]
    assert alert_receiver.messages[0]["message"].startswith(PHANTOM_FARM_1.summary)


def test_it_tells_the_end_once(alert_receiver):
    record(PHANTOM_FARM_1)
    alerts_deliver()
    record(minutes=1)
    alerts_deliver()
    alerts_deliver()
    assert [m["title"] for m in alert_receiver.messages][1:] == ["[resolved] Phantom slices on up nodes: farm 1"]
    assert alert_receiver.messages[1]["message"].startswith("Resolved at ")


def test_it_tells_nothing_of_an_alert_that_resolved_before_it_was_told(alert_receiver):
    record(PHANTOM_FARM_1)
    record(minutes=1)
    alerts_deliver()
    assert alert_receiver.messages == [] and Alert.objects.get().notified_state == "resolved"


def test_it_delivers_nothing_without_alert_urls(settings):
    settings.ALERT_URLS = []
    record(PHANTOM_FARM_1)
    assert alerts_deliver() == (0, 0)
    assert Alert.objects.get().notified_state == ""


def test_it_tries_again_after_a_failed_delivery(settings):
    closed = AlertReceiver()
    closed.close()
    settings.ALERT_URLS = [closed.url]
    record(PHANTOM_FARM_1)
    assert alerts_deliver() == (0, 1)
    assert Alert.objects.get().notified_state == ""
    receiver = AlertReceiver()
    try:
        settings.ALERT_URLS = [receiver.url]
        assert alerts_deliver() == (1, 0)
        assert len(receiver.messages) == 1
    finally:
        receiver.close()


def slow_receiver_delivery(settings, *, delay: float = 0.0, deadline: float = 0.5) -> tuple[tuple[int, int], float]:
    """Deliver one alert within `deadline` s to a receiver that answers after `delay` s, or (delay 0)
    only once the delivery has returned: (the counts, seconds taken)."""
    released = threading.Event()
    slow = AlertReceiver(delay=delay) if delay else AlertReceiver(hold=released)
    try:
        settings.ALERT_URLS, settings.ALERT_DELIVERY_DEADLINE = [slow.url], deadline
        record(PHANTOM_FARM_1)
        started = time.monotonic()
        counts = alerts_deliver()
        return counts, time.monotonic() - started
    finally:
        released.set()
        # Let the abandoned send finish before the test's log capture closes under it.
        for thread in threading.enumerate():
            if thread.name == "alert-delivery":
                thread.join(10)
        slow.close()


def test_it_gives_up_on_a_slow_receiver_at_the_deadline(settings):
    # The receiver answers only after the delivery has returned, and the deadline is nil: no wait at all.
    counts, _took = slow_receiver_delivery(settings, deadline=0.0)
    assert counts == (0, 1)  # undelivered: a send that waited for the receiver would have delivered it


@pytest.mark.slow  # a wall-clock assertion
def test_it_gives_up_on_a_slow_receiver_within_the_deadline_on_the_clock(settings):
    counts, took = slow_receiver_delivery(settings, delay=3.0)
    assert counts == (0, 1) and took < 2.0


def test_it_reports_a_url_apprise_cannot_use(settings, caplog):
    settings.ALERT_URLS = ["nosuchscheme://secret@host"]
    record(PHANTOM_FARM_1)
    assert alerts_deliver() == (0, 1)
    (ours,) = [
        r.getMessage()
        for r in caplog.records
        if r.name == "dashboard.alerts.services.alerts" and "not delivered" in r.getMessage()
    ]
    assert "apprise cannot use (nosuchscheme://)" in ours and "secret" not in ours


# --- end to end: the stored figures, the rules, the webhook -------------------------------------


def test_phantom_slices_appearing_and_a_reregister_send_exactly_one_firing_and_one_resolved_message(
    legacy_node_1774, alert_receiver
):
    run_job(Job.Kind.PRECHECK, legacy_node_1774)
    assert Node.objects.get(pk=legacy_node_1774.pk).phantom_reasons == {"memory": 1}

    alerts_evaluate()
    alerts_evaluate()
    assert [m["title"] for m in alert_receiver.messages] == ["[firing] Phantom slices on up nodes: farm 1"]
    assert "node 1774 (1)" in alert_receiver.messages[0]["message"]

    run_job(Job.Kind.REREGISTER, legacy_node_1774)
    alerts_evaluate()
    alerts_evaluate()
    assert [m["title"] for m in alert_receiver.messages] == [
        "[firing] Phantom slices on up nodes: farm 1",
        "[resolved] Phantom slices on up nodes: farm 1",
    ]
    assert [m["type"] for m in alert_receiver.messages] == ["failure", "success"]


def test_a_job_queued_with_no_worker_fires_no_worker(legacy_node_1774, alert_receiver, settings):
    job_request(kind=Job.Kind.PRECHECK, node=legacy_node_1774)
    later = timezone.now() + timedelta(seconds=settings.ALERT_QUEUED_WITHOUT_WORKER + 1)
    evaluation = alerts_evaluate(now=later)
    # The legacy catalog's seventh slice is phantom too (no pool holds it): that alert is another rule's.
    assert [(a.rule, a.subject) for a in evaluation.fired if a.rule != rules.PHANTOM] == [(rules.NO_WORKER, "worker")]
    assert "[firing] No worker is running: worker" in [m["title"] for m in alert_receiver.messages]


def test_the_beat_runs_the_evaluation_task(settings, alert_receiver):
    from dashboard.tasks import alerts_evaluate as task

    record(PHANTOM_FARM_1)
    assert settings.CELERY_BEAT_SCHEDULE["evaluate-alerts"]["task"] == task.name
    # The condition is gone from the stored figures: the task resolves it and tells nobody (never told).
    assert task() == {"fired": 0, "resolved": 1, "delivered": 0, "undelivered": 0}


def test_finding_7_one_farm_route_down_does_not_resend_the_main_channel(settings):
    main, farm = AlertReceiver(), AlertReceiver()
    farm.close()  # the farm's route is down
    try:
        settings.ALERT_URLS = [main.url]
        settings.ALERT_FARM_URLS = {1: [farm.url]}
        record(PHANTOM_FARM_1)
        for _ in range(3):
            assert alerts_deliver() == (0, 1)  # the farm's route, retried on its own
        assert len(main.messages) == 1  # one message an episode on the main channel
        back = AlertReceiver()
        try:
            settings.ALERT_FARM_URLS = {1: [back.url]}
            assert alerts_deliver() == (1, 0)
            assert (len(main.messages), len(back.messages)) == (1, 1)
        finally:
            back.close()
    finally:
        main.close()


def test_finding_7_a_farm_route_apprise_cannot_use_stops_start_up_naming_it():
    import os
    import subprocess
    import sys

    env = {**os.environ, "ALERT_FARM_URLS": "4242=file://"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); django.setup()",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "ALERT_FARM_URLS: farm 4242" in done.stderr
