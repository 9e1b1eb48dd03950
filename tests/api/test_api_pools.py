"""PUT /api/v1/nodes/{id}/pools: ZOS's zos.storage.pools answer, as a deployer reads it over RMB."""

import pytest

from dashboard.capacity import GiB
from dashboard.models import Node, PoolReport

pytestmark = pytest.mark.django_db
PATH = "/api/v1/nodes/2310/pools"
TWO = {
    "pools": [
        {"name": "a", "type": "ssd", "size": 465 * GiB, "used": 20 * GiB},
        {"name": "b", "type": "ssd", "size": 465 * GiB, "used": 0},
    ]
}


@pytest.fixture
def node_2310(sim_node):
    return sim_node(2310, cru=8, mru=31 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB], hide_pools=True)


def test_it_keeps_the_report_with_the_token_and_the_address_and_says_the_catalog_is_stale(
    api_call, api_token, node_2310
):
    response = api_call("put", PATH, api_token("report"), json=TWO)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["pools_sru"], body["source"], body["stale"]) == ([465 * GiB, 465 * GiB], "api", True)
    report = PoolReport.objects.get()
    assert (report.token.name, report.origin, report.by.username) == ("test-0", "127.0.0.1", "api-admins")


def test_it_refuses_pools_that_do_not_add_up_with_the_numbers_and_writes_nothing(api_call, api_token, node_2310):
    short = {"pools": [dict(TWO["pools"][0], size=400 * GiB), TWO["pools"][1]]}
    response = api_call("put", PATH, api_token("report"), json=short)
    assert response.status_code == 400
    assert "add up to 865 GiB" in response.json()["detail"] and "930 GiB" in response.json()["detail"]
    assert (PoolReport.objects.count(), Node.objects.get().pools_sru) == (0, None)


def test_it_refuses_a_token_without_the_report_scope(api_call, api_token, node_2310):
    assert api_call("put", PATH, api_token("read"), json=TWO).status_code == 403
    assert PoolReport.objects.count() == 0


def test_it_refuses_the_wrong_method(api_call, api_token, node_2310):
    assert api_call("post", PATH, api_token("report"), json=TWO).status_code == 405


def test_it_says_an_unregistered_node_is_not_found(api_call, api_token, node_2310):
    assert api_call("put", "/api/v1/nodes/9/pools", api_token("report"), json=TWO).status_code == 404


def test_it_refuses_an_entry_not_in_zos_shape(api_call, api_token, node_2310):
    bad = {"pools": [{"name": "a", "type": "tape", "size": 930 * GiB, "used": 0}]}
    assert api_call("put", PATH, api_token("report"), json=bad).status_code == 400


def test_the_node_says_at_its_top_that_its_pools_are_unknown_until_reported(api_call, api_token, node_2310):
    pools = api_call("get", "/api/v1/nodes/2310", api_token("read")).json()["pools"]
    assert pools == {
        "known": False,
        "source": None,
        "at": None,
        "age_seconds": None,
        "sizes": None,
        "zos_version": None,
        "refused": None,
        "refused_at": None,
        "zos_version_source": None,
    }


def test_the_node_says_its_pools_came_from_the_api_and_when(api_call, api_token, node_2310):
    api_call("put", PATH, api_token("report"), json=TWO)
    pools = api_call("get", "/api/v1/nodes/2310", api_token("read")).json()["pools"]
    assert (pools["known"], pools["source"], pools["sizes"]) == (True, "api", [465 * GiB, 465 * GiB])
    assert pools["at"] is not None and 0 <= pools["age_seconds"] < 60


def test_pools_heard_over_rmb_say_rmb_and_the_build(api_call, api_token, node_2310):
    from dashboard.nodes.services.pools import pools_report

    pools_report(node=node_2310, pools=TWO["pools"], source=PoolReport.Source.RMB, origin="rmb-peer")
    Node.objects.filter(pk=node_2310.pk).update(zos_version="v3.14.0")
    pools = api_call("get", "/api/v1/nodes/2310", api_token("read")).json()["pools"]
    assert (pools["source"], pools["zos_version"]) == ("rmb", "v3.14.0")


def test_an_operators_report_says_cli_without_a_user_and_form_with_one(api_call, api_token, node_2310, role_user):
    from dashboard.nodes.services.pools import pools_report

    pools_report(node=node_2310, pools=TWO["pools"], source=PoolReport.Source.OPERATOR)
    assert api_call("get", "/api/v1/nodes/2310", api_token("read")).json()["pools"]["source"] == "cli"
    changed = [dict(TWO["pools"][0], used=0), TWO["pools"][1]]
    pools_report(node=node_2310, pools=changed, source=PoolReport.Source.OPERATOR, by=role_user("admins"))
    assert api_call("get", "/api/v1/nodes/2310", api_token("read")).json()["pools"]["source"] == "form"
