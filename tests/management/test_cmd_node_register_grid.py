"""node_register without capacity flags: the node is read from the configured grid."""

import json
import os
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from dashboard.capacity import GiB, Resources
from dashboard.models import AuditEvent, Node
from sim.grid import SimulatedGrid

pytestmark = pytest.mark.django_db
# The suite's own copy of ../shared/gridproxy: CI's checkout must not depend on a sibling folder.
SAMPLES = Path(__file__).resolve().parents[1] / "data" / "gridproxy"


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
    node = Node.objects.get(grid_id=1774)
    assert (node.twin_id, node.dedicated, node.total, node.pools_sru) == (
        9011,
        True,
        Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB)),
        [int(931.5 * GiB)],
    )


def test_it_stores_the_live_used_capacity_and_when_it_was_seen(grid):
    register("1774")
    node = Node.objects.get(grid_id=1774)
    assert (node.used_mru, node.used_sru) == (31 * GiB // 10, 20 * GiB)
    assert node.seen_at is not None


def test_it_carves_with_the_pools_the_simulator_knows(simgrid_path):
    SimulatedGrid(simgrid_path).add_node(2310, cru=8, mru=31 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])
    result = register("2310")
    # Six disks of 151 GiB would fit the node's total but not the two pools; beside the 20 GiB zos-cache the
    # node reports and its next 5 GiB step, 146 GiB ones do (three in 465 - 25 GiB, with 500 MiB rootfs each).
    assert (result["pools"], result["slices"], result["slice"]["sru"]) == ([465 * GiB, 465 * GiB], 6, 146 * GiB)


def test_it_registers_a_down_node_as_down(grid):
    grid.set_status(1774, "down")
    assert register("1774", "--policy", "legacy")["status"] == "down"


def test_it_reads_the_node_from_the_grid_proxy(gridproxy_serving):
    gridproxy_serving({"/nodes/1774": (SAMPLES / "node-1774.json").read_bytes()})
    result = register("1774")
    node = Node.objects.get(grid_id=1774)
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
    gridproxy_serving(
        {
            "/nodes/1774": {
                "nodeId": 1774,
                "farmId": 1,
                "status": "up",
                "capacity": {
                    "total_resources": {"cru": 8, "mru": -5, "sru": 1000, "hru": 0},
                    "used_resources": {"cru": 0, "mru": 0, "sru": 0, "hru": 0},
                },
            }
        }
    )
    with pytest.raises(CommandError, match=r"^grid: .*mru"):
        register("1774")
    assert not Node.objects.exists()


def test_it_refuses_hand_given_facts_beside_a_grid_read(grid):
    with pytest.raises(CommandError, match=r"^--farm-id, --status: only for a node given by hand") as raised:
        register("1774", "--farm-id", "7", "--status", "up")
    assert raised.value.returncode == 2
    assert not Node.objects.exists()


# --- hostile answers: one line, nothing stored --------------------------------------------


def node_answer(**fields) -> dict:
    answer = json.loads((SAMPLES / "node-1774.json").read_text())
    answer.update(fields)
    return answer


@pytest.mark.parametrize("field", ["farmName", "country", "city", "status"])
@pytest.mark.parametrize(
    "bad", ["bad\u0000nul", "bad\ud800surrogate", "bad\udfffsurrogate"], ids=["nul", "high", "low"]
)
def test_it_refuses_unstorable_text_in_one_line_naming_the_field_and_stores_nothing(gridproxy_serving, field, bad):
    gridproxy_serving({"/nodes/1774": json.dumps(node_answer(**{field: bad}))})
    with pytest.raises(CommandError) as raised:
        register("1774")
    message = str(raised.value)
    assert message.startswith("grid: node 1774: ") and f"{field} " in message and "\n" not in message
    message.encode("utf-8")  # printable as it is: no surrogate made it into the message
    assert (Node.objects.count(), AuditEvent.objects.count()) == (0, 0)


def test_it_refuses_a_farm_name_of_absurd_length(gridproxy_serving):
    gridproxy_serving({"/nodes/1774": node_answer(farmName="x" * 100_000)})
    with pytest.raises(CommandError, match=r"^grid: node 1774: farmName is 100,000 characters long"):
        register("1774")
    assert not Node.objects.exists()


def test_it_stores_the_country_and_city_the_grid_reports(gridproxy_serving):
    gridproxy_serving({"/nodes/1774": node_answer(country="Belgium", city="Ghent")})
    register("1774")
    assert Node.objects.values_list("country", "city").get() == ("Belgium", "Ghent")


def test_it_refuses_a_redirect_to_another_host_naming_it(gridproxy_serving):
    from tests.gridproxy_canned import Answer

    gridproxy_serving({"/nodes/1774": Answer(302, "", headers={"Location": "https://attacker.example/nodes/1774"})})
    with pytest.raises(CommandError, match=r"redirecting to another host, attacker\.example;"):
        register("1774")
    assert not Node.objects.exists()


def register_from_a_dripping_proxy(
    gridproxy_serving, settings, *, deadline: float = 3
) -> tuple[subprocess.CompletedProcess, str, float]:
    """`manage.py node_register 1774` in a separate process, as an operator runs it (what reaches stderr is
    all there is), against a proxy that drips its answer a byte a second: (the run, the proxy's url, seconds)."""
    from tests.gridproxy_canned import Answer

    url = gridproxy_serving({"/nodes/1774": Answer(200, (SAMPLES / "node-1774.json").read_bytes(), drip=1.0)})
    env = {
        **os.environ,
        "GRID_BACKEND": "gridproxy",
        "GRID_PROXY_URL": url,
        "GRID_DEADLINE": str(deadline),
        "GRID_READ_TIMEOUT": "10",
        "GRID_RETRIES": "2",
        "LOG_LEVEL": "INFO",
        # The grid is read before anything is written: the command never gets as far as a database.
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/nowhere",
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "manage.py", "node_register", "1774"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, url, time.monotonic() - started


@pytest.mark.slow
def test_it_fails_within_its_budget_in_one_line_when_the_proxy_drips(gridproxy_serving, settings):
    # The shortest GRID_DEADLINE start-up takes: the drip's first byte comes at once, the second a second later.
    done, url, _took = register_from_a_dripping_proxy(gridproxy_serving, settings, deadline=0.1)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"CommandError: grid: the grid proxy did not finish answering within 0.1 s ({url}/nodes/1774)"
    ]


@pytest.mark.slow  # a wall-clock assertion
def test_it_fails_within_its_budget_on_the_clock_when_the_proxy_drips(gridproxy_serving, settings):
    done, _url, took = register_from_a_dripping_proxy(gridproxy_serving, settings)
    # Three seconds of budget plus the interpreter's start-up, not the ~2,000 s the drip would take.
    assert done.returncode == 1 and took < 3 + 15
