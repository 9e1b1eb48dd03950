"""Issue 37, finding 5: /metrics' phantom slices by reason are summed once while no farm changes,
and follow every write to a node (its farm is marked changed, then refreshed under a new stamp)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.figures.selectors.metrics import phantom_by_reason
from dashboard.figures.services.farm_totals import farm_totals_refresh
from dashboard.models import Node


def read() -> tuple[dict, int]:
    with CaptureQueriesContext(connection) as queries:
        sums = phantom_by_reason()
    return sums, len(queries)


@pytest.fixture
def refreshed_fleet(legacy_fleet):
    nodes = legacy_fleet(3)
    farm_totals_refresh()
    return nodes


@pytest.mark.django_db
def test_finding_5_a_second_scrape_reads_the_kept_sums_without_a_pass_over_the_nodes(refreshed_fleet):
    first, first_queries = read()
    again, again_queries = read()
    assert (again, again_queries, first_queries) == (first, 1, 2)


@pytest.mark.django_db
def test_finding_5_a_changed_node_is_summed_live_until_its_farm_is_refreshed(refreshed_fleet):
    read()
    Node.objects.filter(pk=refreshed_fleet[0].pk).update(phantom_reasons={"memory": 1000})
    live, _ = read()
    farm_totals_refresh()
    kept, _ = read()
    again, again_queries = read()
    expected = sum((n.phantom_reasons or {}).get("memory", 0) for n in Node.objects.all())
    assert (live["memory"], kept["memory"], again["memory"], again_queries) == (expected, expected, expected, 1)
