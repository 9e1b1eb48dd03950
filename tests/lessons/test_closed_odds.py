"""Issue 45, defect 3: the odds are the chance a slice deploys now. On a node that places nothing (rented by
another twin, withheld, down: a closure), they are 0 with the closure named, never 1.0 / "sure", so a
program filtering `odds >= 0.95` never keeps a slice that cannot be placed."""

import pytest
from django.urls import reverse

from dashboard.models import Node
from dashboard.nodes.services.registration import node_register_from_grid
from dashboard.nodes.services.withholds import node_withhold
from tests.factories import node_1774

pytestmark = pytest.mark.django_db
OURS, OTHER = 7, 42


@pytest.fixture
def rented_by_other(sim_node, settings):
    settings.MARKETPLACE_TWIN_ID = (OURS,)
    sim_node.grid.deployer_twin = OURS
    sim_node.grid.add_node(1774, **node_1774())
    sim_node.grid.rent(1774, OTHER)
    return node_register_from_grid(live=sim_node.grid.node(1774), policy_name="zos")


@pytest.fixture
def withheld(sim_node):
    node = sim_node(1774, **node_1774(), policy_name="zos")
    node_withhold(nodes=[Node.objects.get(pk=node.pk)], reason="disk swap", via="cli")
    return node


def _free_odds(api_call, api_token, **query) -> list:
    body = api_call("get", "/api/v1/nodes/1774", api_token("read"), **query).json()
    return [(s["odds"], s["odds_closed_by"]) for s in body["catalog"] if s["state"] == "free"]


@pytest.mark.parametrize("closed", ["rented_by_other", "withheld"])
def test_a_closed_nodes_free_slices_have_odds_0_naming_the_closure(closed, request, api_call, api_token):
    request.getfixturevalue(closed)
    key = Node.objects.get(grid_id=1774).closure
    assert key in ("rented", "withheld")
    assert _free_odds(api_call, api_token) == [(0.0, key)] * 6


def test_a_filter_on_sure_odds_keeps_nothing_of_a_closed_node(rented_by_other, api_call, api_token):
    assert _free_odds(api_call, api_token, min_odds=0.95) == []


def test_the_node_page_says_nothing_deploys_there_rather_than_sure(rented_by_other, admins_client):
    page = admins_client.get(reverse("node", args=[1774])).content.decode()
    table = page[page.index('id="catalog-table"') :]
    assert 'data-odds="0.0"' in table and ">sure<" not in table
    assert "0 · rented by another twin" in table


def test_an_open_nodes_odds_name_no_closure(sim_node, api_call, api_token):
    sim_node(1774, **node_1774(), policy_name="zos")
    odds = _free_odds(api_call, api_token)
    assert odds and all(closed is None and value > 0 for value, closed in odds)
