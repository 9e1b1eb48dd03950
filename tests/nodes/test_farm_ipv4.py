"""Slices that need what the farm or the chain holds: public IPv4 from the farm's pool, GPUs under rent.

On the simulated grid and chain (PostgreSQL for the dashboard): a farm of 4 nodes carving 6 slices each,
with 3 free public IPv4s, can host 3 VMs with an IP, not 24. The expected numbers are worked out here from
ZOS's rules, not asked of the code under test.
"""

import threading

import pytest
from django.test import override_settings

from dashboard.capacity import GiB
from dashboard.catalogs.services.precheck import precheck_run
from dashboard.deployments.selectors.deployments import deployment_words
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.deployments.services.deploy_errors import DeployError
from dashboard.grid.proxy import GridProxyClient
from dashboard.models import Deployment, FarmIps, Node, Policy
from dashboard.nodes.selectors.farm_ips import node_ipv4
from dashboard.nodes.services.farm_ips import farm_ips_refresh
from dashboard.policies.selectors.carries import node_gpu_slices
from sim.grid import serve_simulator
from tests.conftest import rolled_back_after, sim_node_add, simgrid_copy

pytestmark = pytest.mark.django_db

FARM = 77
NODE = dict(cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=FARM, farm_name="ipfarm")
NODE_IDS = (301, 302, 303, 304)
FREE_IPS = 3
PLACEMENT = "/api/v1/placement"


