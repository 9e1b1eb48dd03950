"""Issue 34, finding 3: a reading's age has two named rules (dashboard.nodes.reading_age), each read by every
reader it applies to and said on the pages where it shows: uncertain on the pages (and a precheck's
trust), too old to place on for placement and the alert."""

from datetime import timedelta
from html import escape

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.alerts.services.alerts import alert_limits
from dashboard.capacity import GiB
from dashboard.deployments.selectors.placement import placement_for
from dashboard.figures.selectors.fleet import fleet_page
from dashboard.models import Node
from dashboard.nodes.reading_age import reading_rules_words, reading_untrusted_after
from tests.factories import sim_node_1774

pytestmark = pytest.mark.django_db


@pytest.fixture
def read_2h_ago(sim_node):
    node = sim_node_1774(sim_node, policy_name="zos")
    Node.objects.filter(pk=node.pk).update(seen_at=timezone.now() - timedelta(hours=2))
    return node


def test_finding_3_a_reading_past_the_pages_limit_is_uncertain_and_still_placed_on(read_2h_ago):
    assert fleet_page().rows[0].uncertain
    answer = placement_for(cru=1, mru=4 * GiB, sru=100 * GiB, every_node=True)
    assert (answer.can_host, answer.blocked["old"]) == (1, 0)


def test_finding_3_placement_and_the_alert_read_one_rule_for_too_old(read_2h_ago, settings):
    settings.ALERT_READING_MAX_AGE = 3600
    assert alert_limits().reading_max_age == reading_untrusted_after() == timedelta(hours=1)
    for every_node in (True, False):
        answer = placement_for(cru=1, mru=4 * GiB, sru=100 * GiB, every_node=every_node)
        assert (answer.can_host, answer.blocked["old"], answer.reading_max_age) == (0, 1, 3600)


def test_finding_3_the_placement_page_says_both_rules(read_2h_ago, support_client, settings):
    settings.READING_MAX_AGE_MINUTES = 45
    page = support_client.get(reverse("placement"), {"cru": 1, "mru": "4GiB", "sru": "100GiB"}).content.decode()
    assert escape(reading_rules_words()) in page and "older than 45 min" in page and "24 h old" in page
