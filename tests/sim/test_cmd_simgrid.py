"""manage.py simgrid: the operator's handle on the simulated grid."""

import json
import os
import socket
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
import requests
from django.core.management import CommandError, call_command

from dashboard.capacity import GiB
from sim.grid import SimulatedGrid
from tests.manage_in_process import manage as manage_in_process

REPO = Path(__file__).resolve().parents[2]


def simgrid(*args: str) -> str:
    out = StringIO()
    call_command("simgrid", *args, stdout=out)
    return out.getvalue()


def manage(*args: str, simgrid_path: Path, **popen) -> subprocess.Popen:
    env = dict(os.environ, SIMGRID_PATH=str(simgrid_path), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def test_it_adds_a_node_with_sizes_in_gib(simgrid_path):
    out = simgrid("add-node", "1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB", "--farm-id", "4242")

    node = SimulatedGrid(simgrid_path).node(1774)
    assert (node.total.cru, node.total.mru, node.total.sru, node.farm_id) == (8, 31 * GiB, int(931.5 * GiB), 4242)
    assert out.strip() == (
        "node 1774 on the simulated grid: 8 cores, 31 GiB memory, 931.5 GiB SSD (pools 931.5 GiB), farm 4242, up"
    )


def test_it_adds_a_node_with_pools_status_and_hidden_overhead(simgrid_path):
    simgrid(
        "add-node",
        "7",
        "--cru",
        "8",
        "--mru",
        "64GiB",
        "--sru",
        "930GiB",
        "--pools",
        "465GiB,465GiB",
        "--per-vm-overhead-mru",
        "512MiB",
        "--status",
        "standby",
    )

    grid = SimulatedGrid(simgrid_path)
    assert (grid.pool_sizes(7), grid.node(7).status) == ((465 * GiB, 465 * GiB), "standby")


def test_it_refuses_a_decimal_size_and_adds_nothing(simgrid_path):
    with pytest.raises(CommandError, match="--mru: '31GB' uses a decimal unit"):
        simgrid("add-node", "1774", "--cru", "8", "--mru", "31GB", "--sru", "931.5GiB")

    assert SimulatedGrid(simgrid_path).node_ids() == []


def test_it_refuses_an_existing_node_without_replace(simgrid_path):
    simgrid("add-node", "1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB")

    with pytest.raises(CommandError, match="node 1774 is already on the simulated grid"):
        simgrid("add-node", "1774", "--cru", "4", "--mru", "16GiB", "--sru", "500GiB")


def test_it_replaces_a_node_when_told(simgrid_path):
    simgrid("add-node", "1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB")

    simgrid("add-node", "1774", "--cru", "4", "--mru", "16GiB", "--sru", "500GiB", "--replace")

    assert SimulatedGrid(simgrid_path).node(1774).total.mru == 16 * GiB


def test_it_refuses_pools_larger_than_the_disk(simgrid_path):
    with pytest.raises(CommandError, match="the pools add up to 1000 GiB, more than the node's SSD total of 931.5 GiB"):
        simgrid("add-node", "1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB", "--pools", "500GiB,500GiB")


def test_it_lists_nodes_as_json(simgrid_path):
    simgrid("add-node", "1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB")

    listed = json.loads(simgrid("list", "--json"))

    assert [(n["node_id"], n["used"]["mru"], n["vms"]) for n in listed] == [(1774, 3328599654, [])]


def test_it_lists_nodes_as_a_table(simgrid_path):
    simgrid("add-node", "1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB")

    lines = simgrid("list").splitlines()

    assert lines[1].split()[:4] == ["1774", "1", "up", "8"]


def test_it_says_when_the_grid_is_empty(simgrid_path):
    assert "has no nodes" in simgrid("list")


def test_it_sets_a_node_down(simgrid_path):
    simgrid("add-node", "1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB")

    simgrid("status", "1774", "down")

    assert SimulatedGrid(simgrid_path).node(1774).status == "down"


def test_it_says_an_unknown_node_is_not_on_the_grid(simgrid_path):
    with pytest.raises(CommandError, match="node 9 is not on the simulated grid"):
        simgrid("status", "9", "up")


def test_it_refuses_an_unknown_state(simgrid_path):
    with pytest.raises(CommandError, match="invalid choice: 'paused'"):
        simgrid("status", "1774", "paused")


def test_it_removes_a_node(simgrid_path):
    simgrid("add-node", "1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB")

    simgrid("remove-node", "1774")

    assert SimulatedGrid(simgrid_path).node_ids() == []


def test_it_resets_the_grid(simgrid_path):
    simgrid("add-node", "1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB")
    simgrid("add-node", "11", "--cru", "4", "--mru", "16GiB", "--sru", "256GiB")

    assert "2 nodes removed" in simgrid("reset")
    assert SimulatedGrid(simgrid_path).node_ids() == []


# --- as an operator runs it ------------------------------------------------------------------


def test_a_bad_size_is_one_line_on_stderr_and_a_failing_exit(simgrid_path):
    done = manage_in_process(
        "simgrid",
        "add-node",
        "1774",
        "--cru",
        "8",
        "--mru",
        "lots",
        "--sru",
        "931.5GiB",
    )

    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "CommandError: --mru: 'lots' is not a size; write e.g. 4GiB, 931.5GiB, 512MiB or a byte count"
    ]


def test_it_serves_the_grid_on_the_proxy_paths(tmp_path):
    path = tmp_path / "simgrid.sqlite3"
    SimulatedGrid(path).add_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB))
    process = manage("simgrid", "serve", "--port", "0", simgrid_path=path)
    try:
        banner = process.stdout.readline()
        url = banner.split(" on ")[1].split()[0].rstrip("/")
        answer = requests.get(f"{url}/nodes/1774", timeout=5)
    finally:
        process.terminate()
        process.communicate(timeout=30)

    assert answer.json()["capacity"]["total_resources"]["mru"] == 31 * GiB


def test_it_says_when_the_port_is_taken(simgrid_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        with pytest.raises(CommandError, match=f"cannot listen on 127.0.0.1:{port}: Address already in use"):
            simgrid("serve", "--port", str(port))


def test_the_stand_in_rmb_peer_refuses_an_error_rate_above_one(simgrid_path):
    with pytest.raises(CommandError, match="error rate must be from 0 to 1"):
        call_command("simgrid", "rmb-peer", "--redis", "redis://127.0.0.1:1/0", "--error-rate", "2")


def test_the_stand_in_rmb_peer_says_its_redis_cannot_be_reached(simgrid_path):
    with pytest.raises(CommandError, match=r"the stand-in peer lost its Redis \(redis://127.0.0.1:1/0\)"):
        call_command("simgrid", "rmb-peer", "--redis", "redis://127.0.0.1:1/0", stdout=StringIO())


def test_it_runs_the_zos_cache_check_and_keeps_the_quota_for_every_process(simgrid_path):
    simgrid("add-node", "1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB")
    assert "quota is now 25 GiB" in simgrid("cache-check", "1774", "12GiB")  # 60% of the stored 20 GiB
    assert SimulatedGrid(simgrid_path).storage_pools(1774)[0].used == 25 * GiB
    assert json.loads(simgrid("list", "--json"))[0]["zos_cache_sru"] == 25 * GiB
