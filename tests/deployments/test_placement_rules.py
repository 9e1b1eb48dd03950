"""Placement with the asker's rules (exclusions, per-node and per-farm limits, spread or pack) and live holds."""

import datetime as dt

import pytest
from django.utils import timezone

from dashboard.capacity import GiB
from dashboard.deployments.selectors.placement import placement_for
from dashboard.deployments.selectors.placement_rules import NO_RULES, Rules
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.deployments.services.holds import hold_create
from dashboard.models import Node, Slice

pytestmark = pytest.mark.django_db
URL = "/api/v1/placement"
USUAL = {"cru": 1, "mru": 4 * GiB, "sru": 100 * GiB}


@pytest.fixture
def two_farms(sim_node):
    """Farm 1: nodes 10 (busy: one VM) and 11 (idle), farm 2: nodes 20 and 21 (idle); all alike, zos policy."""
    for node_id, farm in ((10, 1), (11, 1), (20, 2), (21, 2)):
        sim_node(node_id, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=farm, policy_name="zos")
    slice_deploy(node=Node.objects.get(grid_id=10), slice_index=0, precheck=False)


def answer_of(placement) -> dict:
    return {
        "nodes": placement.nodes,
        "can_host": placement.can_host,
        "blocked": placement.blocked,
        "limited": placement.limited,
        "best": [(v.node_id, v.blocked_by, v.verdict, v.could_take, v.take) for v in placement.best],
    }


def both(rules=NO_RULES, now=None, best=10, **size):
    """The answer by the database's first cut, checked against judging every node in Python."""
    size = size or USUAL
    counted = placement_for(**size, rules=rules, now=now, best=best)
    judged = placement_for(**size, rules=rules, now=now, best=best, every_node=True)
    assert answer_of(counted) == answer_of(judged)
    return counted


def test_excluded_nodes_and_farms_are_counted_as_blocked_by_that_rule(two_farms):
    answer = both(Rules(exclude_nodes=frozenset({10}), exclude_farms=frozenset({2})))
    assert (answer.blocked["node_excluded"], answer.blocked["farm_excluded"], answer.can_host) == (1, 2, 1)
    assert [v.node_id for v in answer.best] == [11]


def test_spread_puts_the_idle_nodes_first_and_pack_the_busy_one(two_farms):
    spread = [v.node_id for v in both(Rules(strategy="spread")).best]
    pack = [v.node_id for v in both(Rules(strategy="pack")).best]
    assert spread[-1] == 10 and pack[0] == 10


def test_per_node_caps_what_each_node_is_offered(two_farms):
    answer = both(Rules(per_node=2))
    assert all(v.take == 2 < v.could_take for v in answer.best)
    assert answer.limited["per_node"] == 4


def test_per_farm_leaves_the_rest_of_a_farm_out_of_the_best(two_farms):
    answer = both(Rules(per_farm=3, per_node=2))
    taken = {farm: sum(v.take for v in answer.best if v.farm_id == farm) for farm in (1, 2)}
    assert taken == {1: 3, 2: 3} and max(v.take for v in answer.best) == 2


def test_per_farm_one_spreads_a_cluster_over_farms(two_farms):
    answer = both(Rules(per_farm=1))
    assert sorted(v.farm_id for v in answer.best) == [1, 2] and answer.limited["per_farm"] == 2


def held_everywhere_on(node_id: int, now) -> int:
    """Hold every free slice of the node for one buyer; the slices held."""
    indices = list(Slice.objects.filter(node__grid_id=node_id, state="free").values_list("index", flat=True))
    for index in indices:
        hold_create(
            node_id=node_id, slice_index=index, ttl_seconds=600, marketplace_id=f"b-{index}", source="command", now=now
        )
    return len(indices)


def test_a_node_whose_room_is_held_is_blocked_by_the_holds_until_they_expire(sim_node):
    sim_node(30, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=1, policy_name="zos")
    made = timezone.now().replace(microsecond=0)
    size = Slice.objects.filter(node__grid_id=30).first()
    ask = {"cru": size.cru, "mru": size.mru, "sru": size.sru}
    assert held_everywhere_on(30, made) == 6
    held = both(now=made + dt.timedelta(seconds=599), **ask)
    expired = both(now=made + dt.timedelta(seconds=600), **ask)
    assert (held.blocked["held"], held.can_host) == (1, 0)
    assert (expired.blocked["held"], expired.can_host, expired.best[0].could_take) == (0, 1, 6)


def test_a_partly_held_node_offers_what_the_holds_leave(sim_node):
    sim_node(30, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=1, policy_name="zos")
    size = Slice.objects.filter(node__grid_id=30).first()
    for index in (0, 1):
        hold_create(node_id=30, slice_index=index, ttl_seconds=600, marketplace_id=f"b-{index}", source="command")
    answer = both(cru=size.cru, mru=size.mru, sru=size.sru)
    assert answer.best[0].could_take == 4


def test_the_api_takes_the_rules_and_says_what_blocked(api_call, api_token, two_farms):
    body = api_call("get", URL, api_token("read"), **USUAL, exclude_nodes="10, 11", per_node=1, strategy="pack").json()
    assert (body["blocked"]["node_excluded"], body["strategy"], body["limited"]["per_node"]) == (2, "pack", 2)
    assert [n["take"] for n in body["best"]] == [1, 1]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"per_node": 0}, "per_node"),
        ({"per_farm": -1}, "per_farm"),
        ({"strategy": "random"}, "strategy"),
        ({"exclude_nodes": "12,abc"}, "exclude_nodes"),
        ({"exclude_farms": "-3"}, "exclude_farms"),
    ],
)
def test_the_api_refuses_bad_rules_naming_the_field(api_call, api_token, two_farms, changes, field):
    response = api_call("get", URL, api_token("read"), **USUAL, **changes)
    assert (response.status_code, response.json()["field"]) == (400, field)


def test_the_page_takes_the_rules(admins_client, two_farms):
    page = admins_client.get(
        "/placement/", {"cru": 1, "mru": "4GiB", "sru": "100GiB", "exclude_farms": "2", "per_farm": 1}
    ).content.decode()
    assert 'data-block="farm_excluded" data-count="2"' in page
    assert 'data-limit="per_farm" data-count="1"' in page


def test_the_page_refuses_a_bad_strategy(admins_client, two_farms):
    response = admins_client.get("/placement/", {"cru": 1, "mru": "4GiB", "sru": "100GiB", "strategy": "random"})
    assert response.status_code == 400
