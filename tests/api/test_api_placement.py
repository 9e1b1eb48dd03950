"""GET /api/v1/placement: where a slice of one size can go, for programs with the read scope."""

import pytest

from dashboard.capacity import GiB, MiB

pytestmark = pytest.mark.django_db
URL = "/api/v1/placement"
USUAL = {"cru": 1, "mru": 4 * GiB, "sru": 151 * GiB}


@pytest.fixture
def three_nodes(sim_node):
    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana", policy_name="legacy")
    sim_node(20, cru=8, mru=16 * GiB, sru=465 * GiB, farm_id=1, farm_name="freefarm", pools=[465 * GiB])
    sim_node(21, cru=4, mru=8 * GiB, sru=250 * GiB, farm_id=1, status="standby")


def test_it_answers_a_read_token_with_the_hosts_the_blocks_and_the_best_nodes(api_call, api_token, three_nodes):
    response = api_call("get", URL, api_token("read"), **USUAL)
    body = response.json()
    assert response.status_code == 200
    assert (body["nodes"], body["can_host"], body["blocked"]["standby"]) == (3, 2, 1)
    assert body["can_host"] + sum(body["blocked"].values()) == body["nodes"]
    assert [n["node_id"] for n in body["best"]] == [1774, 20]
    assert body["best"][0]["fits"] is True and body["best"][0]["words"].startswith("fits")
    assert body["size"] == USUAL


def test_a_support_users_token_may_read_it(api_call, api_token, three_nodes):
    assert api_call("get", URL, api_token("read", role="support"), **USUAL).status_code == 200


def test_it_lists_as_many_best_nodes_as_asked(api_call, api_token, three_nodes):
    assert len(api_call("get", URL, api_token("read"), **USUAL, best=1).json()["best"]) == 1


def test_it_refuses_a_request_without_a_token(api_call):
    assert api_call("get", URL, **USUAL).status_code == 401


def test_it_refuses_a_token_without_the_read_scope(api_call, api_token):
    response = api_call("get", URL, api_token("report"), **USUAL)
    assert response.status_code == 403
    assert "'read' scope" in response.json()["detail"]


def test_it_refuses_a_session(admins_client):
    assert admins_client.get(URL, USUAL).status_code == 401


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"mru": 100 * MiB}, "mru"),
        ({"mru": "4GB"}, "mru"),  # a decimal unit (a size with a 1024-based one is taken: finding 7)
        ({"sru": -1}, "sru"),
        ({"cru": 0}, "cru"),
        ({"best": 1000}, "best"),
    ],
)
def test_it_refuses_bad_input_with_a_400_naming_the_field(api_call, api_token, changes, field):
    response = api_call("get", URL, api_token("read"), **{**USUAL, **changes})
    assert response.status_code == 400
    assert response.json()["field"] == field


def test_it_refuses_a_request_without_a_size(api_call, api_token):
    response = api_call("get", URL, api_token("read"), cru=1)
    assert (response.status_code, response.json()["field"]) == (400, "mru")


def test_it_refuses_a_post(api_call, api_token):
    assert api_call("post", URL, api_token("read"), json=USUAL).status_code == 405


def test_finding_7_it_takes_sizes_with_units_as_the_page_and_the_cli_do(api_call, api_token, three_nodes):
    in_bytes = api_call("get", URL, api_token("read"), **USUAL).json()
    with_units = api_call("get", URL, api_token("read"), cru=1, mru="4GiB", sru="151 GiB").json()
    assert with_units == in_bytes


def test_finding_7_a_decimal_unit_is_a_400_in_the_parsers_words(api_call, api_token, three_nodes):
    response = api_call("get", URL, api_token("read"), cru=1, mru="4GB", sru="151GiB")
    assert (response.status_code, response.json()["field"]) == (400, "mru")
    assert "1024-based" in response.json()["detail"]
