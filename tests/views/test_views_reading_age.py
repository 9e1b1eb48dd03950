"""Every reading has an age: when the product read the node, and when the node last reported."""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.models import Node
from tests.factories import sim_node_1774


@pytest.fixture
def node_1774(sim_node):
    node = sim_node_1774(sim_node, policy_name=None)
    now = timezone.now()
    Node.objects.filter(pk=node.pk).update(
        seen_at=now - timedelta(minutes=3), reported_at=now - timedelta(minutes=12), placeable_now=6, phantom_slices=0
    )
    return node


def age(node, **ago):
    Node.objects.filter(pk=node.pk).update(seen_at=timezone.now() - timedelta(**ago))


@pytest.mark.django_db
def test_the_node_page_says_both_ages(support_client, node_1774):
    page = support_client.get("/nodes/1774/").content.decode()
    assert "read <time" in page and ">3 min ago</time>, node reported <time" in page and ">12 min ago</time>" in page


@pytest.mark.django_db
def test_a_fresh_reading_is_not_uncertain(support_client, node_1774):
    assert "uncertain" not in support_client.get("/nodes/1774/").content.decode()


@pytest.mark.django_db
def test_an_old_reading_makes_the_node_page_uncertain(support_client, node_1774, settings):
    settings.READING_MAX_AGE_MINUTES = 30
    age(node_1774, minutes=45)
    page = support_client.get("/nodes/1774/").content.decode()
    assert "uncertain" in page and "older than 30 minutes" in page


@pytest.mark.django_db
def test_the_fleet_table_has_an_age_column(support_client, node_1774):
    page = support_client.get("/").content.decode()
    assert "Reading age" in page and "read 3 min ago" in page and "reported 12 min ago" in page


@pytest.mark.django_db
def test_the_fleet_table_shows_an_old_readings_phantoms_as_uncertain(support_client, node_1774, settings):
    settings.READING_MAX_AGE_MINUTES = 60
    age(node_1774, hours=3)
    page = support_client.get("/").content.decode()
    assert "? uncertain" in page and "read 3 h ago" in page


@pytest.mark.django_db
def test_the_node_knows_its_reading_ages(node_1774):
    node = Node.objects.get(pk=node_1774.pk)
    now = timezone.now()
    assert timedelta(minutes=3) <= node.reading_age(now) < timedelta(minutes=4)
    assert timedelta(minutes=12) <= node.report_age(now) < timedelta(minutes=13)
    assert not node.reading_uncertain(now) and node.reading_uncertain(now + timedelta(hours=2))


def test_a_node_never_read_is_uncertain():
    assert Node(seen_at=None).reading_uncertain(timezone.now())
