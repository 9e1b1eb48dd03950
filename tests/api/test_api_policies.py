"""GET /api/v1/policies: the policies in force and how many nodes each covers."""

import pytest

from dashboard.capacity import GiB

pytestmark = pytest.mark.django_db


def test_it_lists_the_builtin_default_with_its_nodes(api_call, api_token, sim_node):
    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    (policy,) = api_call("get", "/api/v1/policies", api_token("read")).json()
    assert (policy["scope"], policy["nodes"], policy["parameters"]["slice_mru"]) == ("builtin", 1, 4 * GiB)


def test_it_refuses_without_a_token(api_call):
    assert api_call("get", "/api/v1/policies").status_code == 401


def test_it_refuses_a_wrong_method(api_call, api_token):
    assert api_call("post", "/api/v1/policies", api_token("read"), json={}).status_code == 405
