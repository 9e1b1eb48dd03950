"""A free slice below SLICE_MIN_ODDS is off every headline (issue 32): deployable, placeable now, the fleet's
totals and tiers, /metrics; the catalog still offers it, with its odds, and min_odds leaves it out."""

from statistics import NormalDist

import pytest
from django.utils import timezone

from dashboard.capacity import GiB, MiB
from dashboard.figures.selectors.farm_totals import fleet_totals
from dashboard.figures.selectors.tiers import TIER_FIGURES
from dashboard.figures.services.farm_totals import farm_totals_refresh
from dashboard.figures.services.figures import figures_refresh
from dashboard.models import MemoryLesson, Node

pytestmark = pytest.mark.django_db

SPREAD = 60 * MiB
ROOM_SD = 0.5  # the last slice's room, in standard deviations of the lesson's line: odds Phi(0.5) ~ 0.69


def _uncertain_last_slice(sim_node) -> tuple[Node, int]:
    """A node whose lesson leaves its last free slice half a standard deviation of room: (node, slices)."""
    node = sim_node(3301, cru=32, mru=round(62.8 * GiB), sru=4000 * GiB, farm_id=77)
    sizes = [s.mru for s in node.slices.order_by("index")]
    n = len(sizes)
    sd = (SPREAD**2 + SPREAD**2 / 2) ** 0.5  # a node's spread and the line's own (two points, at the slope 0)
    own = node.total_mru - sum(sizes) - round(ROOM_SD * sd)
    lesson = MemoryLesson.objects.create(
        build="v-test",
        own_mru=own,
        per_vm_mru=0,
        spread_mru=SPREAD,
        mean_vms=n - 1,
        points=2,
        nodes=2,
        learnt_at=timezone.now(),
    )
    Node.objects.filter(pk=node.pk).update(memory_lesson=lesson, memory_lesson_scope="build")
    figures_refresh([node.pk])
    farm_totals_refresh()
    return Node.objects.get(pk=node.pk), n


def test_the_uncertain_slice_is_counted_in_neither_deployable_nor_placeable_now(sim_node):
    node, n = _uncertain_last_slice(sim_node)
    assert (node.slices_free, node.deployable, node.placeable_now) == (n, n - 1, n - 1)


def test_the_fleet_totals_and_tiers_leave_it_out_and_still_add_up(sim_node):
    _node, n = _uncertain_last_slice(sim_node)
    fleet = fleet_totals()
    assert (fleet.deployable, fleet.placeable) == (n - 1, n - 1)
    assert sum(getattr(fleet, name) for name in TIER_FIGURES.values()) == fleet.deployable


def test_the_catalog_offers_it_with_its_odds(api_call, api_token, sim_node):
    node, n = _uncertain_last_slice(sim_node)
    catalog = api_call("get", f"/api/v1/nodes/{node.grid_id}", api_token("read")).json()["catalog"]
    odds = [c["odds"] for c in catalog]
    assert odds[: n - 1] == [1.0] * (n - 1)
    assert odds[-1] == pytest.approx(NormalDist().cdf(ROOM_SD), abs=0.01)


def test_min_odds_asks_for_sure_slices_only(api_call, api_token, sim_node):
    node, n = _uncertain_last_slice(sim_node)
    body = api_call("get", f"/api/v1/nodes/{node.grid_id}", api_token("read"), min_odds=0.95).json()
    assert len(body["catalog"]) == n - 1


def test_min_odds_must_be_a_probability(api_call, api_token, sim_node):
    node, _n = _uncertain_last_slice(sim_node)
    assert api_call("get", f"/api/v1/nodes/{node.grid_id}", api_token("read"), min_odds=1.5).status_code in (400, 422)


def test_a_lower_slice_min_odds_promises_it_again(settings, sim_node):
    settings.SLICE_MIN_ODDS = 0.5
    node, n = _uncertain_last_slice(sim_node)
    assert node.deployable == n


