"""/metrics and /metrics/farms: the stored figures for Prometheus, behind METRICS_TOKEN, in a constant number of queries."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dashboard.models import Deployment, Node

pytestmark = pytest.mark.django_db
TOKEN = "metrics-token-for-the-tests-1774"


@pytest.fixture
def metrics_on(settings):
    settings.METRICS_TOKEN = TOKEN


def _scrape(client, token=TOKEN, path="/metrics"):
    return client.get(path, headers={"Authorization": f"Bearer {token}"})


def _samples(response) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }


@pytest.mark.parametrize("path", ["/metrics", "/metrics/farms"])
def test_it_is_not_there_without_metrics_token(client, settings, path):
    settings.METRICS_TOKEN = ""
    assert _scrape(client, "anything", path).status_code == 404


@pytest.mark.parametrize("path", ["/metrics", "/metrics/farms"])
def test_it_refuses_a_wrong_token(client, metrics_on, path):
    assert _scrape(client, "wrong", path).status_code == 401


@pytest.mark.parametrize("path", ["/metrics", "/metrics/farms"])
def test_it_refuses_a_signed_in_session(admins_client, metrics_on, path):
    assert admins_client.get(path).status_code == 401


def test_it_reports_per_farm_and_fleet_figures(client, metrics_on, legacy_fleet):
    legacy_fleet(2, farm_id=1)
    legacy_fleet(1, first=10, farm_id=2)
    farms = _samples(_scrape(client, path="/metrics/farms"))
    nominal_farm_1 = Node.objects.filter(farm_id=1).first().slices.count() * 2
    assert farms[("slicedash_farm_slices_nominal", (("farm", "1"),))] == nominal_farm_1
    assert farms[("slicedash_farm_nodes", (("farm", "2"),))] == 1
    fleet = _samples(_scrape(client))
    assert fleet[("slicedash_fleet_nodes", ())] == 3
    assert fleet[("slicedash_fleet_nodes_stale", ())] == 3
    assert fleet[("slicedash_fleet_slices_nominal", ())] == Node.objects.get(farm_id=2).slices.count() + nominal_farm_1
    # The fleet's scrape has no per-farm series: its size does not grow with the farms.
    assert not any(name.startswith("slicedash_farm_") for name, _labels in fleet)


def test_it_counts_failed_deployments_by_cause(client, metrics_on, legacy_fleet):
    (node,) = legacy_fleet(1)
    Deployment.objects.create(node=node, slice_index=0, cru=1, mru=1, sru=1, state="failed", cause="memory")
    samples = _samples(_scrape(client))
    assert samples[("slicedash_deployments_failed_total", (("cause", "memory"), ("state", "failed")))] == 1


def test_it_serves_the_prometheus_text_format(client, metrics_on):
    assert _scrape(client)["Content-Type"].startswith("text/plain; version=")


def test_it_reads_the_same_number_of_queries_at_any_fleet_size(
    client, metrics_on, legacy_fleet, django_assert_max_num_queries
):
    """The fleet's figures come from the kept farm totals: a few rows a farm. A scrape after nodes
    changed (before the refresh the services run on commit) sums the changed farms live, in a fixed
    number of statements too."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from dashboard.figures.services.farm_totals import farm_totals_refresh

    def counted(path="/metrics") -> tuple[int, bytes]:
        with CaptureQueriesContext(connection) as queries:
            content = _scrape(client, path=path).content
        return len(queries), content

    legacy_fleet(3, farm_id=1)
    after_change_small, _ = counted()
    farm_totals_refresh()
    counted()  # the first scrape after a refresh sums the phantom reasons once and keeps them (issue 37)
    steady_small, small = counted()
    legacy_fleet(80, first=100, farm_id=2)
    legacy_fleet(40, first=300, farm_id=3)
    after_change_large, _ = counted()
    farm_totals_refresh()
    counted()
    steady_large, large = counted()
    assert (after_change_small, steady_small) == (after_change_large, steady_large)
    # Six, one for the newest slice audit's counts (one row), one for the phantom slices by reason, one
    # for the live holds, one for the farms' free public IPv4s (slicedash_fleet_public_ipv4_free) and one
    # for the odds' calibration (ten bins of odds, whatever the history), and one for the nodes the last
    # fleet-wide reading could not read (the newest fleet watch or onboarding job's result, one row).
    assert steady_large <= 11
    assert len(small.splitlines()) == len(large.splitlines())
    farms_queries, farms = counted("/metrics/farms")
    assert b'farm="3"' in farms and farms_queries <= 3  # and the live holds by farm


def test_it_reports_the_newest_audit_findings_by_kind(client, metrics_on, sim_node):
    from dashboard.capacity import GiB, SliceSize
    from dashboard.catalogs.selectors.catalog_audit import Pace
    from dashboard.catalogs.services.catalog_audit import catalog_audit_here

    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    sim_node.grid.deploy_vm(1774, SliceSize(cru=1, mru=2 * GiB, sru=50 * GiB), name="outside")
    catalog_audit_here(fix=False, grid=sim_node.grid, pace=Pace(rate=1000.0, sleep=lambda _s: None))

    samples = _samples(_scrape(client))

    assert {kind: samples[("slicedash_audit_findings", (("kind", kind),))] for kind in ("foreign", "orphan")} == {
        "foreign": 1.0,
        "orphan": 0.0,
    }


def test_it_counts_the_withheld_nodes_free_slices_as_phantom_by_reason(client, metrics_on, sim_node):
    from dashboard.nodes.services.withholds import node_withhold
    from tests.factories import node_1774, sim_node_1774

    nodes = [sim_node_1774(sim_node), sim_node(1775, **node_1774()), sim_node(1776, **node_1774())]
    node_withhold(nodes=nodes[:2], reason="disk swap")
    samples = _samples(_scrape(client))
    free = sum(Node.objects.filter(pk__in=[n.pk for n in nodes[:2]]).values_list("slices_free", flat=True))
    assert samples[("slicedash_fleet_slices_phantom_by_reason", (("reason", "withheld"),))] == free > 0


def test_it_gives_the_odds_calibration_over_the_outcomes_they_are_of(client, metrics_on, legacy_fleet):
    (node,) = legacy_fleet(1)
    outcomes = [
        (0.9, "deployed", ""),
        (0.9, "failed", "memory"),
        (0.2, "failed", "memory"),
        (0.6, "deleted", ""),
        (0.3, "failed", "disk"),  # not what the odds are of: left out
        (None, "deployed", ""),  # no odds kept: left out
    ]
    for i, (odds, state, cause) in enumerate(outcomes):
        Deployment.objects.create(node=node, slice_index=i, cru=1, mru=1, sru=1, state=state, cause=cause, odds=odds)
    samples = _samples(_scrape(client))
    # Brier: (0.1^2 + 0.9^2 + 0.2^2 + 0.4^2) / 4; ECE: bins 0.9 |0.9 - 1/2| x 2, 0.2 |0.2 - 0|, 0.6 |0.6 - 1|
    assert samples[("slicedash_odds_outcomes", ())] == 4
    assert samples[("slicedash_odds_brier_score", ())] == pytest.approx((0.01 + 0.81 + 0.04 + 0.16) / 4)
    assert samples[("slicedash_odds_expected_calibration_error", ())] == pytest.approx((0.8 + 0.2 + 0.4) / 4)
