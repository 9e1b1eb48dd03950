"""Issue 34, finding 2: every deployable slice is in exactly one tier (now, after wake, blocked, closed),
so the tiers add up to deployable on every reader: the kept fleet totals, each farm's, the filtered
table under `tier=`, the CSV's `tier` column, the API, the snapshots and /metrics; each compared with a live recomputation from
the node rows after every kind of write (closure, withhold, hold, rent, status, re-register)."""

import csv
import io
from collections import Counter

import pytest
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from dashboard.catalogs.services.precheck import precheck_run
from dashboard.deployments.services.holds import hold_create
from dashboard.figures.selectors.farm_totals import FarmSums, farm_totals
from dashboard.figures.selectors.fleet import FleetFilters, fleet_overview, fleet_page
from dashboard.figures.selectors.tiers import TIER_FIGURES, TIERS, tier_of
from dashboard.figures.services.farm_totals import farm_totals_refresh
from dashboard.figures.services.snapshots import snapshot_take
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import Job, Node, SnapshotFigures
from dashboard.nodes.services.withholds import node_withhold
from tests.factories import node_1774

pytestmark = pytest.mark.django_db
OURS, OTHER = 7, 42
METRICS_TOKEN = "metrics-token-for-the-tiers-1774"


def live_tiers() -> dict[str, int]:
    """The tiers recomputed from the node rows, one node at a time."""
    tiers = Counter({t: 0 for t in TIERS})
    for status, closure, deployable in Node.objects.values_list("status", "closure", "deployable"):
        tiers[tier_of(status, closure)] += deployable
    return dict(tiers)


def live_farm_tiers() -> dict[int, dict[str, int]]:
    farms: dict[int, Counter] = {}
    for farm, status, closure, deployable in Node.objects.values_list("farm_id", "status", "closure", "deployable"):
        farms.setdefault(farm, Counter({t: 0 for t in TIERS}))[tier_of(status, closure)] += deployable
    return {farm: dict(tiers) for farm, tiers in farms.items()}


def tiers_of(sums) -> dict[str, int]:
    return {t: getattr(sums, TIER_FIGURES[t]) for t in TIERS}


def snapshot_tiers() -> dict[tuple[str, int], dict[str, int]]:
    """A snapshot taken now: each farm's and the fleet's tiers as it stored them."""
    snapshot = snapshot_take(trigger="test")
    rows = SnapshotFigures.objects.filter(snapshot=snapshot).exclude(scope="node")
    return {(r.scope, r.subject): tiers_of(r) | {"deployable": r.deployable} for r in rows}