def _lesson_leaving(node: Node, room: int) -> None:
    """A lesson under which one more VM of the node's slice size has `room` bytes left by the line."""
    size = node.slices.first().mru
    lesson = MemoryLesson.objects.create(
        build="v-test",
        own_mru=node.total_mru - size - room,
        per_vm_mru=0,
        spread_mru=SPREAD,
        points=2,
        nodes=2,
        learnt_at=timezone.now(),
    )
    Node.objects.filter(pk=node.pk).update(memory_lesson=lesson, memory_lesson_scope="build")
    figures_refresh([node.pk])


def test_placement_puts_the_surer_node_first_and_min_odds_leaves_the_unsure_out(api_call, api_token, sim_node):
    unsure = sim_node(3401, cru=32, mru=round(62.8 * GiB), sru=4000 * GiB, farm_id=77)
    sure = sim_node(3402, cru=32, mru=round(31 * GiB), sru=4000 * GiB, farm_id=77)
    _lesson_leaving(Node.objects.get(pk=unsure.pk), room=0)  # odds one half
    size = unsure.slices.first()
    query = {"cru": size.cru, "mru": size.mru, "sru": size.sru}
    best = api_call("get", "/api/v1/placement", api_token("read"), **query).json()["best"]
    assert [(b["node_id"], b["odds"]) for b in best] == [(sure.grid_id, 1.0), (unsure.grid_id, 0.5)]

    body = api_call("get", "/api/v1/placement", api_token("read"), min_odds=0.95, **query).json()
    assert [b["node_id"] for b in body["best"]] == [sure.grid_id]
    assert body["limited"]["min_odds"] == 1


def test_the_node_page_shows_sure_against_uncertain_slices(admins_client, sim_node):
    node, n = _uncertain_last_slice(sim_node)
    page = admins_client.get(f"/nodes/{node.grid_id}/").content.decode()
    assert page.count('<span class="badge ok">sure</span>') == n - 1
    assert "uncertain · 0.69" in page


def _told(node: Node, version: str) -> Node:
    Node.objects.filter(pk=node.pk).update(zos_version=version)
    figures_refresh([node.pk])
    return Node.objects.get(pk=node.pk)


def test_an_untaught_builds_near_full_slice_is_off_the_headline(sim_node):
    node = Node.objects.get(pk=sim_node(3302, cru=8, mru=16 * GiB, sru=1000 * GiB, farm_id=78).pk)
    told = _told(node, "v-untaught")
    assert told.slices_free == node.deployable
    assert 1 <= told.deployable < node.deployable  # the slice that fits only a small hidden use is no promise


def test_a_node_of_no_known_version_and_no_lesson_keeps_its_slices(sim_node):
    node = Node.objects.get(pk=sim_node(3303, cru=8, mru=16 * GiB, sru=1000 * GiB, farm_id=78).pk)
    assert _told(node, "").deployable == node.deployable


def _taken_on(node: Node, *, vms: int, room_mru: int, vouched_by: str = "account 1", index: int = 0):
    """A deployment ZOS took on the node's slice `index` with `vms` VMs beside it and `room_mru` beyond their
    memory (its accepted_seen, told by `vouched_by`), on the build "v-untaught"; no figures refreshed."""
    from dashboard.models import Deployment

    first = node.slices.get(index=index)
    return Deployment.objects.create(
        node=node,
        slice=first,
        slice_index=first.index,
        cru=first.cru,
        mru=first.mru,
        sru=first.sru,
        state=Deployment.State.DEPLOYED,
        capacity_seen={"vms": vms, "room_mru": room_mru, "zos_build": "v-untaught", "vouched_by": vouched_by},
    )


def _untaught_pair(sim_node, first: int) -> tuple[Node, Node, list[int]]:
    """A node of the untaught build with its first slice not promised, another node of the build, the sizes."""
    node = sim_node(first, cru=8, mru=16 * GiB, sru=1000 * GiB, farm_id=78)
    told = _told(node, "v-untaught")
    other = sim_node(first + 1, cru=8, mru=16 * GiB, sru=1000 * GiB, farm_id=78)
    return told, other, [s.mru for s in node.slices.order_by("index")]


