"""Probes (issue 32): GET /api/v1/probes lists the nodes whose memory would teach the most, with a VM ZOS
always refuses; its refusal, reported as a probe, teaches the node's ZOS build and counts as no failure.
The sender takes the list with POST /api/v1/probes (the nodes kept as proposed); the GET only reads."""

from datetime import UTC, datetime

import pytest
from django.test import override_settings

from dashboard.capacity import GiB, SliceSize
from dashboard.deployments.selectors.deployments import failed_deployments
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.grid.types import DeploymentFailed
from dashboard.models import Deployment, Node, Observation, ProbeProposal
from tests.conftest import rolled_back_after, sim_node_add, simgrid_copy

pytestmark = pytest.mark.django_db

BUILD = "v3.14.0-sim"


def _node(sim_node, grid_id: int, *, running: int) -> Node:
    node = sim_node(grid_id, cru=32, mru=round(62.8 * GiB), sru=4000 * GiB, farm_id=77, zos_build=BUILD)
    Node.objects.filter(pk=node.pk).update(zos_version=BUILD)
    for index in range(running):
        slice_deploy(node=Node.objects.get(pk=node.pk), slice_index=index)
    return Node.objects.get(pk=node.pk)


def _sent(sim_node, probe: dict) -> str:
    """The probe's VM sent to the simulated node: ZOS's refusal, in its words."""
    size = SliceSize(cru=probe["probe"]["cru"], mru=probe["probe"]["mru"], sru=probe["probe"]["sru"])
    with pytest.raises(DeploymentFailed) as refused:
        sim_node.grid.deploy_vm(probe["node_id"], size, name="probe1")
    return refused.value.raw


def _taken(api_call, token) -> list[dict]:
    """The probes the sender takes to send (POST: each node kept as proposed)."""
    response = api_call("post", "/api/v1/probes", token)
    assert response.status_code == 200, response.json()
    return response.json()["probes"]


def _report(api_call, token, probe: dict, error: str, **extra):
    body = {
        "node_id": probe["node_id"],
        "marketplace_id": "probe-1",
        "outcome": "failed",
        "probe": True,
        "error": error,
        "at": datetime.now(UTC).isoformat(),
        **extra,
    }
    return api_call("post", "/api/v1/deployments", token, json=body)


@pytest.fixture(scope="class")
def busy_built(django_db_setup, django_db_blocker, tmp_path_factory):
    """Node 3501 of the build running 8 VMs (a probe's first candidate), built once for the class: its 8
    deploys were most of each test's time. Its simulated grid is in a folder of its own, its rows are
    rolled back after the class (tests/conftest.py rolled_back_after)."""
    from sim.grid import SimulatedGrid

    path = tmp_path_factory.mktemp("probes") / "simgrid.sqlite3"
    grid = SimulatedGrid(path)

    def add(node_id, **options):
        return sim_node_add(grid, node_id, **options)

    with override_settings(SIMGRID_PATH=path, GRID_BACKEND="simulator"), rolled_back_after(django_db_blocker):
        yield path, _node(add, 3501, running=8).pk


@pytest.fixture
def busy(busy_built, simgrid_path, db) -> Node:
    """The class's busy node on a copy of its simulated grid (a test's `sim_node` adds to that copy)."""
    path, pk = busy_built
    simgrid_copy(path, simgrid_path)
    return Node.objects.get(pk=pk)


