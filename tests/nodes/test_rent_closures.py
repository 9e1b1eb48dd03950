"""Issue 27: with MARKETPLACE_TWIN_ID set, a node rented by another twin (or kept by the chain for a renter
with no rent contract of ours) offers nothing, on every page, total, API and placement answer; the
simulated chain refuses a deploy there in its own words; a node rented by us deploys its whole catalog."""

import csv
import io

import pytest
from django.urls import reverse

from dashboard.capacity import GiB
from dashboard.deployments.selectors.deployments import deployment_words
from dashboard.deployments.selectors.placement import placement_for
from dashboard.deployments.services.deploy import slices_deploy_all_free
from dashboard.figures.services.figures import figures_refresh_all
from dashboard.models import Deployment, Node
from tests.factories import node_1774

pytestmark = pytest.mark.django_db
OURS, OTHER = 7, 42


@pytest.fixture
def marketplace(settings):
    settings.MARKETPLACE_TWIN_ID = (OURS,)
    return OURS


@pytest.fixture
def rented_by_other(sim_node, marketplace):
    """Node 1774 (zos carve: 6 free slices) rented by twin 42; the simulated chain signs as our twin."""
    sim_node.grid.deployer_twin = OURS
    sim_node.grid.add_node(1774, **node_1774())
    sim_node.grid.rent(1774, OTHER)
    from dashboard.nodes.services.registration import node_register_from_grid

    return node_register_from_grid(live=sim_node.grid.node(1774), policy_name="zos")


def test_a_node_rented_by_another_twin_shows_nothing_placeable_for_that_reason(rented_by_other):
    node = Node.objects.get(pk=rented_by_other.pk)
    assert (node.placeable_now, node.phantom_reasons, node.closure, node.closure_detail) == (
        0,
        {"rented": 6},
        "rented",
        str(OTHER),
    )


def test_the_node_page_says_who_rents_it(rented_by_other, admins_client):
    page = admins_client.get(reverse("node", args=[1774])).content.decode()
    assert "is rented by twin 42, not by the marketplace" in page and "rented by another twin" in page


def test_the_fleet_table_and_its_csv_show_the_reason(rented_by_other, admins_client):
    page = admins_client.get(reverse("fleet")).content.decode()
    assert "rented by another twin" in page
    rows = list(csv.DictReader(io.StringIO(admins_client.get(reverse("fleet-export")).content.decode())))
    assert (rows[0]["placeable_now"], rows[0]["phantom_rented"], rows[0]["closure"]) == ("0", "6", "rented")


def test_the_api_gives_the_reason(rented_by_other, api_call, api_token):
    body = api_call("get", "/api/v1/nodes/1774", api_token("read")).json()
    assert (body["figures"]["placeable_now"], body["figures"]["phantom_by_reason"], body["figures"]["closure"]) == (
        0,
        {"rented": 6},
        "rented",
    )
    rows = api_call("get", "/api/v1/nodes", api_token("read")).json()["nodes"]
    assert (rows[0]["closure"], rows[0]["phantom_by_reason"]) == ("rented", {"rented": 6})


def test_placement_blocks_it_for_that_reason(rented_by_other):
    answer = placement_for(cru=1, mru=4 * GiB, sru=100 * GiB, every_node=True)
    assert (answer.can_host, answer.blocked["rented"]) == (0, 1)
    assert "rented by twin 42" in answer.verdicts[0].words


def test_the_api_placement_agrees(rented_by_other, api_call, api_token):
    body = api_call("get", "/api/v1/placement", api_token("read"), cru=1, mru=4 * GiB, sru=100 * GiB).json()
    assert (body["can_host"], body["blocked"]["rented"]) == (0, 1)


def test_the_simulated_chain_refuses_a_deploy_there_in_its_words_and_the_failure_page_explains(
    rented_by_other, sim_node, admins_client
):
    failed = slices_deploy_all_free(node=rented_by_other, grid=sim_node.grid, precheck=False)[0]
    assert (failed.state, failed.cause) == ("failed", "node-closed")
    assert failed.raw_error == (
        "failed to create contract on node 1774: failed to create contract: NodeNotAvailableToDeploy"
    )
    assert "another twin rents it" in deployment_words(failed)
    # Which of the chain's reasons holds: the failure names the renter (issue 34, the smaller findings).
    assert f"As last read, node 1774 is rented by twin {OTHER}" in deployment_words(failed)
    page = admins_client.get(reverse("deployments-failed")).content.decode()
    assert "NodeNotAvailableToDeploy" in page and "another twin rents it" in page
    assert "chain: node not available to us" in page
    assert f"is rented by twin {OTHER}" in page


def test_our_precheck_refuses_it_before_the_grid_naming_the_renter(rented_by_other, sim_node):
    refused = slices_deploy_all_free(node=rented_by_other, grid=sim_node.grid)[0]
    assert (refused.state, refused.cause) == ("refused", "node-closed")
    assert "rented by twin 42" in deployment_words(refused)