def test_deployments_zos_took_on_the_build_bring_the_slice_back(sim_node):
    told, other, sizes = _untaught_pair(sim_node, 3304)
    last = told.deployable  # the first slice not promised, with the promised ones running
    room = told.total_mru - sizes[last] - sum(sizes[:last])
    # One source (a node and who vouches for it) moves nothing alone (capacity.tightest, issue 44) ...
    _taken_on(other, vms=last, room_mru=room)
    _taken_on(other, vms=last, room_mru=room, index=1)  # the same source again
    figures_refresh([told.pk])
    assert Node.objects.get(pk=told.pk).deployable == told.deployable
    # ... a second one agreeing does: someone else vouching on the same node.
    _taken_on(other, vms=last, room_mru=room, vouched_by="account 2", index=2)
    figures_refresh([told.pk])
    assert Node.objects.get(pk=told.pk).deployable == told.deployable + 1


def test_one_deployed_report_moves_no_other_nodes_figures_and_a_second_nodes_does(
    sim_node, api_call, api_token, role_user
):
    """Issue 44: one report, from one token, changes no other node's figures, a "deployed" report too (it tells
    the group that ZOS took a VM with that little room); an agreeing report on another node does."""
    from dashboard.deployments.services.deploy import slice_deploy

    told, first, _sizes = _untaught_pair(sim_node, 3311)
    second = sim_node(3313, cru=8, mru=16 * GiB, sru=1000 * GiB, farm_id=78)
    last = told.deployable
    token = api_token("read,report", user=role_user("admins", username="reporter"))
    for reporter in (first, second):
        Node.objects.filter(pk=reporter.pk).update(zos_version="v-untaught")
        for index in range(last):
            slice_deploy(node=Node.objects.get(pk=reporter.pk), slice_index=index)
    body = {"slice_index": last, "outcome": "deployed", "at": timezone.now().isoformat()}

    answer = api_call(
        "post", "/api/v1/deployments", token, json=body | {"node_id": first.grid_id, "marketplace_id": "a"}
    )
    assert answer.status_code == 201, answer.json()
    assert Node.objects.get(pk=told.pk).deployable == told.deployable

    answer = api_call(
        "post", "/api/v1/deployments", token, json=body | {"node_id": second.grid_id, "marketplace_id": "b"}
    )
    assert answer.status_code == 201, answer.json()
    assert Node.objects.get(pk=told.pk).deployable == told.deployable + 1


def test_the_hourly_follow_refreshes_a_build_whose_deployments_taken_changed(sim_node, settings):
    """A deployment ZOS took moves its build's odds; its figures step runs after its report committed and may
    fail (lessons.services.group_steps), and a bound ages out of the belief after OBSERVATION_MAX_AGE_DAYS: either
    way the hourly memory_lessons_follow refreshes the build's nodes (none here is refreshed by hand)."""
    from datetime import timedelta

    from dashboard.lessons.services.lesson_evidence import memory_lessons_follow
    from dashboard.models import Deployment

    told, other, sizes = _untaught_pair(sim_node, 3308)
    last = told.deployable
    room = told.total_mru - sizes[last] - sum(sizes[:last])
    # As a report's row is written, its figures step left undone: two sources, so the bound counts.
    taken = [
        _taken_on(other, vms=last, room_mru=room, vouched_by=who, index=index)
        for index, who in enumerate(("account 1", "account 2"))
    ]
    assert Node.objects.get(pk=told.pk).deployable == told.deployable  # stale: nothing refreshed it

    memory_lessons_follow()
    assert Node.objects.get(pk=told.pk).deployable == told.deployable + 1

    # Two follows later the bounds are older than the belief counts: the next follow takes the slice back.
    age = timedelta(days=settings.OBSERVATION_MAX_AGE_DAYS, seconds=settings.MEMORY_LESSONS_FOLLOW_EVERY)
    Deployment.objects.filter(pk__in=[t.pk for t in taken]).update(started_at=timezone.now() - age)
    memory_lessons_follow()
    assert Node.objects.get(pk=told.pk).deployable == told.deployable