def slices_per_node() -> int:
    """ZOS's accounting of one node of NODE, by hand: the memory reserve is max(10%, 2 GiB); a 4 GiB slice
    each; the disk (931.5 GiB less the 20 GiB cache, a 2 GiB rootfs per VM) is not what binds."""
    total = NODE["mru"]
    reserve = max(total // 10, 2 * GiB)
    return (total - reserve) // (4 * GiB)


@pytest.fixture(scope="class")
def farm_built(django_db_setup, django_db_blocker, tmp_path_factory):
    """The farm of NODE_IDS with FREE_IPS public IPv4s, read; built once for the class (its simulated
    grid in a folder of its own, its rows rolled back after)."""
    from sim.grid import SimulatedGrid

    path = tmp_path_factory.mktemp("ipv4-farm") / "simgrid.sqlite3"
    grid = SimulatedGrid(path)
    with override_settings(SIMGRID_PATH=path, GRID_BACKEND="simulator"), rolled_back_after(django_db_blocker):
        # The farm's policy sells the IPv4 add-on; its capacity parameters are the shipped ones.
        Policy.objects.create(name="ipv4-addon", scope=Policy.Scope.FARM, farm_id=FARM, ipv4_addon=True)
        for node_id in NODE_IDS:
            sim_node_add(grid, node_id, **NODE)
        grid.farm_ips_set(FARM, FREE_IPS)
        farm_ips_refresh(farm_ids=[FARM])
        yield path


@pytest.fixture
def farm(farm_built, simgrid_path, db):
    """The class's farm on a copy of its simulated grid: its nodes, with their figures."""
    simgrid_copy(farm_built, simgrid_path)
    return list(Node.objects.filter(grid_id__in=NODE_IDS).order_by("grid_id"))


def _size(node: Node) -> dict:
    first = node.slices.order_by("index").first()
    return {"cru": first.cru, "mru": first.mru, "sru": first.sru}


def _placement(api_call, token, node, **more) -> dict:
    response = api_call("get", PLACEMENT, token, **_size(node), **more)
    assert response.status_code == 200, response.content
    return response.json()


def _deploy_ipv4(node: Node, **options) -> Deployment:
    free = node.slices.filter(state="free").order_by("index").first()
    return slice_deploy(node=node, slice_index=free.index, public_ipv4=1, **options)


def test_a_policy_without_the_add_on_sells_no_ipv4(sim_node):
    node = sim_node(310, **NODE)
    with pytest.raises(DeployError, match="public IPv4"):
        slice_deploy(node=node, slice_index=0, public_ipv4=1)


# --- GPUs ----------------------------------------------------------------------------------------

GPU_FARM = 88
MARKETPLACE = 9000


@pytest.fixture
def gpu_node(sim_node, settings):
    settings.MARKETPLACE_TWIN_ID = [MARKETPLACE]
    Policy.objects.create(name="gpu", scope=Policy.Scope.FARM, farm_id=GPU_FARM, gpu_slices=True)
    return sim_node(401, gpus=1, **{**NODE, "farm_id": GPU_FARM})


def test_a_gpu_slice_is_offered_only_on_a_node_the_marketplace_rents(gpu_node, sim_node):
    slices, words = node_gpu_slices(gpu_node)
    assert slices == 0 and "rents" in words
    refused = slice_deploy(node=gpu_node, slice_index=0, gpus=1)
    assert (refused.state, refused.cause) == ("refused", "gpu")
    assert sim_node.grid.vms(401) == []
    sim_node.grid.rent(401, MARKETPLACE)
    precheck_run(node=gpu_node)  # the node read again: rented by us now
    gpu_node.refresh_from_db()
    assert node_gpu_slices(gpu_node)[0] == 1
    assert slice_deploy(node=gpu_node, slice_index=0, gpus=1).state == "deployed"
    gpu_node.refresh_from_db()
    assert node_gpu_slices(gpu_node)[0] == 0  # its one GPU is taken


def test_zos_gpu_refusal_is_explained(gpu_node):
    failed = slice_deploy(node=gpu_node, slice_index=0, gpus=1, precheck=False)
    assert (failed.state, failed.cause) == ("failed", "gpu")
    assert "usage of GPU is not allowed unless node is rented" in failed.raw_error
    assert "Rent the node first" in deployment_words(failed)


# --- the chain's and ZOS's words -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "cause", "said"),
    [
        (
            "failed to create contract on node 301: failed to create contract: FarmHasNotEnoughPublicIPsFree",
            "public-ip",
            "no free public IPv4",
        ),
        ("smartContractModule.FarmHasNotEnoughPublicIPs", "public-ip", "one pool for all its nodes"),
        (
            "workload vm1 within deployment 12 failed with error: required 1 ips while contract has 0 ip reserved",
            "public-ip",
            "asks 1 public IPv4 but its contract reserved 0",
        ),
        (
            "workload vm within deployment 3 failed with error: usage of GPU is not allowed unless node is rented",
            "gpu",
            "only while the node is rented",
        ),
    ],
)
def test_the_chains_and_zos_words_for_ips_and_gpus_are_classified(raw, cause, said):
    from dashboard.grid.classify import classify

    diagnosis = classify(raw)
    assert diagnosis.cause == cause
    assert said in diagnosis.words


def test_simulated_traffic_reports_ip_refusals_and_the_shipped_policy_has_none():
    from sim.month import simulate

    month = simulate(nodes=40, events=400, seed=7, policies=("legacy", "zos-learning"), ipv4_share=0.5)
    shipped, legacy = month.policies["zos-learning"], month.policies["legacy"]
    assert shipped.ipv4_requests > 0 and shipped.refused_for_ipv4 == 0
    assert legacy.refused_for_ipv4 == legacy.refused_by_cause.get("public-ip", 0) > 0


@pytest.mark.parametrize(
    "payload",
    [
        {"farmId": FARM},  # not a list
        [{"farmId": 1}],  # another farm
        [{"farmId": FARM, "publicIps": [{"ip": "not an ip", "gateway": ""}]}],
        [{"farmId": FARM, "publicIps": [{"ip": "185.69.166.5/24", "contractId": -1}]}],
        [{"farmId": FARM, "publicIps": {"ip": "185.69.166.5/24"}}],
    ],
)
def test_a_farm_payload_that_cannot_be_trusted_is_malformed(payload):
    from dashboard.grid.proxy.farms import parse_farm_ips
    from dashboard.grid.types import MalformedPayload

    with pytest.raises(MalformedPayload, match=f"farm {FARM}"):
        parse_farm_ips(payload, farm_id=FARM)


