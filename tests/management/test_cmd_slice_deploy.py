import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard.capacity import GiB
from dashboard.models import Deployment, Slice
from dashboard.nodes.services.registration import node_register
from tests.factories import NODE_1774, TOTAL_1774
from tests.manage_in_process import manage

pytestmark = pytest.mark.django_db


def _run(*args):
    out = StringIO()
    call_command("slice_deploy", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _run_failing(*args):
    out = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("slice_deploy", *args, stdout=out, stderr=StringIO())
    return raised.value, out.getvalue()


def test_it_deploys_every_free_slice_of_the_default_carve(sim_node):
    sim_node(1774, **NODE_1774)
    assert "6 of 6 slices deployed on node 1774" in _run("1774", "--all-free")


def test_it_reports_no_failure_as_json_for_the_default_carve(sim_node):
    sim_node(1774, **NODE_1774)
    assert json.loads(_run("1774", "--all-free", "--json")) == {"attempted": 6, "deployed": 6, "failed": []}


def test_it_exits_1_and_names_memory_when_the_precheck_refuses_the_seventh_legacy_slice(sim_node):
    sim_node(1774, policy_name="legacy", **NODE_1774)
    error, out = _run_failing("1774", "--all-free", "--json")
    outcome = json.loads(out)
    assert (error.returncode, outcome["attempted"], outcome["deployed"]) == (1, 7, 6)
    assert [(f["slice"], f["cause"], f["error"]) for f in outcome["failed"]] == [(6, "memory", "")]
    assert "memory: needs 4 GiB, 3.9 GiB available" in outcome["failed"][0]["message"]


def test_it_passes_zos_memory_message_through_without_precheck(sim_node):
    sim_node(1774, policy_name="legacy", **NODE_1774)
    error, out = _run_failing("1774", "--all-free", "--no-precheck", "--json")
    failed = json.loads(out)["failed"]
    assert [(f["slice"], f["cause"]) for f in failed] == [(6, "memory")]
    assert "cannot fulfil required memory size 4294967296 bytes" in failed[0]["error"]


def test_it_names_zos_memory_refusal_that_the_precheck_could_not_see(sim_node):
    sim_node(2877, cru=24, mru=64 * GiB, sru=1863 * GiB, per_vm_overhead_mru=GiB)
    error, out = _run_failing("2877", "--all-free", "--json")
    failed = json.loads(out)["failed"]
    assert {f["cause"] for f in failed} == {"memory"}
    assert "cannot fulfil required memory size 4294967296 bytes" in failed[0]["error"]


def test_it_prints_one_line_per_slice(sim_node):
    sim_node(1774, policy_name="legacy", **NODE_1774)
    error, out = _run_failing("1774", "--all-free")
    lines = out.strip().splitlines()
    assert len(lines) == 7 and "refused by the precheck" in lines[-1]
    assert str(error) == "1 of 7 slices on node 1774 were not deployed"


def test_it_deploys_one_slice(sim_node):
    node = sim_node(1774, **NODE_1774)
    _run("1774", "--slice", "3")
    assert list(node.slices.filter(state="deployed").values_list("index", flat=True)) == [3]


def test_it_refuses_an_unknown_node(sim_node):
    error, _ = _run_failing("999", "--all-free")
    assert (error.returncode, str(error)) == (2, "node 999 is not registered; run manage.py node_register 999")


def test_it_refuses_a_slice_that_is_not_free(sim_node):
    node = sim_node(1774, **NODE_1774)
    Slice.objects.filter(node=node, index=0).update(state="rented")
    error, _ = _run_failing("1774", "--slice", "0")
    assert "slice 0 of node 1774 is rented, not free" in str(error)
    assert not Deployment.objects.exists()


@pytest.mark.parametrize("args", [["1774"], ["1774", "--slice", "1", "--all-free"], ["1774", "--slice", "x"]])
def test_it_refuses_bad_arguments(sim_node, args):
    sim_node(1774, **NODE_1774)
    with pytest.raises(CommandError):
        call_command("slice_deploy", *args, stdout=StringIO(), stderr=StringIO())
    assert not Deployment.objects.exists()


def test_it_says_the_grid_is_down_and_records_nothing(gridproxy_down):
    node_register(node_id=1774, total=TOTAL_1774, farm_id=4242)
    error, _ = _run_failing("1774", "--slice", "0")
    assert str(error).startswith("grid: ") and str(error).endswith("(nothing was recorded)")
    assert not Deployment.objects.exists()


@pytest.mark.django_db
def test_it_prints_one_line_without_traceback_from_the_command_line(simgrid_path):
    done = manage("slice_deploy", "4040", "--all-free")
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "CommandError: node 4040 is not registered; run manage.py node_register 4040",
    )
