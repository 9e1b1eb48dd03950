"""Issue 45: what operators ask of a node, answered on its page and in the API from one selector
(nodes.selectors.node_room): what ZOS keeps for itself and the rest, summing to the node's total; each SSD pool's
size, use and free room; the largest disk it takes now. The largest disk is checked against the simulated
grid's own implementation of ZOS's storaged (sim/grid/storaged.py), not against the code that found it."""

import re

import pytest
from django.urls import reverse

from dashboard.capacity import GiB, MiB, SliceSize
from dashboard.figures.services.figures import figures_refresh
from dashboard.grid.types import DeploymentFailed
from dashboard.models import Node, Slice
from tests.factories import node_1774

pytestmark = pytest.mark.django_db
SSD = int(931.5 * GiB)


def _room(api_call, api_token, node_id: int) -> dict:
    return api_call("get", f"/api/v1/nodes/{node_id}", api_token("read")).json()["room"]


def _reserve_by_hand(total_mru: int) -> int:
    return max(total_mru // 10, 2 * GiB)  # zos provisiond getNodeReserved: max(10%, 2 GiB)


def test_memory_parts_add_up_to_the_total_with_zos_reserve_by_hand(sim_node, api_call, api_token):
    sim_node(1774, **node_1774(), policy_name="zos")
    Node.objects.get(grid_id=1774).slices.filter(index=0).update(state=Slice.State.DEPLOYED)
    figures_refresh([Node.objects.get(grid_id=1774).pk])
    memory = _room(api_call, api_token, 1774)["memory"]
    parts = {p["key"]: p["bytes"] for p in memory["parts"]}
    assert parts["reserve"] == _reserve_by_hand(31 * GiB) and memory["zos_keeps"] == parts["reserve"]
    assert parts["vms"] == 4 * GiB and parts["free"] == 5 * 4 * GiB
    assert sum(b for k, b in parts.items() if k != "over") == memory["total"] == 31 * GiB
    assert all(p["source"] for p in memory["parts"])


def test_the_ssd_parts_name_the_reported_cache_and_its_next_step_and_add_up(sim_node, api_call, api_token):
    """With the zos-cache's quota told by the node's pools, the SSD keeps it and its next 5 GiB step."""
    from dashboard.nodes.services.registration import node_register_from_grid

    sim_node(1774, **node_1774(), register=False)
    # Registered as the demo and node_register do: the simulated node tells its pools and what they hold.
    node_register_from_grid(live=sim_node.grid.node(1774), policy_name="zos")
    assert Node.objects.get(grid_id=1774).zos_cache is not None
    ssd = _room(api_call, api_token, 1774)["ssd"]
    keys = [p["key"] for p in ssd["parts"]]
    assert keys[:2] == ["cache", "cache_step"] and ssd["parts"][1]["bytes"] == 5 * GiB
    assert sum(p["bytes"] for p in ssd["parts"] if p["key"] != "over") == ssd["total"]


def test_a_legacy_catalog_shows_what_it_promises_beyond_the_node(sim_node, api_call, api_token):
    sim_node(1774, **node_1774(), policy_name="legacy")  # 7 slices of 4 GiB under the zos policy's reserve
    memory = _room(api_call, api_token, 1774)["memory"]
    assert memory["over"] == _reserve_by_hand(31 * GiB) + 7 * 4 * GiB - 31 * GiB
    assert sum(p["bytes"] for p in memory["parts"] if p["key"] != "over") - memory["over"] == 31 * GiB


def test_the_pages_bars_and_tables_say_the_apis_figures(sim_node, support_client, api_call, api_token):
    sim_node(1774, **node_1774(), policy_name="zos")
    room = _room(api_call, api_token, 1774)
    page = support_client.get(reverse("node", args=[1774])).content.decode()
    for resource, kept in (("mru", room["memory"]), ("sru", room["ssd"])):
        table = page[page.index(f'<table class="stack kept" data-resource="{resource}"') :].split("</table>")[0]
        shown = dict(re.findall(r'data-part="([a-z_]+)" data-bytes="(\d+)"', table))
        assert {k: int(v) for k, v in shown.items() if k != "total"} == {
            p["key"]: p["bytes"] for p in kept["parts"] if p["key"] != "over" or p["bytes"]
        }
        assert int(shown["total"]) == kept["total"]
    assert f'data-largest-disk="{room["disk"]["largest_disk"]}"' in page


def _deploys(grid, node_id: int, data: int) -> bool:
    try:
        grid.deploy_vm(node_id, SliceSize(cru=1, mru=4 * GiB, sru=data), name="probe")
    except DeploymentFailed:
        return False
    return True


def test_the_largest_disk_of_a_one_pool_node_is_what_simulated_zos_takes_and_no_more(sim_node, api_call, api_token):
    sim_node(1774, **node_1774(), policy_name="zos")
    disk = _room(api_call, api_token, 1774)["disk"]
    assert disk["pools_known"] and [p["size"] for p in disk["pools"]] == [SSD]
    largest = disk["largest_disk"]
    # One pool, so no device order can change the answer: ZOS takes that disk and refuses one a step larger.
    assert not _deploys(sim_node.grid, 1774, largest + 2 * GiB)
    assert _deploys(sim_node.grid, 1774, largest)
    # The pool's free room, less the rootfs and the cache's next step kept (sizes by hand), bounds it.
    pool = disk["pools"][0]
    assert pool["free"] - 500 * MiB - 5 * GiB - GiB < largest <= pool["free"]


def test_the_largest_disk_of_a_two_pool_node_is_one_pool_not_the_total(sim_node, api_call, api_token):
    half = int(465.75 * GiB)
    sim_node(2310, cru=8, mru=31 * GiB, sru=2 * half, farm_id=7, pools=[half, half], policy_name="zos")
    disk = _room(api_call, api_token, 2310)["disk"]
    assert disk["limited_by"] == "pool" and disk["largest_disk"] < half
    assert _deploys(sim_node.grid, 2310, disk["largest_disk"])


def test_with_the_pools_unknown_the_largest_disk_places_under_every_plausible_layout(sim_node, api_call, api_token):
    sim_node(2310, cru=8, mru=31 * GiB, sru=SSD, farm_id=7, hide_pools=True, policy_name="zos")
    disk = _room(api_call, api_token, 2310)["disk"]
    assert not disk["pools_known"] and disk["pools"] == [] and len(disk["layouts_assumed"]) > 1
    for n, layout in enumerate(disk["layouts_assumed"]):
        node_id = 5000 + n
        sim_node(node_id, cru=8, mru=31 * GiB, sru=sum(layout), farm_id=7, pools=list(layout), register=False)
        assert _deploys(sim_node.grid, node_id, disk["largest_disk"]), layout


def test_a_closed_node_takes_no_disk_and_says_why_once(sim_node, api_call, api_token, support_client):
    sim_node(3021, **node_1774(status="down"), policy_name="zos")
    disk = _room(api_call, api_token, 3021)["disk"]
    assert (disk["largest_disk"], disk["why"], disk["limited_by"]) == (None, "the node is down", "closed")
    page = support_client.get(reverse("node", args=[3021])).content.decode()
    assert "fits now: the node is down." in page


def test_the_node_page_lists_each_reported_pool_with_size_use_and_free(sim_node, support_client):
    half = int(465.75 * GiB)
    sim_node(2310, cru=8, mru=31 * GiB, sru=2 * half, farm_id=7, pools=[half, half], policy_name="zos")
    page = support_client.get(reverse("node", args=[2310])).content.decode()
    rows = re.findall(r'data-pool="(\d)" data-size="(\d+)" data-used="(\d+)" data-free="(\d+)"', page)
    assert [int(r[1]) for r in rows] == [half, half]
    assert all(int(size) - int(used) == int(free) for _i, size, used, free in rows)
    assert "zos-cache</span>" in page


def test_without_a_cache_report_the_ssd_keeps_the_policys_assumed_cache(sim_node, api_call, api_token):
    sim_node(1774, **node_1774(), policy_name="zos")  # pools given at registration, no report of what they hold
    ssd = _room(api_call, api_token, 1774)["ssd"]
    assert (ssd["parts"][0]["key"], ssd["parts"][0]["bytes"]) == ("cache", 20 * GiB)
    assert "assumed" in ssd["parts"][0]["label"]