class TestFarm:
    """The tests that read the farm built once for the class."""

    def test_the_farm_hosts_three_ipv4_slices_and_24_without(self, api_call, api_token, farm):
        per_node = slices_per_node()
        assert set(Node.objects.filter(farm_id=FARM).values_list("deployable", flat=True)) == {per_node}
        token = api_token("read")
        assert _placement(api_call, token, farm[0])["slices_offered"] == len(NODE_IDS) * per_node
        with_ip = _placement(api_call, token, farm[0], ipv4=1)
        assert with_ip["slices_offered"] == min(len(NODE_IDS) * per_node, FREE_IPS)
        assert with_ip["ipv4"] is True

    def test_after_three_ipv4_deploys_the_farm_hosts_none_with_an_ip(
        self, api_call, api_token, admins_client, farm, sim_node
    ):
        for node in farm[:FREE_IPS]:
            assert _deploy_ipv4(node).state == "deployed"
        assert sim_node.grid.farm_ips(FARM).free == 0  # the simulated chain gave them away
        token = api_token("read")
        with_ip = _placement(api_call, token, farm[0], ipv4=1)
        assert (with_ip["slices_offered"], with_ip["can_host"], with_ip["blocked"]["farm_ips"]) == (0, 0, len(NODE_IDS))
        assert _placement(api_call, token, farm[0])["slices_offered"] == len(NODE_IDS) * slices_per_node() - FREE_IPS
        for node in farm:
            page = admins_client.get(f"/nodes/{node.grid_id}/").content.decode()
            assert "public IPv4s are all taken" in page

    def test_a_fourth_ipv4_deploy_is_refused_by_the_precheck_naming_the_farm(self, farm, sim_node):
        for node in farm[:FREE_IPS]:
            _deploy_ipv4(node)
        fourth = _deploy_ipv4(farm[3])
        words = deployment_words(fourth)
        assert (fourth.state, fourth.cause, fourth.public_ipv4) == ("refused", "public-ip", 1)
        assert "farm 77 (ipfarm) has 0 free of 3" in words and "nothing was sent to the grid" in words
        assert sim_node.grid.vms(farm[3].grid_id) == []  # never sent

    def test_a_zos_light_node_of_the_farm_offers_no_ipv4_slice(
        self, api_call, api_token, admins_client, farm, sim_node
    ):
        light = Node.objects.get(pk=sim_node(305, light=True, **NODE).pk)
        assert light.light is True
        offer = node_ipv4(light)
        assert offer.slices == 0 and "ZOS-light" in offer.words
        assert node_ipv4(farm[0]).slices == FREE_IPS  # a full node of the same farm still does
        with_ip = _placement(api_call, api_token("read"), light, ipv4=1)
        assert with_ip["blocked"]["no_ipv4"] == 1
        assert "ZOS-light" in admins_client.get(f"/nodes/{light.grid_id}/").content.decode()
        refused = _deploy_ipv4(light)
        assert (refused.state, refused.cause) == ("refused", "public-ip")
        assert "ZOS-light" in deployment_words(refused)

    def test_a_hold_with_an_ip_takes_one_of_the_farms_free_ips(self, farm):
        from dashboard.deployments.services.holds import hold_create

        hold_create(node_id=farm[0].grid_id, slice_index=0, ttl_seconds=600, marketplace_id="buyer-1", public_ipv4=1)
        assert node_ipv4(farm[1]).farm.available == FREE_IPS - 1

    def test_without_the_precheck_the_chain_refuses_in_its_words_and_the_farm_is_read_again(self, farm, sim_node):
        sim_node.grid.farm_ips_set(FARM, 0)  # taken off by the farmer after the last read
        failed = _deploy_ipv4(farm[0], precheck=False)
        assert (failed.state, failed.cause) == ("failed", "public-ip")
        assert "FarmHasNotEnoughPublicIPs" in failed.raw_error
        assert FarmIps.objects.get(farm_id=FARM).total == 0  # the lesson: read again at once

    def test_the_proxy_face_answers_the_farms_ips_in_the_real_shape(self, farm, sim_node):
        server = serve_simulator(sim_node.grid, port=0)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            with GridProxyClient(url, connect_timeout=1, read_timeout=2, retries=0) as client:
                read = client.farm_ips(FARM)
                light = client.node(301).light
        finally:
            server.shutdown()
            server.server_close()
        assert read == sim_node.grid.farm_ips(FARM)
        assert (read.free, len(read.ips), light) == (FREE_IPS, FREE_IPS, False)

    def test_simgrid_farm_sets_the_farms_ips_and_keeps_the_taken_ones(self, farm, sim_node):
        from io import StringIO

        from django.core.management import call_command

        _deploy_ipv4(farm[0])
        out = StringIO()
        call_command("simgrid", "farm", str(FARM), "--ips", "5", stdout=out)
        assert "5 public IPv4s, 4 free" in out.getvalue()
        with pytest.raises(ValueError, match="taken by live contracts"):
            sim_node.grid.farm_ips_set(FARM, 0)

    def test_a_release_gives_the_ip_back_to_the_farm(self, farm, sim_node):
        from dashboard.deployments.services.deploy_delete import deployment_delete

        deployed = _deploy_ipv4(farm[0])
        assert sim_node.grid.farm_ips(FARM).free == FREE_IPS - 1
        deployment_delete(deployment=deployed)
        assert sim_node.grid.farm_ips(FARM).free == FREE_IPS
        assert FarmIps.objects.get(farm_id=FARM).free == FREE_IPS  # read again at once

    def test_the_csv_says_each_nodes_farm_ips(self, admins_client, farm):
        import csv
        import io

        rows = list(csv.DictReader(io.StringIO(admins_client.get("/export.csv").content.decode())))
        assert {(r["farm_ips_free"], r["farm_ipv4_slices"]) for r in rows} == {(str(FREE_IPS), str(FREE_IPS))}

    def test_metrics_say_the_fleets_free_ips(self, client, settings, farm):
        settings.METRICS_TOKEN = "scrape"
        body = client.get("/metrics", headers={"Authorization": "Bearer scrape"}).content.decode()
        assert f"slicedash_fleet_public_ipv4_free {float(FREE_IPS)}" in body

    def test_the_maps_farm_tooltip_says_its_ipv4_bound(self, admins_client, farm):
        page = admins_client.get("/map/").content.decode()
        per_node = slices_per_node()
        assert (
            f'title="{FREE_IPS} IPv4 slices in farm {FARM} (ipfarm): {FREE_IPS} free public IPv4s of {FREE_IPS}, '
            f"shared by its nodes ({len(NODE_IDS) * per_node} slices placeable on those that take one)" in page
        )

    def test_the_maps_farm_tooltip_counts_the_ips_holds_keep(self, admins_client, farm):
        from dashboard.deployments.services.holds import hold_create

        hold_create(node_id=farm[0].grid_id, slice_index=0, ttl_seconds=600, marketplace_id="buyer-1", public_ipv4=1)
        page = admins_client.get("/map/").content.decode()
        assert f'title="{FREE_IPS - 1} IPv4 slices in farm {FARM} (ipfarm): {FREE_IPS - 1} free public IPv4s' in page

    def test_the_maps_ipv4_tooltips_cost_one_query_whatever_the_farms(self, admins_client, farm, sim_node):
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        def queries() -> int:
            with CaptureQueriesContext(connection) as seen:
                assert admins_client.get("/map/").status_code == 200
            return len(seen)

        admins_client.get("/map/")  # the farms' cells made and kept
        few = queries()
        for farm_id in (78, 79, 80):
            sim_node(400 + farm_id, **{**NODE, "farm_id": farm_id, "farm_name": f"more-{farm_id}"})
            sim_node.grid.farm_ips_set(farm_id, 2)
        farm_ips_refresh(farm_ids=[78, 79, 80])
        admins_client.get("/map/")
        assert queries() == few
        assert 'title="2 IPv4 slices in farm 80 (more-80)' in admins_client.get("/map/").content.decode()

    def test_the_databases_first_cut_and_judging_every_node_agree_with_ipv4(self, farm, sim_node):
        from dashboard.deployments.selectors.placement import placement_for
        from dashboard.deployments.selectors.placement_rules import Rules

        sim_node(305, light=True, **NODE)
        sim_node(501, **{**NODE, "farm_id": 99})  # a farm whose IPs were never read
        size = _size(farm[0])
        for best in (1, 2, 10):
            counted = placement_for(**size, rules=Rules(ipv4=True), best=best)
            judged = placement_for(**size, rules=Rules(ipv4=True), best=best, every_node=True)
            assert (counted.can_host, counted.blocked, counted.limited) == (
                judged.can_host,
                judged.blocked,
                judged.limited,
            )
            assert [(v.node_id, v.take) for v in counted.best] == [(v.node_id, v.take) for v in judged.best]
        assert (counted.blocked["no_ipv4"], counted.blocked["farm_ips_unread"], counted.slices_offered) == (
            1,
            1,
            FREE_IPS,
        )

    def test_the_failure_page_shows_the_chains_ip_refusal_with_its_badge_and_words(self, admins_client, farm, sim_node):
        sim_node.grid.farm_ips_set(FARM, 0)
        _deploy_ipv4(farm[0], precheck=False)
        page = admins_client.get("/deployments/failed/").content.decode()
        assert "no free public IPv4 (farm)" in page
        assert "A farm&#x27;s IPs are one pool for all its nodes" in page or "A farm's IPs are one pool" in page

    def test_the_farm_page_says_its_ipv4_slices_and_free_ips(self, admins_client, farm):
        page = admins_client.get(f"/?farm={FARM}").content.decode()
        assert 'id="farm-ipv4"' in page and f"{FREE_IPS} of {FREE_IPS} public IPv4s free" in page

    def test_the_placement_page_takes_ipv4(self, admins_client, farm):
        size = _size(farm[0])
        page = admins_client.get("/placement/", {**size, "ipv4": "on"}).content.decode()
        assert 'id="slices-offered"' in page and f"<dd>{FREE_IPS}<" in page

    def test_the_api_node_says_what_it_carries(self, api_call, api_token, farm):
        carries = api_call("get", "/api/v1/nodes/301", api_token("read")).json()["carries"]
        assert (carries["light"], carries["farm_ips_total"], carries["farm_ips_free"]) == (False, FREE_IPS, FREE_IPS)
        assert carries["ipv4_slices"] == min(slices_per_node(), FREE_IPS)

    def test_the_fleet_watch_reads_again_the_ips_of_the_farms_that_sell_ipv4(self, farm, sim_node):
        from dashboard.grid import get_grid
        from dashboard.nodes.services.watch import fleet_watch

        sim_node(501, **{**NODE, "farm_id": 99})  # its farm sells no IPv4: never asked
        sim_node.grid.farm_ips_set(FARM, 5)
        result = fleet_watch(grid=get_grid())
        assert FarmIps.objects.get(farm_id=FARM).free == 5
        assert not FarmIps.objects.filter(farm_id=99).exists()
        assert result.requests >= 2  # the nodes' page and the one farm's IPs

    def test_the_api_holds_an_ip_while_the_farm_has_one_and_refuses_past_it(self, api_call, api_token, farm):
        token = api_token("report")

        def hold(node_id: int, index: int):
            body = {
                "node_id": node_id,
                "slice_index": index,
                "ttl_seconds": 600,
                "marketplace_id": f"m-{node_id}-{index}",
            }
            return api_call("post", "/api/v1/holds", token, json={**body, "public_ipv4": 1})

        assert [hold(301, i).status_code for i in range(FREE_IPS)] == [201] * FREE_IPS
        refused = hold(302, 0)
        assert refused.status_code == 409
        assert "public IPv4s are all taken" in refused.json()["detail"]