def test_placement_gives_a_host_the_odds_its_node_page_gives(sim_node):
    # One definition of "the odds one more VM deploys now" (lessons.selectors.odds.vm_odds_now): a node with no
    # lesson is judged by its build's prior (and the bounds its build's deployments set), where placement
    # read lessons' fits alone and took such a node for sure.
    from dashboard.capacity import zos_reserve_mru
    from dashboard.deployments.selectors.placement import placement_for
    from dashboard.lessons.selectors.odds import vm_odds_now

    node = _told(Node.objects.get(pk=sim_node(3306, cru=8, mru=16 * GiB, sru=1000 * GiB, farm_id=77).pk), "v-x")
    promised = node.slices.filter(index__lt=node.deployable)
    running = sum(promised.values_list("mru", flat=True))
    promised.update(state="rented")  # the promised slices running, and read so
    Node.objects.filter(pk=node.pk).update(used_mru=zos_reserve_mru(node.total_mru) + running)
    figures_refresh([node.pk])
    size = node.slices.get(index=node.deployable)
    (host,) = placement_for(cru=size.cru, mru=size.mru, sru=size.sru).best
    odds = vm_odds_now(Node.objects.get(pk=node.pk), mru=size.mru)
    assert (host.node_id, host.odds) == (node.grid_id, odds) and odds < 1.0


def _probe_read(node: Node, *, vms: int, vm_mru: int, beyond: int, build: str = "v-test") -> None:
    """A live reading of `node` a proposed probe took: `vms` VMs of `vm_mru` in all running, ZOS's actual use
    beyond them `beyond` (where that is below the reserve, ZOS's count decided it: used is the count)."""
    from dashboard.capacity import zos_reserve_mru
    from dashboard.models import Observation

    reserve = zos_reserve_mru(node.total_mru)
    used = max(vm_mru + reserve, vm_mru + beyond)
    Observation.objects.create(
        node=node,
        kind=Observation.Kind.MEMORY,
        seen_at=timezone.now(),
        source="probe",
        vouched_by="a proposed probe",
        raw_error="probe",
        vm_count=vms,
        total_mru=node.total_mru,
        accounted_mru=vm_mru + reserve,
        usable_mru=node.total_mru - used,
        zos_build=build,
        standing=Observation.Standing.NODE,
    )


def _in_build(node: Node, lesson: MemoryLesson) -> Node:
    Node.objects.filter(pk=node.pk).update(memory_lesson=lesson, memory_lesson_scope="build", zos_version="v-test")
    return Node.objects.get(pk=node.pk)


def _three_in_build(sim_node, first: int, lesson: MemoryLesson) -> list[Node]:
    """Nodes `first` (16 GiB, the one judged) and the next two (32 GiB, to probe) in the build of `lesson`."""
    sizes = {"cru": 8, "mru": 16 * GiB}, {"cru": 16, "mru": 32 * GiB}, {"cru": 16, "mru": 32 * GiB}
    return [_in_build(sim_node(first + i, **size, sru=1000 * GiB, farm_id=79), lesson) for i, size in enumerate(sizes)]


def _line(*, build: str = "v-test", per_vm_mru: int = 0) -> MemoryLesson:
    """A group's lesson from ten refusals of ten nodes around four VMs: ZOS's own 256 MiB, `per_vm_mru` a VM."""
    return MemoryLesson.objects.create(
        build=build, own_mru=256 * MiB, per_vm_mru=per_vm_mru, spread_mru=32 * MiB, points=10, nodes=10,
        mean_vms=4, learnt_at=timezone.now(),
    )  # fmt: skip


