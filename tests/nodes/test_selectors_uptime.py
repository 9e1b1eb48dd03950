"""Uptime over 30 days (nodes.selectors.uptime), against the time a node spent up counted by hand."""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.models import Node, NodeEvent
from dashboard.nodes.selectors.uptime import uptime_percent, uptime_share

H = timedelta(hours=1)


def test_the_share_counts_the_up_time_between_changes():
    start = timezone.now()
    end = start + 10 * H
    # up 2 h, down 3 h, standby 1 h, up 4 h: 6 of 10 h up
    changes = [(start + 2 * H, "down"), (start + 5 * H, "standby"), (start + 6 * H, "up")]
    assert uptime_share(status_at_start="up", changes=changes, start=start, end=end) == pytest.approx(0.6)


def test_an_empty_span_has_no_share():
    now = timezone.now()
    assert uptime_share(status_at_start="up", changes=[], start=now, end=now) is None


@pytest.mark.django_db
def test_the_percent_counts_from_registration_and_reads_events_before_the_window(sim_node):
    now = timezone.now()
    node = sim_node(1, cru=8, mru=31 * 1024**3, sru=931 * 1024**3)
    Node.objects.filter(pk=node.pk).update(registered_at=now - timedelta(days=40), status="up")
    # Down since 35 days ago (before the window), back up 10 days ago: up 10 of the last 30 days.
    for at, before, after, kind in [
        (now - timedelta(days=35), "up", "down", "went-down"),
        (now - timedelta(days=10), "down", "up", "back-up"),
    ]:
        NodeEvent.objects.create(node=node, kind=kind, at=at, words=kind, status_before=before, status_after=after)
    young = sim_node(2, cru=8, mru=31 * 1024**3, sru=931 * 1024**3)
    Node.objects.filter(pk=young.pk).update(registered_at=now - timedelta(days=1), status="up")

    shares = uptime_percent([node.pk, young.pk], now=now)

    assert shares[node.pk] == pytest.approx(33.3, abs=0.1)
    assert shares[young.pk] == 100.0
