"""The alerts strip on every page, the alerts page, and an admin's acknowledgement (POST, permission, CSRF,
audited)."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dashboard.alerts import rules
from dashboard.alerts.services.alerts import alerts_record
from dashboard.models import Alert, AuditEvent, Job

pytestmark = pytest.mark.django_db
PAGE = reverse("jobs")
ALERTS = reverse("alerts")


@pytest.fixture
def firing():
    condition = rules.Condition(
        rules.PHANTOM, "farm 1", "Farm 1 offers 3 phantom slices on 1 up node (memory 3)", "node 1774 (3)"
    )
    alerts_record(conditions=[condition], now=timezone.now())
    return Alert.objects.get()


def ack_url(alert) -> str:
    return reverse("alert-acknowledge", args=[alert.pk])


def test_it_shows_a_firing_alert_on_every_page(admins_client, firing):
    response = admins_client.get(PAGE)
    assert b"Phantom slices on up nodes" in response.content
    assert b"Farm 1 offers 3 phantom slices" in response.content


def test_the_alerts_page_offers_admins_the_acknowledge_button_and_the_strip_does_not(admins_client, firing):
    assert ack_url(firing).encode() in admins_client.get(ALERTS).content
    strip = admins_client.get(PAGE).content
    assert ack_url(firing).encode() not in strip and ALERTS.encode() in strip


def test_it_shows_support_the_alert_without_the_button(support_client, firing):
    content = support_client.get(ALERTS).content
    assert b"Farm 1 offers 3 phantom slices" in content and b"node 1774 (3)" in content
    assert ack_url(firing).encode() not in content


def test_the_alerts_page_needs_the_permission(nogroup_client, firing):
    assert nogroup_client.get(ALERTS).status_code == 403


def test_the_strip_counts_them_and_shows_the_worst_first(admins_client):
    now = timezone.now()
    stale = rules.Condition(rules.STALE, "fleet", "2 nodes have had a stale catalog for over 1 day", "")
    failures = rules.Condition(rules.FAILURES, "memory", "7 deployments failed for memory in the last 15 min", "")
    alerts_record(conditions=[stale], now=now - timedelta(minutes=5))
    alerts_record(conditions=[stale, failures], now=now)
    content = admins_client.get(PAGE).content.decode()
    assert "2 alerts" in content and "and 1 more" in content
    worst = content.index('class="alert-worst"')
    assert content.index("7 deployments failed", worst) < content.index("stale catalog", worst)


def test_it_shows_no_alert_to_a_user_who_may_not_view_them(client, django_user_model, firing):
    client.force_login(django_user_model.objects.create_user("nobody"))
    assert b"Farm 1 offers" not in client.get(PAGE).content


def test_it_shows_no_resolved_alert(admins_client, firing):
    alerts_record(conditions=[], now=timezone.now())
    assert b"Farm 1 offers" not in admins_client.get(PAGE).content


def test_it_shows_no_worker_running_even_when_the_beat_is_gone(admins_client, legacy_node_1774, settings):
    # Nothing recorded an alert (the beat runs inside the worker): the banner judges it itself.
    job = Job.objects.create(kind=Job.Kind.PRECHECK, node=legacy_node_1774)
    Job.objects.filter(pk=job.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.ALERT_QUEUED_WITHOUT_WORKER + 5)
    )
    content = admins_client.get(PAGE).content
    assert b"No worker is running" in content and not Alert.objects.exists()


def test_an_admin_acknowledges_and_it_is_audited(admins_client, firing):
    response = admins_client.post(ack_url(firing), {"next": PAGE})
    firing.refresh_from_db()
    assert (response.status_code, response["Location"]) == (302, PAGE)
    assert firing.acknowledged_by.username == "ada"
    assert AuditEvent.objects.get(action="alert.acknowledged").actor.username == "ada"


def test_an_acknowledged_alert_leaves_the_strip_and_the_page_says_who(admins_client, firing):
    admins_client.post(ack_url(firing))
    assert b"Farm 1 offers" not in admins_client.get(PAGE).content
    content = admins_client.get(ALERTS).content
    assert b"Acknowledged by ada" in content and ack_url(firing).encode() not in content


def test_the_alerts_page_lists_the_resolved_ones(support_client, firing):
    alerts_record(conditions=[], now=timezone.now())
    content = support_client.get(ALERTS).content.decode()
    assert "Nothing is firing." in content and "Recently resolved" in content and "farm 1" in content


def test_it_does_not_redirect_to_another_host(admins_client, firing):
    response = admins_client.post(ack_url(firing), {"next": "https://evil.example/"})
    assert response["Location"] == reverse("fleet")


def test_support_is_refused(support_client, firing):
    assert support_client.post(ack_url(firing)).status_code == 403
    firing.refresh_from_db()
    assert firing.acknowledged_at is None


def test_get_is_refused(admins_client, firing):
    assert admins_client.get(ack_url(firing)).status_code == 405


def test_it_needs_the_csrf_token(role_user, firing):
    client = Client(enforce_csrf_checks=True)
    client.force_login(role_user("admins", username="ada"))
    assert client.post(ack_url(firing)).status_code == 403


def test_an_unknown_alert_is_404(admins_client):
    assert admins_client.post(reverse("alert-acknowledge", args=[999])).status_code == 404


def test_the_no_worker_banner_shows_within_2_minutes_of_a_job_waiting_on_every_page(admins_client, legacy_node_1774):
    job = Job.objects.create(kind=Job.Kind.PRECHECK, node=legacy_node_1774)
    Job.objects.filter(pk=job.pk).update(created_at=timezone.now() - timedelta(seconds=100))
    for page in (PAGE, reverse("jobs"), reverse("node", args=[1774])):
        assert b"No worker is running" in admins_client.get(page).content, page


def test_the_no_worker_banner_goes_when_a_worker_beats_again(admins_client, legacy_node_1774, legacy_fleet):
    waiting = Job.objects.create(kind=Job.Kind.PRECHECK, node=legacy_node_1774)
    Job.objects.filter(pk=waiting.pk).update(created_at=timezone.now() - timedelta(seconds=300))
    other = legacy_fleet(1, first=9001)[0]
    Job.objects.create(kind=Job.Kind.PRECHECK, node=other, state=Job.State.RUNNING, heartbeat_at=timezone.now())
    assert b"No worker is running" not in admins_client.get(PAGE).content