def metrics_tiers(path: str) -> dict[tuple[str, ...], int]:
    """The tier series /metrics (or /metrics/farms) reports: labels (farm, tier) -> slices."""
    answer = Client().get(path, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert answer.status_code == 200
    return {
        tuple(s.labels[k] for k in ("farm", "tier") if k in s.labels): int(s.value)
        for family in text_string_to_metric_families(answer.content.decode())
        for s in family.samples
        if s.name.endswith("slices_deployable_tier")
    }


def readers_agree(client) -> dict[str, int]:
    """Every reader's tiers against the live recomputation, the kept farm totals both behind and refreshed."""
    live = live_tiers()
    assert sum(live.values()) == sum(Node.objects.values_list("deployable", flat=True))
    for refreshed in (False, True):
        if refreshed:
            farm_totals_refresh()
        fleet = fleet_page().totals
        assert tiers_of(fleet) == live
        assert sum(tiers_of(fleet).values()) == fleet.deployable
        assert tiers_of(FarmSums.total(farm_totals())) == live
        for tier in TIERS:  # the filtered path, one aggregate over the tier's nodes
            assert fleet_page(filters=FleetFilters(tier=tier)).totals.deployable == live[tier], tier
            assert tiers_of(fleet_page(filters=FleetFilters(tier=tier)).totals) == {
                t: live[t] if t == tier else 0 for t in TIERS
            }
    rows = list(csv.DictReader(io.StringIO(client.get(reverse("fleet-export")).content.decode())))
    by_csv = Counter({t: 0 for t in TIERS})
    for row in rows:
        by_csv[row["tier"]] += int(row["deployable"])
    assert dict(by_csv) == live
    for tier in TIERS:  # the filter and the rows' own tier (the CSV's column) are one rule
        assert {r.tier for r in fleet_overview(filters=FleetFilters(tier=tier)).rows} <= {tier}
    # The snapshots (capacity over time, the alerts' trend) and /metrics count them the same way.
    by_farm = live_farm_tiers()
    kept = snapshot_tiers()
    assert kept[("fleet", 0)] == live | {"deployable": sum(live.values())}
    assert {farm: kept[("farm", farm)] for farm in by_farm} == {
        farm: tiers | {"deployable": sum(tiers.values())} for farm, tiers in by_farm.items()
    }
    assert metrics_tiers("/metrics") == {(t,): live[t] for t in TIERS}
    assert metrics_tiers("/metrics/farms") == {(str(f), t): n for f, tiers in by_farm.items() for t, n in tiers.items()}
    return live


@pytest.fixture
def fleet(sim_node, settings):
    """Two farms: 1774 and 1775 up (farm 1), 1776 on standby and 1777 down (farm 2), judged for twin 7."""
    settings.MARKETPLACE_TWIN_ID = (OURS,)
    settings.METRICS_TOKEN = METRICS_TOKEN
    sim_node.grid.deployer_twin = OURS
    nodes = {
        1774: sim_node(1774, policy_name="zos", **node_1774(farm_id=1)),
        1775: sim_node(1775, policy_name="zos", **node_1774(farm_id=1)),
        1776: sim_node(1776, policy_name="zos", **node_1774(farm_id=2, status="standby")),
        1777: sim_node(1777, policy_name="zos", **node_1774(farm_id=2, status="down")),
    }
    return nodes


def test_finding_2_with_a_node_withheld_the_tiers_add_up_on_every_reader(fleet, admins_client):
    node_withhold(nodes=[fleet[1775]], reason="disk swap", via="command")
    live = readers_agree(admins_client)
    assert live["closed"] == Node.objects.get(grid_id=1775).deployable > 0
    assert fleet_page().totals.deployable_closed_by_reason == {"withheld": live["closed"]}
    assert fleet_page(filters=FleetFilters(tier="now")).totals.deployable == fleet_page().totals.deployable_now


@pytest.mark.slow
def test_finding_2_the_readers_agree_with_a_live_recomputation_after_every_kind_of_write(
    fleet, sim_node, admins_client, api_call, api_token
):
    grid = sim_node.grid
    readers_agree(admins_client)
    grid.rent(1774, OTHER)  # rented by another twin: the precheck closes it
    precheck_run(node=fleet[1774], grid=grid)
    assert readers_agree(admins_client)["closed"] > 0
    node_withhold(nodes=[fleet[1776]], reason="maintenance", via="command")  # a standby node withheld
    readers_agree(admins_client)
    hold_create(node_id=1775, slice_index=0, ttl_seconds=600, marketplace_id="buyer-1", source="command")
    readers_agree(admins_client)
    from dashboard.deployments.services.deploy import slice_deploy

    slice_deploy(node=Node.objects.get(grid_id=1775), slice_index=1, grid=grid, source="command")
    readers_agree(admins_client)
    grid.set_status(1777, "up")  # a down node back up
    precheck_run(node=fleet[1777], grid=grid)
    readers_agree(admins_client)
    job = job_claim(job_id=job_request(kind=Job.Kind.REREGISTER, node=fleet[1777], source="command").job.pk)
    job_execute(job=job)
    live = readers_agree(admins_client)
    api = api_call("get", "/api/v1/fleet", api_token("read")).json()
    assert {t: api[TIER_FIGURES[t]] for t in TIERS} == live
    assert sum(live.values()) == api["deployable"]
    tiered = api_call("get", "/api/v1/nodes", api_token("read"), tier="closed").json()
    assert sorted(n["node_id"] for n in tiered["nodes"]) == [1774, 1776]
