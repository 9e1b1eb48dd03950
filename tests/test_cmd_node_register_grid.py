"""node_register without capacity flags: the node is read from the configured grid."""

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from dashboard.capacity import GiB, Resources
from dashboard.grid.simulator import SimulatedGrid
from dashboard.models import AuditEvent, Node

pytestmark = pytest.mark.django_db
# The suite's own copy of ../shared/gridproxy: CI's checkout must not depend on a sibling folder.
SAMPLES = Path(__file__).resolve().parent / "data" / "gridproxy"


def register(*args: str) -> dict:
    out = StringIO()
    call_command("node_register", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.fixture
def grid(simgrid_path):
    grid = SimulatedGrid(simgrid_path)
    grid.add_node(
        1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana", twin_id=9011, dedicated=True
    )
    return grid


def test_it_reads_the_node_from_the_simulated_grid(grid):
    result = register("1774")
    assert (result["farm_id"], result["farm_name"], result["status"], result["slices"]) == (4242, "mitana", "up", 6)


def test_it_stores_what_the_grid_says_about_the_node(grid):
    register("1774")
    node = Node.objects.get(node_id=1774)
    assert (node.twin_id, node.dedicated, node.total, node.pools_sru) == (
        9011, True, Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB)), [int(931.5 * GiB)]
    )


def test_it_stores_the_live_used_capacity_and_when_it_was_seen(grid):
    register("1774")
    node = Node.objects.get(node_id=1774)
    assert (node.used_mru, node.used_sru) == (31 * GiB // 10, 20 * GiB)
    assert node.seen_at is not None


def test_it_carves_with_the_pools_the_simulator_knows(simgrid_path):
    SimulatedGrid(simgrid_path).add_node(2310, cru=8, mru=31 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])
    result = register("2310")
    # Six disks of 151 GiB would fit the node's total but not the two pools; 148 GiB ones do.
    assert (result["pools"], result["slices"], result["slice"]["sru"]) == ([465 * GiB, 465 * GiB], 6, 148 * GiB)


def test_it_registers_a_down_node_as_down(grid):
    grid.set_status(1774, "down")
    assert register("1774", "--policy", "legacy")["status"] == "down"


def test_it_reads_the_node_from_the_grid_proxy(gridproxy_serving):
    gridproxy_serving({"/nodes/1774": (SAMPLES / "node-1774.json").read_bytes()})
    result = register("1774")
    node = Node.objects.get(node_id=1774)
    assert (result["farm_name"], result["pools"], node.used_mru, node.twin_id) == ("mitana", None, 7623566950, 9011)


def test_it_says_the_node_is_not_on_the_grid_and_writes_nothing(simgrid_path):
    with pytest.raises(CommandError, match=r"^grid: node 1774 is not on the simulated grid"):
        register("1774")
    assert (Node.objects.count(), AuditEvent.objects.count()) == (0, 0)


def test_it_says_the_grid_is_down_and_writes_nothing(gridproxy_down):
    with pytest.raises(CommandError, match=r"^grid: ") as raised:
        register("1774")
    assert raised.value.returncode == 1
    assert not Node.objects.exists()


def test_it_names_the_malformed_field_and_writes_nothing(gridproxy_serving):
    gridproxy_serving({"/nodes/1774": {
        "nodeId": 1774, "farmId": 1, "status": "up",
        "capacity": {"total_resources": {"cru": 8, "mru": -5, "sru": 1000, "hru": 0}, "used_resources": {"cru": 0, "mru": 0, "sru": 0, "hru": 0}},
    }})
    with pytest.raises(CommandError, match=r"^grid: .*mru"):
        register("1774")
    assert not Node.objects.exists()


def test_it_refuses_hand_given_facts_beside_a_grid_read(grid):
    with pytest.raises(CommandError, match=r"^--farm-id, --status: only for a node given by hand") as raised:
        register("1774", "--farm-id", "7", "--status", "up")
    assert raised.value.returncode == 2
    assert not Node.objects.exists()
