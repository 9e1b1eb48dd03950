"""The first refusal teaches the fleet (issue 32): memory as ZOS decides it, learnt per ZOS build.

On the simulated grid every node of a build really uses ZOS's own memory and, per VM, about
1 GiB beyond its size (records.ZOS_BUILDS, with each node's own spread); only a memory refusal's
`usable` figure tells it. Filled one after another with the precheck on, the first nodes' refusals
teach every node of their build.
"""

import pytest
from django.test import override_settings

from dashboard import capacity
from dashboard.capacity import GiB
from dashboard.deployments.services.deploy import slices_deploy_all_free
from dashboard.lessons.services.memory_model import lesson_current, memory_lesson_revert
from dashboard.models import AuditEvent, Deployment, MemoryLesson, Node, Observation
from sim.grid.machine import usable_mru
from tests.conftest import rolled_back_after, sim_node_add, simgrid_copy

pytestmark = pytest.mark.django_db

MIXED_MRU = (round(15.6 * GiB), 31 * GiB, round(62.8 * GiB))


def _farm(sim_node, builds, sizes=MIXED_MRU, **options):
    """Nodes of one farm, of `sizes` in turn (15.6, 31 and 62.8 GiB), each told its ZOS build (as RMB tells it)."""
    nodes = []
    for i, build in enumerate(builds):
        node = sim_node(
            3001 + i, cru=32, mru=sizes[i % len(sizes)], sru=4000 * GiB, farm_id=77, zos_build=build, **options
        )
        Node.objects.filter(pk=node.pk).update(zos_version=build)
        nodes.append(node)
    return nodes


def _fill(sim_node, nodes):
    """Each node filled with the precheck on; the node ids ZOS refused a VM on, in fill order."""
    refused = []
    for node in nodes:
        done = slices_deploy_all_free(node=Node.objects.get(pk=node.pk))
        if any(d.state == Deployment.State.FAILED for d in done):
            refused.append(node.grid_id)
    return refused


def _takes_all_zos_allows(sim_node, node, slice_mru):
    """ZOS would refuse one more VM of the slice's memory: its usable memory (which a real node tells
    only in a refusal, so the simulated grid's own rows are read) is below it."""
    grid = sim_node.grid
    with grid._transaction() as conn:
        usable = usable_mru(grid._node(conn, node.grid_id), grid._vms(conn, node.grid_id))
    return usable < slice_mru


# Three of each size in the quick loop (three 62.8 GiB nodes: a third refusal would fail it), four in -m slow.
EACH_SIZE = [3, pytest.param(4, marks=pytest.mark.slow)]


@pytest.mark.slow
@pytest.mark.parametrize("each", EACH_SIZE, ids=["9 nodes", "12 nodes"])
def test_done_when_1_a_farm_of_one_build_refuses_on_at_most_the_first_two_nodes(sim_node, each):
    nodes = _farm(sim_node, ["v3.14.0-sim"] * 3 * each)
    refused = _fill(sim_node, nodes)
    # The 15.6 and 31 GiB nodes' 4 GiB slices are bound by ZOS's count before the hidden use
    # bites; the first 62.8 GiB node filled is the first ZOS can refuse on, and it teaches the rest.
    assert len(refused) <= 2, refused
    for node in nodes:
        slice_mru = node.slices.first().size.mru
        assert _takes_all_zos_allows(sim_node, node, slice_mru), node.grid_id


TWO_BUILDS = [1, pytest.param(2, marks=pytest.mark.slow)]


@pytest.mark.slow
@pytest.mark.parametrize("each", TWO_BUILDS, ids=["6 nodes", "12 nodes"])
def test_done_when_1_two_builds_in_the_farm_refuse_at_most_twice_each(sim_node, each):
    # Each build on nodes of every size (the sizes go 15.6, 31, 62.8 GiB in turn), so each has nodes whose
    # hidden use, not ZOS's count, decides its refusal.
    builds = (["v3.14.0-sim"] * 3 + ["v3.13.2-sim"] * 3) * each
    nodes = _farm(sim_node, builds)
    refused = _fill(sim_node, nodes)
    by_build = {
        b: [n for n, build in zip(nodes, builds, strict=True) if build == b and n.grid_id in refused]
        for b in set(builds)
    }
    refused_by_build = {b: [n.grid_id for n in r] for b, r in by_build.items()}
    # Both builds' hidden use makes ZOS refuse (so each build has its own lesson to learn), and each
    # learns it on at most two of its nodes.
    assert all(1 <= len(r) <= 2 for r in by_build.values()), refused_by_build
    for node in nodes:
        assert _takes_all_zos_allows(sim_node, node, node.slices.first().size.mru), node.grid_id


BIG = (round(62.8 * GiB),)  # the nodes whose 4 GiB slices ZOS's hidden use refuses