def test_an_unread_nodes_last_slices_wait_for_a_probe_where_probes_found_nodes_that_differ(sim_node):
    """Issue 44's worlds "wide" and "nodes": a node never read may run a use of its own, as a share of its
    group's nodes probes read did. Its slices beyond the first are no promise until it is read."""
    from dashboard.lessons.selectors.odds import free_slices_odds, unread_differs

    lesson = _line()
    unread, differs, alike = _three_in_build(sim_node, 3501, lesson)
    figures_refresh([unread.pk])
    before = Node.objects.get(pk=unread.pk).deployable
    assert before >= 3

    # The probe of a node on its line: ZOS's count decided it (no use of its own). Nothing differs yet.
    _probe_read(alike, vms=4, vm_mru=16 * GiB, beyond=256 * MiB)
    assert unread_differs(["v-test"]) == {}
    figures_refresh([unread.pk])
    assert Node.objects.get(pk=unread.pk).deployable == before

    # A probe reads 8 GiB beyond four VMs where the line says 256 MiB: 2 GiB more a VM (1,984 MiB beyond
    # the 256 MiB). One node's reading is one voice (it may be a forged report): no other node's figures move.
    _probe_read(differs, vms=4, vm_mru=16 * GiB, beyond=256 * MiB + 8 * GiB)
    assert unread_differs(["v-test"]) == {}
    figures_refresh([unread.pk])
    assert Node.objects.get(pk=unread.pk).deployable == before
    # A second node reads the same: two of the three nodes read differ, Laplace's (2 + 1) / (3 + 2).
    second = _in_build(sim_node(3504, cru=16, mru=32 * GiB, sru=1000 * GiB, farm_id=79), lesson)
    _probe_read(second, vms=4, vm_mru=16 * GiB, beyond=256 * MiB + 8 * GiB)
    share, figures = unread_differs(["v-test"])["v-test"]
    assert share == pytest.approx(0.6)
    assert len(figures) == 2 and all(abs(f - 2 * GiB) < 8 * MiB for f in figures)  # the belief's mean: the line's
    figures_refresh([unread.pk])
    # Its three slices of 4 GiB, each with the ones before it running: with two running (8 GiB) a use of 2 GiB a
    # VM puts the host at 8 + 0.25 + 4 = 12.25 GiB, and the third VM does not fit in 16 GiB. Its odds are
    # about 1 - 0.6: off the headline. The second (4 + 0.25 + 2, then 4 GiB more) fits either way.
    assert Node.objects.get(pk=unread.pk).deployable == 2
    assert [s.mru for s in unread.slices.order_by("index")] == [4 * GiB] * 3
    # The node page, the API and placement give the same odds (lessons.selectors.odds.node_belief).
    odds = free_slices_odds(Node.objects.get(pk=unread.pk), free=list(unread.slices.order_by("index")), occupied=[])
    assert odds[0] == odds[1] == 1.0 and 0.35 < odds[2] < 0.45

    # Once a probe reads it (on its line), its own reading decides: the slices are promised again.
    _probe_read(unread, vms=1, vm_mru=unread.slices.first().mru, beyond=256 * MiB)
    figures_refresh([unread.pk])
    assert Node.objects.get(pk=unread.pk).deployable == before


def test_the_hourly_follow_refreshes_a_build_a_probe_read(sim_node):
    """A probe's reading moves how its build's unread nodes may differ, and with it their odds: the hourly
    memory_lessons_follow refreshes the build's nodes (none is refreshed by hand here)."""
    from dashboard.lessons.services.lesson_evidence import memory_lessons_follow

    lesson = _line()
    unread, differs, second = _three_in_build(sim_node, 3511, lesson)
    figures_refresh([unread.pk])
    before = Node.objects.get(pk=unread.pk).deployable
    for node in (differs, second):  # two nodes: one alone is one voice (capacity.DIFFERS_MIN_NODES)
        _probe_read(node, vms=4, vm_mru=16 * GiB, beyond=256 * MiB + 8 * GiB)
    assert Node.objects.get(pk=unread.pk).deployable == before  # stale: nothing refreshed it
    memory_lessons_follow()
    assert Node.objects.get(pk=unread.pk).deployable == before - 1


def _fleet_wide_lesson(sim_node, first: int) -> tuple[MemoryLesson, Node, Node, Node]:
    """The fleet-wide group (no version told) with the line its refusing nodes drew, 256 MiB and 2 GiB a VM,
    on three of its nodes: one of 16 GiB to judge, two of 32 GiB to probe."""
    from dashboard.lessons.services.memory_model import memory_model_apply

    lesson = _line(build="", per_vm_mru=2 * GiB)
    judged = sim_node(first, cru=8, mru=16 * GiB, sru=1000 * GiB, farm_id=79)
    probed = [sim_node(first + i, cru=16, mru=32 * GiB, sru=1000 * GiB, farm_id=79) for i in (1, 2)]
    memory_model_apply(build="", lesson=lesson)
    return lesson, Node.objects.get(pk=judged.pk), *probed


