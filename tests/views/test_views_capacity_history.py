"""Capacity over time on the fleet and node pages: sparklines and the trend with its method, a fixed number of queries."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from dashboard.figures.services.snapshots import snapshot_take


@pytest.fixture
def history(legacy_fleet):
    nodes = legacy_fleet(3, farm_id=5)
    now = timezone.now()
    for days in (3, 2, 1, 0):
        snapshot_take(now=now - timedelta(days=days))
    return nodes


@pytest.mark.django_db
def test_the_fleet_page_draws_the_fleets_sparklines_and_states_the_trend_method(support_client, history):
    body = support_client.get(reverse("fleet")).content.decode()
    assert 'id="history-fleet"' in body and body.count("<polyline") == 4
    assert "Least-squares line through the 4 snapshots of the last 14 days" in body


@pytest.mark.django_db
def test_the_fleet_page_filtered_to_a_farm_shows_the_farms_history(support_client, history):
    body = support_client.get(reverse("fleet"), {"farm": 5}).content.decode()
    assert "The farm&#x27;s capacity over the last 14 days" in body


@pytest.mark.django_db
def test_the_node_page_draws_the_nodes_sparklines(support_client, history):
    body = support_client.get(reverse("node", args=[history[0].grid_id])).content.decode()
    assert 'id="history-node"' in body and 'data-snapshots="4"' in body


@pytest.mark.django_db
def test_the_pages_say_when_there_is_no_snapshot_yet(support_client, legacy_fleet):
    legacy_fleet(1)
    assert "No snapshot yet" in support_client.get(reverse("fleet")).content.decode()


@pytest.mark.django_db
def test_the_sparklines_cost_the_same_queries_however_long_the_history(support_client, legacy_fleet):
    legacy_fleet(2)
    snapshot_take()
    support_client.get(reverse("fleet"))  # the first read after the fleet was built sums its farms once
    with CaptureQueriesContext(connection) as short:
        support_client.get(reverse("fleet"))
    now = timezone.now()
    for hours in range(1, 40):
        snapshot_take(now=now - timedelta(hours=hours))
    with CaptureQueriesContext(connection) as long:
        support_client.get(reverse("fleet"))
    assert len(short) == len(long)


@pytest.mark.django_db
def test_the_page_draws_no_inline_style(support_client, history):
    body = support_client.get(reverse("fleet")).content.decode()
    section = body[body.index('id="history-fleet"') : body.index("</section>", body.index('id="history-fleet"'))]
    assert "style=" not in section