@pytest.mark.slow
def test_a_nodes_lesson_says_whose_it_is(sim_node):
    nodes = _farm(sim_node, ["v3.14.0-sim"] * 3, BIG)
    _fill(sim_node, nodes[:1])
    # One node's refusal is one source: it changes that node alone (issue 44).
    first, other = Node.objects.get(pk=nodes[0].pk), Node.objects.get(pk=nodes[2].pk)
    assert (first.memory_lesson_scope, other.memory_lesson_scope) == ("own", "")
    _fill(sim_node, nodes[1:2])  # a second node agrees: the build learns
    first, other = Node.objects.get(pk=nodes[0].pk), Node.objects.get(pk=nodes[2].pk)
    assert (first.memory_lesson_scope, other.memory_lesson_scope) == ("own", "build")
    assert other.memory_lesson.learnt_from == [nodes[0].grid_id, nodes[1].grid_id]


@pytest.mark.slow
def test_a_node_whose_build_is_unknown_learns_from_the_fleet_group(sim_node):
    nodes = _farm(sim_node, ["v3.14.0-sim"] * 3, BIG)
    Node.objects.filter(pk__in=[n.pk for n in nodes]).update(zos_version="")
    _fill(sim_node, nodes[:2])
    assert Node.objects.get(pk=nodes[2].pk).memory_lesson_scope == "fleet"
    assert set(Observation.objects.values_list("zos_build", flat=True)) == {""}


def _unversioned(sim_node, grid_id: int) -> Node:
    """A 62.8 GiB node of the build whose version the dashboard was not told (the fleet-wide group)."""
    node = sim_node(grid_id, cru=32, mru=BIG[0], sru=4000 * GiB, zos_build="v3.14.0-sim")
    Node.objects.filter(pk=node.pk).update(zos_version="")
    return Node.objects.get(pk=node.pk)


@pytest.fixture(scope="class")
def taught_built(django_db_setup, django_db_blocker, tmp_path_factory):
    """Three 62.8 GiB nodes of one build, the first two filled (their refusals agree: the build learns);
    built once for the class (its simulated grid in a folder of its own, its rows rolled back after)."""
    from sim.grid import SimulatedGrid

    path = tmp_path_factory.mktemp("taught") / "simgrid.sqlite3"
    grid = SimulatedGrid(path)

    def add(node_id, **options):
        return sim_node_add(grid, node_id, **options)

    add.grid = grid
    with override_settings(SIMGRID_PATH=path, GRID_BACKEND="simulator"), rolled_back_after(django_db_blocker):
        nodes = _farm(add, ["v3.14.0-sim"] * 3, BIG)
        never_refused_before = Node.objects.get(pk=nodes[2].pk).placeable_now
        _fill(add, nodes[:2])
        yield path, [n.pk for n in nodes], never_refused_before


@pytest.fixture
def taught(taught_built, simgrid_path, db):
    """The class's taught nodes on a copy of their simulated grid; what a test writes is undone after it."""
    path, pks, _ = taught_built
    simgrid_copy(path, simgrid_path)
    return [Node.objects.get(pk=pk) for pk in pks]


@pytest.fixture
def placeable_before_the_lesson(taught_built) -> int:
    """The third taught node's placeable_now before the first two nodes' refusals taught their build."""
    return taught_built[2]


def test_a_node_registered_from_the_simulated_grid_says_its_own_build(sim_node):
    from dataclasses import replace

    from dashboard.nodes.services.registration import node_register_from_grid

    grid = sim_node.grid
    grid.add_node(3201, cru=32, mru=BIG[0], sru=4000 * GiB, zos_build="v3.13.2-sim")
    grid.add_node(3202, cru=32, mru=BIG[0], sru=4000 * GiB)
    for grid_id in (3201, 3202):
        node_register_from_grid(live=replace(grid.node(grid_id), pools_sru=(4000 * GiB,)))
    versions = dict(Node.objects.filter(grid_id__in=(3201, 3202)).values_list("grid_id", "zos_version"))
    assert versions == {3201: "v3.13.2-sim", 3202: ""}


