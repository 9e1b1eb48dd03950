"""/metrics: the stored figures for Prometheus, behind METRICS_TOKEN, in a constant number of queries."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dashboard.models import Deployment, Node

pytestmark = pytest.mark.django_db
TOKEN = "metrics-token-for-the-tests-1774"


@pytest.fixture
def metrics_on(settings):
    settings.METRICS_TOKEN = TOKEN


def _scrape(client, token=TOKEN):
    return client.get("/metrics", headers={"Authorization": f"Bearer {token}"})


def _samples(response) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }


def test_it_is_not_there_without_metrics_token(client, settings):
    settings.METRICS_TOKEN = ""
    assert _scrape(client, "anything").status_code == 404


def test_it_refuses_a_wrong_token(client, metrics_on):
    assert _scrape(client, "wrong").status_code == 401


def test_it_refuses_a_signed_in_session(admins_client, metrics_on):
    assert admins_client.get("/metrics").status_code == 401


def test_it_reports_per_farm_and_fleet_figures(client, metrics_on, legacy_fleet):
    legacy_fleet(2, farm_id=1)
    legacy_fleet(1, first=10, farm_id=2)
    samples = _samples(_scrape(client))
    nominal_farm_1 = Node.objects.filter(farm_id=1).first().slices.count() * 2
    assert samples[("slicedash_farm_slices_nominal", (("farm", "1"),))] == nominal_farm_1
    assert samples[("slicedash_fleet_nodes", ())] == 3
    assert samples[("slicedash_fleet_nodes_stale", ())] == 3


def test_it_counts_failed_deployments_by_cause(client, metrics_on, legacy_fleet):
    (node,) = legacy_fleet(1)
    Deployment.objects.create(node=node, slice_index=0, cru=1, mru=1, sru=1, state="failed", cause="memory")
    samples = _samples(_scrape(client))
    assert samples[("slicedash_deployments_failed_total", (("cause", "memory"), ("state", "failed")))] == 1


def test_it_serves_the_prometheus_text_format(client, metrics_on):
    assert _scrape(client)["Content-Type"].startswith("text/plain; version=")


def test_it_reads_the_same_number_of_queries_at_any_fleet_size(client, metrics_on, legacy_fleet, django_assert_max_num_queries):
    legacy_fleet(3, farm_id=1)
    with django_assert_max_num_queries(3):
        _scrape(client)
    legacy_fleet(80, first=100, farm_id=2)
    legacy_fleet(40, first=300, farm_id=3)
    with django_assert_max_num_queries(3):
        assert b'farm="3"' in _scrape(client).content
