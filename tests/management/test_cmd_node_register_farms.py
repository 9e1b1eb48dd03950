"""node_register --farm-id N [--farm-id ...]: whole farms from the grid."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard.capacity import GiB
from dashboard.models import Node


def register(*args: str) -> str:
    out = StringIO()
    call_command("node_register", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def two_farms(sim_node, settings):
    settings.GRID_PAGE_SIZE = 2
    for node_id, farm_id in ((1, 4242), (2, 4242), (3, 4242), (7, 4243)):
        sim_node(node_id, register=False, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=farm_id)
    sim_node.grid.set_status(3, "standby")
    return sim_node.grid


@pytest.mark.django_db
def test_it_adds_every_node_of_the_farms(two_farms):
    text = register("--farm-id", "4242", "--farm-id", "4243")
    assert text.startswith("registered 4 new node(s) with 24 deployable slice(s)")
    assert set(Node.objects.values_list("grid_id", flat=True)) == {1, 2, 3, 7}


@pytest.mark.django_db
def test_it_takes_only_the_status_asked_for(two_farms):
    register("--farm-id", "4242", "--status", "up")
    assert set(Node.objects.values_list("grid_id", flat=True)) == {1, 2}


@pytest.mark.django_db
def test_a_dry_run_registers_nothing(two_farms):
    result = json.loads(register("--farm-id", "4242", "--dry-run", "--json"))
    assert (result["registered"], result["dry_run"], Node.objects.count()) == (3, True, 0)


@pytest.mark.django_db
def test_running_it_again_changes_no_catalog(two_farms):
    register("--farm-id", "4242")
    again = json.loads(register("--farm-id", "4242", "--json"))
    assert (again["registered"], again["refreshed"], again["changed"]) == (0, 3, 0)


@pytest.mark.django_db
def test_the_single_node_form_keeps_the_report_time(two_farms):
    register("7")
    assert Node.objects.get(grid_id=7).reported_at is not None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give a node id, or --farm-id"),
        (("--farm-id", "4242", "--cru", "8"), "farms are read from the grid"),
        (("--farm-id", "4242", "--policy", "nope"), "unknown policy"),
        (("--farm-id", "4242", "--status", "unknown"), "status must be one of"),
        (("1", "--dry-run"), "--dry-run and --max-new-nodes: only when adding farms"),
    ],
)
def test_it_refuses_what_it_cannot_do(two_farms, args, message):
    with pytest.raises(CommandError, match=message):
        register(*args)


@pytest.mark.django_db
def test_past_the_new_node_limit_it_stops_and_says_how_to_confirm(two_farms, settings):
    settings.ONBOARD_MAX_NEW_NODES = 2
    with pytest.raises(CommandError, match=r"past the 2 allowed .*--max-new-nodes N"):
        register("--farm-id", "4242", "--farm-id", "4243")
    assert Node.objects.count() == 2
    register("--farm-id", "4242", "--farm-id", "4243", "--max-new-nodes", "4")
    assert Node.objects.count() == 4


@pytest.mark.django_db
def test_its_grid_reads_are_background_work_as_the_onboarding_jobs_are(two_farms, monkeypatch):
    # The reads leave the request budget's reserve to interactive requests (grid.budget), as the job kind says.
    from dashboard.grid import budget
    from dashboard.jobs.kinds import kind_of
    from dashboard.models import Job

    seen = []
    nodes = two_farms.nodes

    def nodes_seen(**query):
        seen.append(budget.current_priority())
        return nodes(**query)

    monkeypatch.setattr(two_farms, "nodes", nodes_seen)
    monkeypatch.setattr("dashboard.management.commands.node_register.get_grid", lambda: two_farms)
    register("--farm-id", "4242")
    assert seen and set(seen) == {budget.BACKGROUND} and kind_of(Job.Kind.ONBOARD).background