def test_probes_that_read_the_fleet_wide_groups_nodes_below_its_line_take_it_off_them(sim_node):
    """Issue 44's world "nodes": its nodes share no ZOS build, and the line the nodes that refused drew held
    every node back. Two nodes probes read on ZOS's count where the line expects 8.25 GiB beyond four VMs (more
    than the 3.2 GiB reserve by over AGREE_MRU) part the group from it: the line leaves its nodes, each judged
    by ZOS's count and its own readings. One such node is one voice."""
    from dashboard.lessons.selectors.odds import fleet_wide_apart, node_belief, unread_differs
    from dashboard.lessons.services.memory_model import memory_model_apply

    lesson, judged, first, second = _fleet_wide_lesson(sim_node, 3521)
    assert judged.memory_lesson_id == lesson.pk and judged.hidden_mru_per_vm > 0
    held_back = judged.deployable
    _probe_read(first, vms=4, vm_mru=16 * GiB, beyond=0, build="")
    assert not fleet_wide_apart()
    _probe_read(second, vms=4, vm_mru=16 * GiB, beyond=0, build="")
    assert fleet_wide_apart()
    assert unread_differs([""]) == {}  # both on ZOS's count: no node seen to use more than it
    memory_model_apply(build="", lesson=lesson)
    judged = Node.objects.get(pk=judged.pk)
    assert (judged.memory_lesson_id, judged.hidden_mru_per_vm, node_belief(judged)) == (None, 0, None)
    # 16 GiB less the 2 GiB reserve: three slices of 4 GiB; on the line, two running use 8 + 0.25 + 4 GiB, and
    # ZOS's 14 GiB leave less than the third's 4.
    assert (held_back, judged.deployable) == (2, 3)


def test_probes_that_read_the_fleet_wide_groups_nodes_on_its_line_keep_it(sim_node):
    """A grid without an rmb-peer whose nodes run one ZOS build: probes read them where the line says, and it
    keeps protecting the nodes never read (it is what they share)."""
    from dashboard.lessons.selectors.odds import fleet_wide_apart

    lesson, judged, first, second = _fleet_wide_lesson(sim_node, 3524)
    for node in (first, second):
        _probe_read(node, vms=4, vm_mru=16 * GiB, beyond=256 * MiB + 8 * GiB, build="")
    assert not fleet_wide_apart()
    assert Node.objects.get(pk=judged.pk).memory_lesson_id == lesson.pk


def test_the_hourly_follow_takes_the_fleet_wide_line_off_nodes_read_apart_from_it(sim_node):
    from dashboard.lessons.services.lesson_evidence import memory_lessons_follow

    lesson, judged, first, second = _fleet_wide_lesson(sim_node, 3527)
    for node in (first, second):
        _probe_read(node, vms=4, vm_mru=16 * GiB, beyond=0, build="")
    assert Node.objects.get(pk=judged.pk).memory_lesson_id == lesson.pk  # nothing applied it yet
    memory_lessons_follow()
    assert Node.objects.filter(memory_lesson__isnull=False).count() == 0


def test_a_build_with_no_line_yet_has_no_nodes_that_differ_from_it(sim_node):
    """Against a prior (a build never refused) every node of the build would differ alike: a line first."""
    from dashboard.lessons.selectors.odds import unread_differs

    differs = sim_node(3531, cru=16, mru=32 * GiB, sru=1000 * GiB, farm_id=79)
    Node.objects.filter(pk=differs.pk).update(zos_version="v-unlearnt")
    _probe_read(differs, vms=4, vm_mru=16 * GiB, beyond=256 * MiB + 8 * GiB, build="v-unlearnt")
    assert unread_differs(["v-unlearnt"]) == {}