def test_a_node_rented_by_us_deploys_its_whole_catalog(sim_node, marketplace):
    sim_node.grid.deployer_twin = OURS
    node = sim_node(1774, policy_name="zos", **node_1774())
    sim_node.grid.rent(1774, OURS)
    figures_refresh_all()  # the rent is seen by the next reading: each deploy reads the node first
    done = slices_deploy_all_free(node=node, grid=sim_node.grid)
    assert [d.state for d in done] == ["deployed"] * 6


def test_our_rented_node_page_says_so_with_the_rent_contract(sim_node, marketplace, admins_client):
    sim_node.grid.add_node(1774, **node_1774(farm_id=4242))
    sim_node.grid.farm_dedicated(4242)
    contract = sim_node.grid.rent(1774, OURS)
    from dashboard.nodes.services.registration import node_register_from_grid

    node_register_from_grid(live=sim_node.grid.node(1774), policy_name="zos")
    page = admins_client.get(reverse("node", args=[1774])).content.decode()
    assert f"rent contract {contract}" in page and "Rented by the marketplace" in page
    assert Node.objects.get(grid_id=1774).closure == ""


def test_a_dedicated_farms_node_nobody_rents_needs_our_rent_contract(sim_node, marketplace):
    sim_node.grid.deployer_twin = OURS
    sim_node.grid.farm_dedicated(4242)
    node = sim_node(1774, policy_name="zos", **node_1774())
    node.refresh_from_db()
    assert (node.placeable_now, node.phantom_reasons, node.in_dedicated_farm) == (0, {"needs-rent": 6}, True)
    failed = slices_deploy_all_free(node=node, grid=sim_node.grid, precheck=False)[0]
    assert "NodeNotAvailableToDeploy" in failed.raw_error


def test_without_marketplace_twin_id_rent_is_not_judged(sim_node, settings):
    settings.MARKETPLACE_TWIN_ID = ()
    sim_node.grid.add_node(1774, **node_1774())
    sim_node.grid.rent(1774, OTHER)
    from dashboard.nodes.services.registration import node_register_from_grid

    node = node_register_from_grid(live=sim_node.grid.node(1774), policy_name="zos")
    node.refresh_from_db()
    assert (node.placeable_now, node.closure, node.rented_by_twin_id) == (6, "", OTHER)


def test_the_fleet_page_says_when_rent_is_not_judged(sim_node, settings, admins_client):
    settings.MARKETPLACE_TWIN_ID = ()
    sim_node(1774, **node_1774())
    assert "MARKETPLACE_TWIN_ID is not set" in admins_client.get(reverse("fleet")).content.decode()


def test_the_fleet_page_names_the_marketplace_twins_when_set(sim_node, marketplace, admins_client):
    sim_node(1774, **node_1774())
    page = admins_client.get(reverse("fleet")).content.decode()
    assert "MARKETPLACE_TWIN_ID is not set" not in page and "twin 7" in page


def test_a_failed_deployment_counts_in_its_cause(rented_by_other, sim_node):
    slices_deploy_all_free(node=rented_by_other, grid=sim_node.grid, precheck=False)
    assert Deployment.objects.filter(cause="node-closed").count() == 6


def test_metrics_count_the_phantom_slices_by_reason(rented_by_other, client, settings):
    settings.METRICS_TOKEN = "m" * 32
    text = client.get("/metrics", headers={"Authorization": "Bearer " + "m" * 32}).content.decode()
    assert 'slicedash_fleet_slices_phantom_by_reason{reason="rented"} 6.0' in text
    assert 'slicedash_fleet_slices_phantom_by_reason{reason="memory"} 0.0' in text
    assert "slicedash_fleet_slices_phantom_on_up_nodes 0.0" in text  # a closed node is no catalog to fix


def test_the_precheck_says_the_closure_and_its_cause(rented_by_other, sim_node):
    from dashboard.catalogs.services.precheck import precheck_run

    report = precheck_run(node=rented_by_other, grid=sim_node.grid).as_dict()
    assert (report["cause"], report["closure"], report["closure_detail"], report["placeable_now"]) == (
        "node-closed",
        "rented",
        "42",
        0,
    )
    assert report["words"].startswith("node 1774 is rented by twin 42, not by the marketplace: none of its 6")


def test_without_a_signing_twin_the_simulated_chain_plays_no_rent(sim_node, settings):
    settings.MARKETPLACE_TWIN_ID = ()
    sim_node.grid.add_node(1774, **node_1774())
    sim_node.grid.rent(1774, OTHER)
    from dashboard.nodes.services.registration import node_register_from_grid

    node = node_register_from_grid(live=sim_node.grid.node(1774), policy_name="zos")
    assert [d.state for d in slices_deploy_all_free(node=node, grid=sim_node.grid)] == ["deployed"] * 6
