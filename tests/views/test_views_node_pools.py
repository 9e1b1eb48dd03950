"""The node page's pools: where they came from and how old, what unknown pools cost, the admins' form."""

import html

import pytest
from django.urls import reverse

from dashboard.capacity import GiB
from dashboard.models import Node, PoolReport

pytestmark = pytest.mark.django_db
TWO_SSDS = dict(cru=8, mru=31 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])


@pytest.fixture
def blind_2310(sim_node):
    """Two SSDs nobody reported: registered from the proxy's face alone."""
    return sim_node(2310, hide_pools=True, **TWO_SSDS)


def test_it_says_the_disks_are_sized_for_unknown_pools_and_what_that_gives_up(support_client, blind_2310):
    text = support_client.get(reverse("node", args=[2310])).content.decode()
    assert "sized to deploy under every plausible layout of the 930 GiB SSD total" in text
    assert "which gives up" in text and "of disk against a carve on the total alone" in text


def test_it_says_where_reported_pools_came_from_and_how_old_they_are(support_client, sim_node):
    sim_node(2310, **TWO_SSDS)
    from dashboard.nodes.services.pools import pools_report

    node = Node.objects.get(grid_id=2310)
    entries = [{"name": n, "type": "ssd", "size": 465 * GiB, "used": 0} for n in "ab"]
    pools_report(node=node, pools=entries, source="api")
    text = support_client.get(reverse("node", args=[2310])).content.decode()
    assert "reported by an API token (a deployer that reads them over RMB), just now" in text


def test_an_admin_reports_the_pools_and_the_catalog_turns_stale(admins_client, blind_2310):
    response = admins_client.post(reverse("node-pools", args=[2310]), {"sizes": "465GiB, 465GiB"})
    assert response.status_code == 302
    node = Node.objects.get(grid_id=2310)
    report = node.pool_reports.get()
    assert (report.source, report.by.username, node.pools_sru, node.stale) == (
        "operator",
        "ada",
        [465 * GiB, 465 * GiB],
        True,
    )


def test_the_form_says_why_pools_that_do_not_add_up_are_refused(admins_client, blind_2310):
    response = admins_client.post(reverse("node-pools", args=[2310]), {"sizes": "400GiB"}, follow=True)
    assert "Pools not reported" in response.content.decode() and "930 GiB" in response.content.decode()
    assert PoolReport.objects.count() == 0


def test_support_staff_see_no_form_and_are_refused(support_client, blind_2310):
    assert "Report pools" not in support_client.get(reverse("node", args=[2310])).content.decode()
    assert support_client.post(reverse("node-pools", args=[2310]), {"sizes": "465GiB 465GiB"}).status_code == 403
    assert PoolReport.objects.count() == 0


def test_it_refuses_a_get_on_the_form(admins_client, blind_2310):
    assert admins_client.get(reverse("node-pools", args=[2310])).status_code == 405


def test_it_says_pools_heard_over_rmb_came_from_the_node_and_shows_its_build(support_client, blind_2310):
    from dashboard.nodes.services.pools import pools_report

    entries = [{"name": n, "type": "ssd", "size": 465 * GiB, "used": 0} for n in "ab"]
    pools_report(node=blind_2310, pools=entries, source=PoolReport.Source.RMB, origin="rmb-peer")
    Node.objects.filter(pk=blind_2310.pk).update(zos_version="v3.14.0-sim", zos_version_source="rmb")
    text = support_client.get(reverse("node", args=[2310])).content.decode()
    assert "reported by the node itself, over RMB (through rmb-peer), just now" in text
    assert "v3.14.0-sim" in text and "the node said it over RMB" in text


def test_issue_45_defect_6_the_simulated_node_is_named_so_on_the_page_the_api_and_the_fleet(
    support_client, sim_node, api_call, api_token
):
    """The demo's pools and build come from the simulated grid's node in process: no page says "over RMB"
    while the fleet page says RMB is off, and the API does not call that source "zos"."""
    from dashboard.nodes.services.registration import node_register_from_grid

    sim_node(2310, register=False, zos_build="v3.14.0-sim", **TWO_SSDS)
    # Registered as `node_register` and the demo do: the simulated grid answers the pools and build itself.
    node = node_register_from_grid(live=sim_node.grid.node(2310))
    assert (node.pools_source, node.zos_version_source) == ("zos", "simulated")
    text = support_client.get(reverse("node", args=[2310])).content.decode()
    assert "reported by the simulated node itself, over the simulated grid&#x27;s RMB loopback" in text
    assert "the simulated node said it, over the simulated grid&#x27;s RMB loopback (not rmb-peer)" in text
    assert "over RMB (through rmb-peer)" not in text and "The node itself" not in text
    pools = api_call("get", "/api/v1/nodes/2310", api_token("read")).json()["pools"]
    assert (pools["source"], pools["zos_version_source"]) == ("simulated", "simulated")
    fleet = html.unescape(support_client.get(reverse("fleet")).content.decode())
    assert "the simulated grid's nodes answer their pools and build in process, over its RMB loopback" in fleet