class TestABusyNode:
    """The tests that start from node 3501 running 8 VMs."""

    def test_it_lists_a_node_of_a_build_never_refused_with_a_vm_larger_than_it(
        self, busy, api_call, api_token, sim_node
    ):
        _node(sim_node, 3502, running=0)  # an empty node's refusal tells nothing ZOS's count did not
        probes = api_call("get", "/api/v1/probes", api_token("read")).json()["probes"]
        assert [(p["node_id"], p["zos_version"], p["running"]) for p in probes] == [(busy.grid_id, BUILD, 8)]
        assert probes[0]["probe"]["mru"] > busy.total_mru

    def test_two_probes_refusals_teach_the_build_and_count_as_no_failure(self, busy, api_call, api_token, sim_node):
        first = busy
        _node(sim_node, 3504, running=6)
        other = _node(sim_node, 3503, running=0)
        # Every node running VMs that no reading tells is listed, the most uncertain (the more VMs) first.
        token = api_token("report")
        listed = _taken(api_call, token)
        assert [p["node_id"] for p in listed] == [3501, 3504]
        probe = listed[0]

        response = _report(api_call, token, probe, _sent(sim_node, probe))

        assert response.status_code == 201, response.json()
        assert response.json()["deployment"]["state"] == "probed"
        # One probe is one source: its node alone (issue 44); the list then proposes only the node not read yet.
        scopes = (Node.objects.get(pk=first.pk).memory_lesson_scope, Node.objects.get(pk=other.pk).memory_lesson_scope)
        assert scopes == ("own", "")
        (second,) = _taken(api_call, token)
        assert second["node_id"] == 3504
        response = _report(api_call, token, second, _sent(sim_node, second), marketplace_id="probe-2")
        assert response.status_code == 201, response.json()
        assert Observation.objects.filter(kind="memory", source="probe", standing="group").count() == 2
        assert Node.objects.get(pk=other.pk).memory_lesson_scope == "build"
        assert failed_deployments().count() == 0
        assert not Deployment.objects.filter(state=Deployment.State.FAILED).exists()

    def test_a_probe_on_a_node_the_list_never_proposed_is_a_plain_report(self, busy, api_call, api_token, sim_node):
        node = busy
        size = SliceSize(cru=1, mru=node.total_mru + GiB, sru=0)
        with pytest.raises(DeploymentFailed) as refused:
            sim_node.grid.deploy_vm(node.grid_id, size, name="probe1")
        response = _report(api_call, api_token("report"), {"node_id": node.grid_id}, refused.value.raw)
        assert response.status_code == 201, response.json()
        assert "taken as a plain report" in response.json()["words"]
        observation = Observation.objects.get(kind="memory")
        assert (observation.source, observation.vouched_by) == ("reported", f"account {observation.reported_by_id}")

    def test_a_probe_reported_twice_is_one_record(self, busy, api_call, api_token, sim_node):
        token = api_token("report")
        (probe,) = _taken(api_call, token)
        error = _sent(sim_node, probe)
        assert [_report(api_call, token, probe, error).status_code for _ in range(2)] == [201, 200]
        assert Deployment.objects.filter(state=Deployment.State.PROBED).count() == 1

    def test_a_probe_must_report_zos_memory_refusal(self, busy, api_call, api_token, sim_node):
        token = api_token("report")
        (probe,) = _taken(api_call, token)
        response = _report(api_call, token, probe, "vm deployment entered error state")
        assert (response.status_code, response.json()["field"]) == (400, "error")
        assert not Deployment.objects.exists() or not Deployment.objects.filter(state="probed").exists()

    def test_the_get_only_reads_and_a_probe_after_it_alone_is_a_plain_report(self, busy, api_call, api_token, sim_node):
        # A read token, a prefetch, a dashboard polling the list: none of them proposes a probe.
        (probe,) = api_call("get", "/api/v1/probes", api_token("read")).json()["probes"]
        assert probe["node_id"] == busy.grid_id
        assert ProbeProposal.objects.count() == 0
        response = _report(api_call, api_token("report"), probe, _sent(sim_node, probe))
        assert response.status_code == 201, response.json()
        assert "taken as a plain report" in response.json()["words"]

    def test_taking_the_list_keeps_each_node_listed_as_proposed_by_its_token(self, busy, api_call, api_token, sim_node):
        _node(sim_node, 3504, running=6)
        deployments = list(Deployment.objects.values_list("pk", "state"))
        token = api_token("report")
        token_pk = api_token.tokens[-1].pk
        listed = api_call("get", "/api/v1/probes", api_token("read")).json()["probes"]
        assert _taken(api_call, token) == listed  # the same list as the GET reads
        kept = ProbeProposal.objects.values_list("node__grid_id", "token_id")
        assert sorted(kept) == [(3501, token_pk), (3504, token_pk)]
        assert _taken(api_call, token) == listed  # a second take (a double click) keeps it again, nothing more
        assert ProbeProposal.objects.count() == 4
        assert list(Deployment.objects.values_list("pk", "state")) == deployments  # taking sends nothing

    def test_the_limit_bounds_what_is_taken(self, busy, api_call, api_token, sim_node):
        _node(sim_node, 3504, running=6)
        response = api_call("post", "/api/v1/probes?limit=1", api_token("report"))
        assert [p["node_id"] for p in response.json()["probes"]] == [3501]
        assert list(ProbeProposal.objects.values_list("node__grid_id", flat=True)) == [3501]


def test_a_report_that_is_no_probe_still_needs_its_slice(api_call, api_token, sim_node):
    node = _node(sim_node, 3501, running=0)
    body = {"node_id": node.grid_id, "marketplace_id": "m-1", "outcome": "failed", "at": datetime.now(UTC).isoformat()}
    response = api_call("post", "/api/v1/deployments", api_token("report"), json=body)
    assert (response.status_code, response.json()["field"]) == (400, "slice_index")


def test_probes_want_a_token(api_call):
    assert api_call("get", "/api/v1/probes").status_code == 401
    assert api_call("post", "/api/v1/probes").status_code == 401


@pytest.mark.parametrize("limit", ["0", "101", "x", str(2**64), "-1", "%00", "1e3", "%ED%A0%80"])
def test_a_bad_limit_is_refused_and_keeps_nothing(api_call, api_token, limit):
    assert api_call("post", f"/api/v1/probes?limit={limit}", api_token("report")).status_code in (400, 422)
    assert ProbeProposal.objects.count() == 0


def test_a_read_token_may_read_the_list_but_not_take_it(api_call, api_token):
    token = api_token("read")
    assert api_call("get", "/api/v1/probes", token).status_code == 200
    assert api_call("post", "/api/v1/probes", token).status_code == 403
    assert ProbeProposal.objects.count() == 0