def _differing_build(sim_node, first: int) -> tuple[MemoryLesson, Node]:
    """A build whose line says 256 MiB beyond the VMs, where probes read two nodes that use 2 GiB more a VM: its
    nodes differ (capacity.differs), so its node `first` (16 GiB, no reading) is judged by capacity.Unread."""
    lesson = _line()
    judged, *probed = _three_in_build(sim_node, first, lesson)
    for node in probed:
        _probe_read(node, vms=4, vm_mru=16 * GiB, beyond=256 * MiB + 8 * GiB)
    return lesson, judged


def test_a_reading_tells_a_node_only_with_as_many_vms_as_it_ran(sim_node):
    """A use of a node's own grows with each VM, and ZOS's reserve hides it at first: a probe read with one VM
    running says nothing of the third (issue 44's world "wide": 29 of the 31 buyer refusals left with probes were
    on nodes read with fewer VMs than they ran when refused)."""
    from dashboard.lessons.selectors.odds import unread_among

    lesson, node = _differing_build(sim_node, 3541)
    row = (node.pk, lesson.pk, "v-test")
    assert unread_among([(*row, 0)]) == {node.pk}
    _probe_read(node, vms=1, vm_mru=4 * GiB, beyond=256 * MiB)
    assert unread_among([(*row, 0)]) == unread_among([(*row, 1)]) == frozenset()
    assert unread_among([(*row, 2)]) == {node.pk}
    _probe_read(node, vms=2, vm_mru=8 * GiB, beyond=256 * MiB)
    assert unread_among([(*row, 2)]) == frozenset()


def test_placement_asks_for_a_probe_before_a_slice_a_missing_reading_puts_in_doubt(api_call, api_token, sim_node):
    """The deployer probes such a node before the buyer's VM (capacity.probe_first): a contract created and
    cancelled instead of a buyer refused. The answer names the probe VM and writes nothing (a GET); the probe's
    report counts as a proposed probe while the node still wants one; once read with the VMs it runs, the node
    is judged on its reading."""
    from dashboard.capacity import PROBE_BEYOND_MRU, zos_reserve_mru
    from dashboard.lessons.services.lesson_evidence import probe_proposed
    from dashboard.models import ProbeProposal

    _lesson, node = _differing_build(sim_node, 3551)
    first_two = node.slices.filter(index__lt=2)
    running = sum(first_two.values_list("mru", flat=True))
    first_two.update(state="rented")
    Node.objects.filter(pk=node.pk).update(used_mru=zos_reserve_mru(node.total_mru) + running)
    figures_refresh([node.pk])
    size = node.slices.get(index=2)

    def host() -> dict:
        best = api_call("get", "/api/v1/placement", api_token("read"), cru=size.cru, mru=size.mru, sru=size.sru)
        return next(b for b in best.json()["best"] if b["node_id"] == node.grid_id)

    asked = host()
    assert asked["odds"] < 0.999 and asked["probe_first"] is True
    assert asked["probe"] == {"cru": 1, "mru": node.total_mru + PROBE_BEYOND_MRU, "sru": 0}
    assert ProbeProposal.objects.count() == 0
    assert probe_proposed(Node.objects.get(pk=node.pk), at=timezone.now())

    _probe_read(node, vms=2, vm_mru=running, beyond=256 * MiB)  # on its line
    answered = host()
    assert answered["probe_first"] is False and answered["probe"] is None and answered["odds"] >= 0.999
    assert not probe_proposed(Node.objects.get(pk=node.pk), at=timezone.now())


def test_a_surely_placed_host_asks_for_no_probe(api_call, api_token, sim_node):
    from dashboard.lessons.services.lesson_evidence import probe_proposed

    node = sim_node(3561, cru=8, mru=16 * GiB, sru=1000 * GiB, farm_id=79)
    size = node.slices.first()
    best = api_call("get", "/api/v1/placement", api_token("read"), cru=size.cru, mru=size.mru, sru=size.sru)
    assert [(b["probe_first"], b["probe"]) for b in best.json()["best"]] == [(False, None)]
    assert not probe_proposed(Node.objects.get(pk=node.pk), at=timezone.now())
