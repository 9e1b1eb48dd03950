"""The slice audit against the simulated grid: an orphan and a foreign VM planted, found, and fixed once."""

import datetime as dt

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from dashboard.capacity import GiB, SliceSize
from dashboard.catalogs.selectors.catalog_audit import Pace
from dashboard.catalogs.services.catalog_audit import catalog_audit_here
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.models import AuditEvent, Deployment, Job, Node, Slice
from tests.conftest import rolled_back_after, sim_node_add, simgrid_copy

NODE_1774 = dict(cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana")
# An outside deployer's VM: smaller than a slice, so it fits beside the catalog's.
OUTSIDE = SliceSize(cru=1, mru=2 * GiB, sru=50 * GiB)
FAST = Pace(rate=1000.0, sleep=lambda _s: None)
pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def planted_built(django_db_setup, django_db_blocker, tmp_path_factory):
    """Node 1774 with slices 0 and 1 deployed by the dashboard; slice 1's VM then deleted on the grid
    behind the catalog's back (an orphan), and a VM deployed on the node outside the catalog (foreign).
    Built once for the module: its simulated grid in a folder of its own, its rows rolled back after."""
    from sim.grid import SimulatedGrid

    path = tmp_path_factory.mktemp("planted") / "simgrid.sqlite3"
    grid = SimulatedGrid(path)
    with override_settings(SIMGRID_PATH=path, GRID_BACKEND="simulator"), rolled_back_after(django_db_blocker):
        node = sim_node_add(grid, 1774, **NODE_1774)
        sim_node_add(grid, 11, cru=4, mru=16 * GiB, sru=256 * GiB, farm_id=1)
        slice_deploy(node=node, slice_index=0, grid=grid)
        gone = slice_deploy(node=node, slice_index=1, grid=grid)
        grid.delete_vm(1774, gone.grid_workload_id)
        # Deployed an hour ago: past CATALOG_AUDIT_ORPHAN_GRACE, so its orphan is fixable.
        Deployment.objects.filter(pk=gone.pk).update(started_at=timezone.now() - dt.timedelta(hours=1))
        foreign = grid.deploy_vm(1774, OUTSIDE, name="outside")
        yield {"path": path, "foreign": foreign, "gone": gone.pk}


@pytest.fixture
def planted(planted_built, simgrid_path, db):
    """The module's planted node on a copy of its simulated grid; what a test writes is undone after it."""
    from sim.grid import SimulatedGrid

    simgrid_copy(planted_built["path"], simgrid_path)
    return {
        "node": Node.objects.get(grid_id=1774),
        "grid": SimulatedGrid(simgrid_path),
        "foreign": planted_built["foreign"],
        "gone": Deployment.objects.get(pk=planted_built["gone"]),
    }


def _audit(grid, *, fix=False):
    job = catalog_audit_here(fix=fix, grid=grid, pace=FAST)
    assert job.state == Job.State.SUCCEEDED, job.error
    return job.outcome


def _kinds(result):
    return sorted((f.kind, f.node_id, f.slice_index, f.workload_id) for f in result.findings)


def _stored():
    """Everything an audit could change: each slice's state, each record's state, each node's figures."""
    return (
        list(Slice.objects.order_by("pk").values_list("pk", "state", "rented_by_twin_id")),
        list(Deployment.objects.order_by("pk").values_list("pk", "state", "grid_workload_id")),
        list(Node.objects.order_by("pk").values_list("pk", "slices_free", "slices_deployed", "placeable_now")),
        AuditEvent.objects.filter(action__startswith="audit.").count(),
    )


def test_it_finds_the_orphan_and_the_foreign_vm(planted):
    result = _audit(planted["grid"])

    assert _kinds(result) == [
        ("foreign", 1774, None, planted["foreign"].workload_id),
        ("orphan", 1774, 1, ""),
    ]


def test_every_node_is_checked_and_a_clean_one_says_nothing(planted):
    result = _audit(planted["grid"])

    assert (result.nodes, result.checked, result.counts["not-checked"]) == (2, 2, 0)


def test_the_dry_run_changes_nothing(planted):
    before = _stored()

    _audit(planted["grid"])

    assert _stored() == before


def test_the_fix_makes_the_catalog_match_the_grid(planted):
    _audit(planted["grid"], fix=True)

    assert _audit(planted["grid"]).findings == []


def test_the_fix_frees_the_orphan_and_counts_the_foreign_vm(planted):
    _audit(planted["grid"], fix=True)

    node = Node.objects.get(grid_id=1774)
    taken = dict(node.slices.exclude(state="free").values_list("index", "state"))
    assert (taken, node.slices_free) == ({0: "deployed", 2: "deployed"}, 4)


def test_the_orphan_is_released_as_a_release_would_release_it(planted):
    _audit(planted["grid"], fix=True)

    assert Deployment.objects.get(pk=planted["gone"].pk).state == Deployment.State.DELETED


def test_each_fix_is_in_the_audit_trail(planted):
    _audit(planted["grid"], fix=True)

    assert sorted(AuditEvent.objects.filter(action__startswith="audit.").values_list("action", flat=True)) == [
        "audit.foreign-counted",
        "audit.orphan-freed",
    ]


def test_a_second_fix_fixes_nothing_twice(planted):
    _audit(planted["grid"], fix=True)

    again = _audit(planted["grid"], fix=True)

    assert (again.fixed, AuditEvent.objects.filter(action__startswith="audit.").count()) == ([], 2)


def test_a_fix_after_a_dry_run_fixes_only_what_the_dry_run_showed(planted, role_user):
    from dashboard.catalogs.services.catalog_audit import catalog_audit_run
    from dashboard.jobs.services.jobs import job_claim, job_request

    dry = catalog_audit_here(fix=False, grid=planted["grid"], pace=FAST)
    planted["grid"].deploy_vm(1774, OUTSIDE, name="later")  # a second foreign VM the dry run did not see
    asked = job_request(kind=Job.Kind.CATALOG_AUDIT, by=role_user("admins"), parameters={"dry_run_job": dry.pk})
    result = catalog_audit_run(job=job_claim(job_id=asked.job.pk), grid=planted["grid"], pace=FAST)

    assert (len(result.fixed), [why.split(":")[0] for _key, why in result.not_fixed]) == (
        2,
        [f"found after dry run #{dry.pk}"],
    )


def test_a_node_the_grid_does_not_answer_for_is_not_checked_never_clean(planted, gridproxy_down):
    from dashboard.grid import get_grid

    result = _audit(get_grid())

    assert (result.checked, result.counts["not-checked"], result.counts["orphan"]) == (0, 2, 0)


def test_a_node_the_deadline_leaves_unread_is_not_checked(planted, settings):
    settings.CATALOG_AUDIT_DEADLINE = 1.0
    # At half a request a second, the second node's turn comes after the audit's deadline.
    result = catalog_audit_here(fix=False, grid=planted["grid"], pace=Pace(rate=0.5, sleep=lambda _s: None)).outcome

    assert (result.checked, [f.node_id for f in result.findings if f.kind == "not-checked"]) == (1, [1774])


def test_the_reads_are_paced_at_the_audit_rate(planted):
    now, slept = [0.0], []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    catalog_audit_here(fix=False, grid=planted["grid"], pace=Pace(rate=4.0, clock=lambda: now[0], sleep=sleep))

    assert slept == [0.25]


def test_an_audit_seen_again_keeps_its_first_sighting(planted):
    first = _audit(planted["grid"])
    again = _audit(planted["grid"])

    assert [f.first_seen for f in again.findings] == [f.first_seen for f in first.findings]


def test_the_command_exits_3_on_a_dry_run_that_finds_something(planted, settings):
    with pytest.raises(CommandError) as failed:
        call_command("catalog_audit")

    assert failed.value.returncode == 3


def test_the_command_exits_0_once_fixed(planted):
    call_command("catalog_audit", "--fix")

    call_command("catalog_audit")  # raises CommandError on any status but 0


def test_the_command_exits_4_when_a_node_is_not_checked(planted, gridproxy_down):
    with pytest.raises(CommandError) as failed:
        call_command("catalog_audit", "--json")

    assert failed.value.returncode == 4


# --- the audit of a node whose used capacity moved (node events, "used-moved") ----------------------


def _moved(grid_id: int):
    from django.utils import timezone

    from dashboard.models import NodeEvent

    return NodeEvent.objects.create(
        node=Node.objects.get(grid_id=grid_id), kind="used-moved", at=timezone.now(), words="used moved"
    )


def _run(job, grid):
    from dashboard.catalogs.services.catalog_audit import catalog_audit_run
    from dashboard.jobs.services.jobs import job_claim

    return catalog_audit_run(job=job_claim(job_id=job.pk), grid=grid, pace=FAST)


def test_the_audit_listens_for_used_capacity_that_moved():
    from dashboard.capacity import node_events
    from dashboard.catalogs.services.catalog_audit import audit_on_used_moved

    assert audit_on_used_moved in node_events.subscribers(node_events.USED_MOVED)


def test_a_used_moved_event_audits_its_node_and_finds_what_moved(planted):
    from dashboard.catalogs.services.catalog_audit import audit_on_used_moved

    job = audit_on_used_moved([_moved(1774)])
    result = _run(job, planted["grid"])

    assert (job.asked.node_ids, result.nodes, sorted(f.kind for f in result.findings)) == (
        [1774],
        1,
        ["foreign", "orphan"],
    )


def test_a_node_audit_keeps_the_other_nodes_findings(planted):
    from dashboard.catalogs.services.catalog_audit import audit_on_used_moved

    planted["grid"].deploy_vm(11, OUTSIDE, name="on11")
    _audit(planted["grid"])  # the fleet: node 11's foreign VM, node 1774's orphan and foreign VM
    result = _run(audit_on_used_moved([_moved(1774)]), planted["grid"])

    assert sorted((f.node_id, f.kind) for f in result.findings) == [
        (11, "foreign"),
        (1774, "foreign"),
        (1774, "orphan"),
    ]


def test_events_while_an_audit_is_queued_widen_it(planted):
    from dashboard.catalogs.services.catalog_audit import audit_on_used_moved

    first = audit_on_used_moved([_moved(11)])
    again = audit_on_used_moved([_moved(1774)])

    again.refresh_from_db()
    assert (again.pk, again.parameters["node_ids"]) == (first.pk, [11, 1774])


def test_no_audit_on_used_moved_when_turned_off(planted, settings):
    from dashboard.catalogs.services.catalog_audit import audit_on_used_moved

    settings.CATALOG_AUDIT_ON_USED_MOVED = False

    assert (audit_on_used_moved([_moved(1774)]), Job.objects.filter(kind=Job.Kind.CATALOG_AUDIT).count()) == (None, 0)


def test_an_event_while_an_audit_runs_gets_a_follow_up_audit(
    planted, role_user, broker_purged, django_capture_on_commit_callbacks
):
    from dashboard.jobs.services.jobs import job_request

    asked = job_request(kind=Job.Kind.CATALOG_AUDIT, by=role_user("admins"), dry_run=True)
    with django_capture_on_commit_callbacks(execute=True):
        from dashboard.catalogs.services.catalog_audit import catalog_audit_run
        from dashboard.jobs.services.jobs import job_claim

        job = job_claim(job_id=asked.job.pk)
        _moved(1774)  # the watch saw it after the audit started
        catalog_audit_run(job=job, grid=planted["grid"], pace=FAST)

    follow_up = Job.objects.filter(kind=Job.Kind.CATALOG_AUDIT).exclude(pk=job.pk).get()
    assert (follow_up.parameters["node_ids"], follow_up.dry_run) == ([1774], True)


def test_a_fix_whose_worker_died_keeps_what_it_fixed(planted):
    from dashboard.jobs.kinds.catalog_audit import audit_kept_when_lost

    job = catalog_audit_here(fix=True, grid=planted["grid"], pace=FAST)

    assert sorted(audit_kept_when_lost(job).fixed) == sorted(job.outcome.fixed)


def test_finding_5_an_orphan_taken_a_moment_ago_is_not_freed(planted):
    Deployment.objects.filter(pk=planted["gone"].pk).update(started_at=timezone.now())

    result = _audit(planted["grid"], fix=True)

    orphan = next(f for f in result.findings if f.kind == "orphan")
    assert not orphan.fixable and "CATALOG_AUDIT_ORPHAN_GRACE" in orphan.words
    assert Slice.objects.get(node=planted["node"], index=1).state == Slice.State.DEPLOYED


def test_finding_3_a_foreign_vm_never_takes_a_held_slice(planted):
    from dashboard.deployments.services.holds import hold_create

    node = planted["node"]
    free = list(
        Slice.objects.filter(node=node, state=Slice.State.FREE).order_by("index").values_list("index", flat=True)
    )
    for index in free:
        hold_create(node_id=1774, slice_index=index, marketplace_id=f"buyer-{index}", ttl_seconds=600)
    Node.objects.filter(pk=node.pk).update(slices_free=len(free))

    result = _audit(planted["grid"], fix=True)

    foreign = next(f for f in result.findings if f.kind == "foreign")
    assert not foreign.fixable and "no free slice is left" in foreign.words
    assert Slice.objects.filter(node=node, index__in=free, state=Slice.State.FREE).count() == len(free)


def test_finding_4_a_report_of_a_vm_the_audit_counted_moves_its_count(planted):
    from dashboard.deployments.services.outcomes import deployment_outcome_record

    _audit(planted["grid"], fix=True)
    counted = Deployment.objects.get(state=Deployment.State.DEPLOYED, grid_workload_id=planted["foreign"].workload_id)
    free = Slice.objects.filter(node=planted["node"], state=Slice.State.FREE).exclude(index=counted.slice_index)
    reported = free.order_by("-index").first().index

    recorded = deployment_outcome_record(
        node_id=1774,
        slice_index=reported,
        marketplace_id="market-7",
        outcome="deployed",
        at=timezone.now(),
        workload_id=planted["foreign"].workload_id,
    )

    assert recorded.deployment.slice_index == reported
    assert Slice.objects.get(node=planted["node"], index=counted.slice_index).state == Slice.State.FREE
    live = Deployment.objects.filter(state=Deployment.State.DEPLOYED, grid_workload_id=planted["foreign"].workload_id)
    assert list(live.values_list("slice_index", flat=True)) == [reported]
    assert [f.kind for f in _audit(planted["grid"]).findings] == []
