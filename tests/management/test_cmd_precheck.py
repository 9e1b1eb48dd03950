import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard.models import Node
from dashboard.nodes.services.registration import node_register
from tests.factories import NODE_1774, TOTAL_1774, sim_node_1774

pytestmark = pytest.mark.django_db


def _run(*args):
    out = StringIO()
    call_command("precheck", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def legacy_1774(sim_node):
    return sim_node_1774(sim_node, deployed=(0,))


def test_it_prints_free_placeable_and_phantom_counts(legacy_1774):
    assert "free slices: 6   placeable now: 5   phantom slices: 1" in _run("1774")


def test_it_prints_the_verdict_of_each_free_slice_with_numbers(legacy_1774):
    lines = [line for line in _run("1774").splitlines() if line.strip().startswith("slice")]
    assert len(lines) == 6
    assert "PHANTOM" in lines[-1] and "memory: needs 4 GiB, 3.9 GiB available" in lines[-1]


def test_it_prints_json_with_the_contract_keys(legacy_1774):
    data = json.loads(_run("1774", "--json"))
    assert (data["free_slices"], data["placeable_now"], data["phantom_slices"]) == (6, 5, [6])
    assert [v["slice"] for v in data["verdicts"]] == [1, 2, 3, 4, 5, 6]


def test_it_stores_the_result_on_the_node(legacy_1774):
    _run("1774")
    assert Node.objects.filter(grid_id=1774, placeable_now=5, phantom_slices=1).exists()


def test_it_says_the_node_is_offline(sim_node):
    sim_node(1774, status="down", **NODE_1774)
    said = _run("1774")
    assert "node 1774 is down: none of its 6 free slices can be placed until it is up again" in said
    assert "PHANTOM" not in said  # one line for the node, not one row per slice


def test_it_refuses_an_unknown_node(simgrid_path):
    with pytest.raises(CommandError, match="node 999 is not registered"):
        _run("999")


def test_it_refuses_a_node_id_that_is_not_a_number(simgrid_path):
    with pytest.raises(CommandError):
        _run("node-1774")


def test_it_says_the_grid_is_down_and_records_nothing(gridproxy_down):
    node_register(node_id=1774, total=TOTAL_1774, farm_id=4242)
    with pytest.raises(CommandError, match=r"^grid: .*\(nothing was recorded\)$"):
        _run("1774")
    assert Node.objects.get(grid_id=1774).prechecked_at is None
