import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard.capacity import GiB
from dashboard.models import AuditEvent, Node, Slice
from tests.manage_in_process import database_unreachable, manage

NODE_1774 = ["--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB", "--farm-id", "1"]


def register(*args: str) -> str:
    out = StringIO()
    call_command("node_register", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_it_registers_a_node_given_by_hand():
    text = register("1774", *NODE_1774, "--pools", "931.5GiB")
    assert (
        text.strip() == "registered node 1774 (farm 1) with policy zos v1: 6 slice(s) of 1 vCPU / 4 GiB / 151 GiB disk"
    )
    assert Node.objects.get(grid_id=1774).slices.count() == 6


@pytest.mark.django_db
def test_it_sizes_the_disks_for_unknown_pools_when_none_are_given():
    text = register("1774", *NODE_1774)
    # 1 TB may be four 250 GB SSDs: six disks in four 228.2 GiB pools.
    assert text.strip().endswith("6 slice(s) of 1 vCPU / 4 GiB / 113 GiB disk")


@pytest.mark.django_db
def test_it_prints_one_json_object():
    result = json.loads(register("1774", *NODE_1774, "--farm-name", "mitana", "--json"))
    assert (result["node_id"], result["farm_name"], result["policy"], result["slices"]) == (1774, "mitana", "zos", 6)
    assert result["slice"]["mru"] == 4 * GiB and result["catalog_generation"] == 1


@pytest.mark.django_db
def test_it_registers_with_a_named_policy():
    register("1774", *NODE_1774, "--policy", "legacy")
    assert set(Slice.objects.values_list("sru", flat=True)) == {133 * GiB}


@pytest.mark.django_db
def test_it_stores_the_pools():
    register("1774", *NODE_1774, "--pools", "465.75GiB", "465.75GiB")
    assert Node.objects.get().pools_sru == [int(465.75 * GiB)] * 2


@pytest.mark.django_db
def test_it_marks_a_node_given_by_hand_as_of_unknown_status():
    register("1774", *NODE_1774)
    assert Node.objects.get().status == "unknown"


@pytest.mark.django_db
def test_it_takes_the_status_and_twin_when_given():
    register("1774", *NODE_1774, "--status", "up", "--twin-id", "42", "--dedicated")
    assert Node.objects.values_list("status", "twin_id", "dedicated").get() == ("up", 42, True)


@pytest.mark.django_db
def test_it_records_the_command_line_and_the_user_in_the_audit_trail(django_user_model):
    ada = django_user_model.objects.create_user(username="ada")
    register("1774", *NODE_1774, "--by", "ada")
    event = AuditEvent.objects.get()
    assert (event.action, event.source, event.actor) == ("node registered", "command", ada)
    assert "@" in event.detail["origin"]


@pytest.mark.django_db
def test_it_refuses_an_unknown_user_and_writes_nothing():
    with pytest.raises(CommandError, match="--by: there is no user 'nobody'"):
        register("1774", *NODE_1774, "--by", "nobody")
    assert not Node.objects.exists()


@pytest.mark.django_db
def test_it_refuses_a_node_registered_twice():
    register("1774", *NODE_1774)
    with pytest.raises(CommandError, match="node 1774 is already registered; re-register it") as excinfo:
        register("1774", *NODE_1774, "--policy", "legacy")
    assert excinfo.value.returncode == 1
    assert Slice.objects.count() == 6


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["1774", "--cru", "8", "--mru", "31GiB", "--farm-id", "1"], r"missing --sru"),
        (["1774", "--cru", "8", "--mru", "31GiB", "--sru", "931.5GiB"], "give --farm-id for a node given by hand"),
        (["abc", *NODE_1774], "node id: 'abc' is not a whole number from 1 to 2147483647"),
        (["0", *NODE_1774], "node id: '0' is not a whole number from 1 to 2147483647"),
        (["1774", *NODE_1774[:-2], "--farm-id=-1"], "--farm-id: '-1' is not a whole number from 0 to 2147483647"),
        (["1774", "--cru", "8", "--mru", "31GB", "--sru", "931.5GiB", "--farm-id", "1"], "decimal unit"),
        (["1774", *NODE_1774, "--policy", "zoz"], "unknown policy 'zoz'"),
        (
            ["1774", *NODE_1774, "--pools", "10GiB", "900GiB"],
            "the first pool is 10 GiB; it must hold the 20 GiB zos-cache",
        ),
        (["1774", *NODE_1774, "--twin-id", "x"], "--twin-id: 'x' is not a whole number from 0 to 2147483647"),
    ],
)
def test_it_refuses_bad_input_with_one_clear_error_and_writes_nothing(args, message):
    with pytest.raises(CommandError, match=message):
        register(*args)
    assert (Node.objects.count(), AuditEvent.objects.count()) == (0, 0)


def test_it_exits_non_zero_with_one_line_and_no_traceback_on_partial_capacity():
    with database_unreachable():
        done = manage("node_register", "1774", "--cru", "8", "--farm-id", "1")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["CommandError: give --cru, --mru and --sru (missing --mru, --sru)"]


def test_it_checks_its_input_before_reaching_the_database():
    with database_unreachable():
        done = manage("node_register", "1774", "--cru", "8", "--mru", "31GB", "--sru", "931.5GiB", "--farm-id", "1")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("CommandError: --mru: '31GB' uses a decimal unit")


@pytest.mark.django_db
def test_it_reports_the_pools_of_a_registered_node_as_an_operator():
    register("1774", *NODE_1774)  # carved for unknown pools
    text = register("1774", "--pools", "465.75GiB", "465.75GiB")
    node = Node.objects.get(grid_id=1774)
    assert "SSD pools 465.75 GiB + 465.75 GiB reported; its catalog is stale" in text
    assert (node.pools_sru, node.pools_source, node.pool_reports.get().source) == (
        [int(465.75 * GiB)] * 2,
        "operator",
        "operator",
    )


@pytest.mark.django_db
def test_it_refuses_pools_of_a_registered_node_that_do_not_add_up():
    register("1774", *NODE_1774)
    with pytest.raises(CommandError, match="add up to 800 GiB"):
        register("1774", "--pools", "400GiB", "400GiB")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("size", "said"),
    [
        (["--cru", "8", "--mru", "31GiB", "--sru", "0", "--farm-id", "1"], r"node 1774 has no SSD \(sru 0\)"),
        (["--cru", "8", "--mru", "3GiB", "--sru", "500GiB", "--farm-id", "1"], "below one slice and the reserve"),
    ],
)
def test_finding_7_it_refuses_what_cannot_be_a_node_in_one_line(size, said):
    with pytest.raises(CommandError, match=said) as refused:
        register("1774", *size)
    assert "\n" not in str(refused.value) and refused.value.returncode == 2
    assert not Node.objects.exists()
