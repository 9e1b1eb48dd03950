import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard.capacity import GiB, MiB
from dashboard.deployments.services.deploy import slice_deploy, slices_deploy_all_free
from tests.factories import NODE_1774

pytestmark = pytest.mark.django_db


def _run(*args):
    out = StringIO()
    call_command("calibrate", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _deploy(node, count):
    for index in range(count):
        slice_deploy(node=node, slice_index=index)


def _refused(node):
    # Without the precheck ZOS refuses what does not fit; its refusals show the memory really used.
    slices_deploy_all_free(node=node, precheck=False)


def test_it_flags_a_node_with_a_hidden_per_vm_overhead(sim_node):
    _refused(sim_node(2877, cru=24, mru=64 * GiB, sru=1863 * GiB, per_vm_overhead_mru=512 * MiB))
    data = json.loads(_run("2877", "--json"))
    assert data["flagged"] is True
    assert abs(data["mru"]["overhead_per_vm"] - 512 * MiB) < 4 * MiB


def test_it_says_one_vm_is_not_enough(sim_node):
    _deploy(sim_node(1774, **NODE_1774), 1)
    assert "need two or more VMs (at different counts)" in _run("1774")


def test_it_lists_the_fleet_with_the_flagged_nodes(sim_node):
    _refused(sim_node(2877, cru=24, mru=64 * GiB, sru=1863 * GiB, per_vm_overhead_mru=GiB))
    _deploy(sim_node(1774, **NODE_1774), 2)
    data = json.loads(_run("--json"))
    assert data["flagged"] == [2877]
    assert [n["node_id"] for n in data["nodes"]] == [1774, 2877]


def test_it_prints_a_line_per_sampled_node_and_the_fleet(sim_node):
    _refused(sim_node(1774, policy_name="legacy", **NODE_1774))  # the 7th legacy slice: no hidden use
    lines = _run().strip().splitlines()
    assert lines[0].startswith("node 1774: reserve 3.1 GiB, per-VM overhead 0 B")
    assert lines[-1].startswith("fleet: ")


def test_it_says_when_there_are_no_samples_yet(simgrid_path):
    assert "no capacity samples yet" in _run()


def test_it_refuses_an_unknown_node(simgrid_path):
    with pytest.raises(CommandError, match="node 999 is not registered"):
        _run("999")