class TestTaught:
    """The tests that start from what the first two nodes' refusals taught, built once for the class."""

    @pytest.mark.slow
    def test_the_lesson_reaches_placeable_now_of_a_node_never_refused(self, taught, placeable_before_the_lesson):
        after = Node.objects.get(pk=taught[2].pk)
        assert after.placeable_now < placeable_before_the_lesson
        # ZOS's own use and each VM's, where a full node runs: the refusal's 12 VMs told about 13.5 GiB.
        assert after.observed.hidden_mru(12, after.total_mru) + capacity.zos_reserve_mru(after.total_mru) > 12 * GiB

    def test_a_lesson_reverted_is_audited_and_the_one_before_decides_again(self, taught, django_user_model):
        nodes = taught  # two nodes agree: the first lesson
        slices_deploy_all_free(node=Node.objects.get(pk=nodes[2].pk), precheck=False)  # a third refusal, agreeing
        latest = lesson_current("v3.14.0-sim")
        assert MemoryLesson.objects.count() == latest.points - 1 >= 2  # one lesson a refusal after the second
        admin = django_user_model.objects.create_superuser("admin", "a@example.com", "x")

        now_deciding = memory_lesson_revert(lesson=latest, by=admin)

        assert now_deciding.points == latest.points - 1 and now_deciding.pk != latest.pk
        third = Node.objects.get(pk=nodes[1].pk)
        assert third.memory_lesson_id == now_deciding.pk
        event = AuditEvent.objects.get(action="memory_lesson.reverted")
        assert event.actor == admin and Observation.objects.filter(cleared_at__isnull=False).count() == 1

    def test_the_node_page_says_which_lesson_decides_and_learnt_from_where(self, taught, admins_client):
        nodes = taught
        page = admins_client.get(f"/nodes/{nodes[2].grid_id}/").content.decode()
        assert (
            "its ZOS build's lesson (v3.14.0-sim)" in page
            and f"learnt from nodes {nodes[0].grid_id}, {nodes[1].grid_id}" in page
        )

    def test_an_admin_reverts_the_lesson_from_the_node_page(self, taught, admins_client):
        nodes = taught
        lesson = Node.objects.get(pk=nodes[2].pk).memory_lesson
        response = admins_client.post(f"/nodes/{nodes[2].grid_id}/memory-lessons/{lesson.pk}/revert/")
        assert response.status_code == 302
        assert Node.objects.get(pk=nodes[2].pk).memory_lesson is None
        assert AuditEvent.objects.get(action="memory_lesson.reverted").actor.username == "ada"

    def test_support_may_not_revert_a_lesson(self, taught, support_client):
        nodes = taught
        lesson = Node.objects.get(pk=nodes[2].pk).memory_lesson
        assert support_client.post(f"/nodes/{nodes[2].grid_id}/memory-lessons/{lesson.pk}/revert/").status_code == 403
        assert MemoryLesson.objects.get(pk=lesson.pk).reverted_at is None

    def test_reverting_wants_a_post(self, taught, admins_client):
        nodes = taught
        lesson = Node.objects.get(pk=nodes[2].pk).memory_lesson
        assert admins_client.get(f"/nodes/{nodes[2].grid_id}/memory-lessons/{lesson.pk}/revert/").status_code == 405

    def test_the_api_says_which_lesson_decides(self, taught, api_call, api_token):
        nodes = taught
        body = api_call("get", f"/api/v1/nodes/{nodes[2].grid_id}", api_token("read")).json()
        lesson = body["lessons"]["memory_lesson"]
        assert (lesson["scope"], lesson["build"], lesson["learnt_from"]) == (
            "build",
            "v3.14.0-sim",
            [nodes[0].grid_id, nodes[1].grid_id],
        )

    @pytest.mark.slow
    def test_a_node_registered_after_the_lesson_counts_it_at_once(self, taught, sim_node):
        nodes = taught
        Node.objects.filter(pk__in=[n.pk for n in nodes]).update(zos_version="")  # the fleet-wide group
        memory_lesson_revert(lesson=lesson_current("v3.14.0-sim"))
        # Two nodes refuse and agree: the fleet group learns.
        _fill(sim_node, [Node.objects.get(pk=nodes[2].pk), _unversioned(sim_node, 3097)])
        late = sim_node(3099, cru=32, mru=BIG[0], sru=4000 * GiB)
        late = Node.objects.get(pk=late.pk)

        assert (late.memory_lesson_scope, late.memory_lesson_id) == ("fleet", lesson_current("").pk)
        assert late.placeable_now < late.slices.count()

    @pytest.mark.slow
    def test_a_version_told_takes_the_node_out_of_the_fleet_wide_group(self, taught, sim_node):
        from dashboard.grid.types import ZosVersion
        from dashboard.nodes.services.pools_heard import Heard, pools_heard_store

        nodes = taught
        Node.objects.filter(pk__in=[n.pk for n in nodes]).update(zos_version="")
        memory_lesson_revert(lesson=lesson_current("v3.14.0-sim"))
        # Two nodes refuse and agree: the fleet-wide group learns.
        _fill(sim_node, [Node.objects.get(pk=nodes[2].pk), _unversioned(sim_node, 3097)])
        late = sim_node(3098, cru=32, mru=BIG[0], sru=4000 * GiB, zos_build="v3.13.2-sim")
        assert Node.objects.get(pk=late.pk).memory_lesson_scope == "fleet"

        pools_heard_store([late], Heard(versions={late.grid_id: ZosVersion(zos="v3.13.2-sim")}))

        late = Node.objects.get(pk=late.pk)
        assert (late.memory_lesson_id, late.memory_lesson_scope, late.hidden_mru_per_vm) == (None, "", 0)
