"""Bulk re-register: every stale node (or one farm's), a batch of nodes per short transaction."""

import time

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from dashboard.catalogs.services.reregister import BULK_GRID_DOWN_AFTER, BulkHooks, BulkLimits
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import Job, Node, Slice
from tests.bulk_runs import ONE_BATCH, bulk, planned
from tests.conftest import legacy_fleet_build, rolled_back_after


def carved_with(policy: str) -> set[int]:
    return set(Node.objects.filter(carved_policy_name=policy).values_list("grid_id", flat=True))


@pytest.mark.worker
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_recarves_200_stale_nodes_and_reports_the_few_that_failed(legacy_fleet, live_worker, job_finished):
    legacy_fleet(205)
    for gone in (17, 101, 199):
        legacy_fleet.grid.remove_node(gone)
    started = time.monotonic()
    job = job_finished(job_request(kind=Job.Kind.BULK_REREGISTER).job, timeout=120)
    took = time.monotonic() - started
    assert (job.state, job.result["stale"], job.result["reregistered"]) == (Job.State.SUCCEEDED, 205, 202), job.error
    assert [f["node_id"] for f in job.result["failures"]] == [17, 101, 199]
    assert carved_with("legacy") == {17, 101, 199} and len(carved_with("zos")) == 202
    assert took < 60, f"200 nodes took {took:.1f} s"


@pytest.mark.django_db
def test_it_names_each_failed_node_with_the_grids_words(legacy_fleet):
    legacy_fleet(3)
    legacy_fleet.grid.remove_node(2)
    job = bulk()
    assert job.result["failures"] == [{"node_id": 2, "error": job.result["failures"][0]["error"]}]
    assert "2" in job.result["failures"][0]["error"] and job.state == Job.State.SUCCEEDED


@pytest.mark.django_db
def test_it_only_takes_the_farm_it_was_given(legacy_fleet):
    legacy_fleet(3, first=1, farm_id=1)
    legacy_fleet(3, first=10, farm_id=2)
    job = bulk(farm_id=2)
    assert (job.result["reregistered"], carved_with("zos")) == (3, {10, 11, 12})


@pytest.mark.django_db
def test_it_leaves_current_catalogs_alone(legacy_fleet):
    legacy_fleet(4)
    bulk()
    slices = list(Slice.objects.order_by("pk").values_list("pk", "sru"))
    again = bulk()
    assert (again.result["stale"], again.result["nodes"]) == (0, [])
    assert list(Slice.objects.order_by("pk").values_list("pk", "sru")) == slices
    assert again.result["notes"] == ["no stale catalog"]


@pytest.mark.django_db
def test_it_dry_runs_without_changing_any_catalog(legacy_fleet):
    legacy_fleet(5)
    before = list(Slice.objects.order_by("pk").values_list("pk", "node_id", "sru"))
    job = bulk(dry_run=True)
    assert (job.state, job.result["dry_run"], job.result["reregistered"]) == (Job.State.SUCCEEDED, True, 5)
    assert list(Slice.objects.order_by("pk").values_list("pk", "node_id", "sru")) == before
    assert carved_with("zos") == set()


@pytest.mark.slow
@pytest.mark.django_db
def test_it_stops_when_the_grid_is_unreachable_node_after_node(legacy_fleet, gridproxy_down):
    legacy_fleet(BULK_GRID_DOWN_AFTER + 3)
    job = bulk()
    assert job.state == Job.State.FAILED
    assert job.error.startswith(f"the grid is unreachable: {BULK_GRID_DOWN_AFTER} nodes in a row could not be read")
    assert len(job.result["failures"]) == BULK_GRID_DOWN_AFTER and carved_with("zos") == set()


@pytest.mark.django_db
def test_it_records_progress_per_node(legacy_fleet):
    legacy_fleet(7)
    job = bulk()
    assert (job.progress_total, job.progress_done, job.result["words"]) == (
        7,
        7,
        "re-registered 7 of 7 stale node(s); 0 already up to date; 0 failed",
    )


@pytest.mark.slow
@pytest.mark.django_db
def test_it_needs_a_fixed_number_of_queries_per_node_whatever_the_slices(legacy_fleet):
    from dashboard.capacity import GiB

    legacy_fleet(10, first=1, mru=16 * GiB)  # 3 legacy slices each
    with CaptureQueriesContext(connection) as few_slices:
        bulk()
    legacy_fleet(10, first=100, mru=256 * GiB, sru=4000 * GiB)  # 63 legacy slices each
    with CaptureQueriesContext(connection) as many_slices:
        bulk()
    assert len(many_slices) == len(few_slices)


SAMPLE_OF_5 = BulkLimits(sample=5)


@pytest.fixture(scope="class")
def bulk_run_of_210_with_3_gone(django_db_setup, django_db_blocker, tmp_path_factory):
    """210 stale nodes, 3 of them gone from the grid, and one bulk run over them (a sample of 5):
    built and run once for the class, rolled back after it (tests/conftest.py rolled_back_after)."""
    from dashboard.capacity import GiB
    from sim.grid import SimulatedGrid

    simgrid = tmp_path_factory.mktemp("bulk-210") / "simgrid.sqlite3"
    with override_settings(SIMGRID_PATH=simgrid, GRID_BACKEND="simulator"), rolled_back_after(django_db_blocker):
        grid = SimulatedGrid(simgrid)
        legacy_fleet_build(grid, 210, first=1, farm_id=1, mru=16 * GiB, sru=500 * GiB)
        for gone in (3, 150, 209):
            grid.remove_node(gone)
        before = Slice.objects.exclude(node__grid_id__in=(3, 150, 209)).count()
        yield bulk(limits=SAMPLE_OF_5), before


@pytest.fixture
def fleet_210_with_3_gone(bulk_run_of_210_with_3_gone, db):
    return bulk_run_of_210_with_3_gone


@pytest.mark.django_db
class TestABulkRunOf210Nodes:
    @pytest.mark.slow
    def test_it_keeps_only_a_sample_of_the_changed_nodes(self, fleet_210_with_3_gone):
        result = fleet_210_with_3_gone[0].result
        assert [n["node_id"] for n in result["nodes"]] == [1, 2, 4, 5, 6]
        assert (result["nodes_total"], result["nodes_truncated"]) == (207, True)

    def test_it_keeps_every_failure_and_the_counts_beside_the_sample(self, fleet_210_with_3_gone):
        result = fleet_210_with_3_gone[0].result
        assert [f["node_id"] for f in result["failures"]] == [3, 150, 209]
        assert (result["stale"], result["seen"], result["reregistered"], result["unchanged"], result["failed"]) == (
            210,
            210,
            207,
            0,
            3,
        )

    def test_it_totals_the_slices_and_the_fleet_figures_of_every_node_not_only_the_sample(self, fleet_210_with_3_gone):
        job, slices_before = fleet_210_with_3_gone
        result = job.result
        slices_after = Slice.objects.exclude(node__grid_id__in=(3, 150, 209)).count()
        assert (result["fleet"]["before"]["slices"], result["fleet"]["after"]["slices"]) == (
            slices_before,
            slices_after,
        )
        assert result["slices"]["added"] - result["slices"]["removed"] == slices_after - slices_before
        assert result["slices"]["kept"] + result["slices"]["added"] == slices_after


@pytest.mark.django_db
def test_it_counts_the_failures_past_the_cap_without_listing_them(legacy_fleet):
    legacy_fleet(6)
    for gone in (1, 3, 4, 6):
        legacy_fleet.grid.remove_node(gone)
    result = bulk(limits=BulkLimits(failures_kept=2)).result
    assert ([f["node_id"] for f in result["failures"]], result["failures_more"], result["failed"]) == ([1, 3], 2, 4)
    assert result["words"].endswith("4 failed")


@pytest.mark.django_db
def test_it_keeps_the_result_the_same_size_whatever_the_number_of_nodes(legacy_fleet):
    import json

    legacy_fleet(10, first=1)
    ten = len(json.dumps(bulk(limits=SAMPLE_OF_5).result))
    legacy_fleet(60, first=100)
    sixty = len(json.dumps(bulk(limits=SAMPLE_OF_5).result))
    assert sixty - ten < 40, (ten, sixty)  # only the digits of the counts grow


@pytest.mark.django_db
def test_it_leaves_each_nodes_own_line_in_its_audit_trail(legacy_fleet):
    from dashboard.models import AuditEvent

    legacy_fleet(8)
    job = bulk(limits=SAMPLE_OF_5)
    events = list(AuditEvent.objects.filter(job=job, action="job.node-reregistered").order_by("node__grid_id"))
    assert [e.node.grid_id for e in events] == list(range(1, 9))
    assert events[7].detail["result"]["after"]["slices"] == Slice.objects.filter(node__grid_id=8).count()


# --- batches: one transaction per batch of nodes ---------------------------------------------------


def figures_current(node_ids) -> bool:
    from dashboard.figures.services.figures import figures_compute

    nodes = Node.objects.filter(grid_id__in=node_ids)
    stored = {n.pk: (n.slices_free, n.stale, n.effective_policy) for n in nodes}
    now = {pk: (f.slices_free, f.stale, f.effective_policy) for pk, f in figures_compute(nodes).items()}
    return stored == now and not any(stale for _free, stale, _policy in stored.values())


@pytest.mark.django_db
def test_it_replans_alone_a_node_whose_catalog_changed_between_its_plan_and_its_batch(legacy_fleet):
    from dashboard.models import AuditEvent

    legacy_fleet(5)
    rented = Slice.objects.get(node__grid_id=3, index=1)

    def rent(node):  # someone rents a free slice of node 3 after the bulk run planned it
        Slice.objects.filter(pk=rented.pk).update(state=Slice.State.RENTED, rented_by_twin_id=42)

    hooks, order = planned({3: rent})
    job = bulk(limits=ONE_BATCH, hooks=hooks)
    assert (job.state, job.result["reregistered"], job.result["failures"]) == (Job.State.SUCCEEDED, 5, [])
    assert order == [1, 2, 3, 4, 5, 3]  # node 3 alone planned again, after the batch
    assert Slice.objects.get(pk=rented.pk).state == Slice.State.RENTED  # the same row, kept
    assert carved_with("zos") == {1, 2, 3, 4, 5} and figures_current(range(1, 6))
    assert AuditEvent.objects.filter(job=job, action="job.node-reregistered").count() == 5


@pytest.mark.django_db
def test_it_applies_the_rest_of_a_batch_when_some_of_its_nodes_fail(legacy_fleet):
    from dashboard.capacity import CapacityError

    legacy_fleet(5)
    legacy_fleet.grid.remove_node(2)

    def refuse(node):
        raise CapacityError(f"node {node.grid_id}: the carve refused")

    hooks, _order = planned({4: refuse})
    job = bulk(limits=ONE_BATCH, hooks=hooks)
    failures = job.result["failures"]
    assert [f["node_id"] for f in failures] == [2, 4] and failures[1]["error"] == "node 4: the carve refused"
    assert carved_with("zos") == {1, 3, 5} and carved_with("legacy") == {2, 4}
    assert (job.state, job.result["reregistered"], job.result["failed"]) == (Job.State.SUCCEEDED, 3, 2)


@pytest.mark.django_db
def test_it_applies_a_batch_one_node_at_a_time_after_a_database_error(legacy_fleet):
    def write(plans):
        if len(plans) > 1:  # the batch, not a node on its own
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 / 0")

    legacy_fleet(4)
    job = bulk(limits=ONE_BATCH, hooks=BulkHooks(writing=write))
    assert (job.state, job.result["reregistered"], job.result["failures"]) == (Job.State.SUCCEEDED, 4, [])
    assert carved_with("zos") == {1, 2, 3, 4} and figures_current(range(1, 5))


@pytest.mark.django_db
def test_it_needs_the_same_queries_for_a_batch_of_5_nodes_as_for_one_of_50(legacy_fleet):
    legacy_fleet(5, first=1)
    with CaptureQueriesContext(connection) as five:
        assert bulk(limits=ONE_BATCH).result["reregistered"] == 5
    legacy_fleet(50, first=100)
    with CaptureQueriesContext(connection) as fifty:
        assert bulk(limits=ONE_BATCH).result["reregistered"] == 50
    assert len(fifty) == len(five), [q["sql"][:60] for q in fifty.captured_queries]


@pytest.mark.django_db
def test_it_stores_the_figures_of_every_node_it_recarves(legacy_fleet):
    legacy_fleet(12)
    Node.objects.update(stale=True, stale_reason="carved with legacy", effective_policy="")
    bulk()
    assert figures_current(range(1, 13))


@pytest.mark.django_db
def test_it_moves_its_progress_in_steps_on_a_small_run(legacy_fleet):
    written = []
    legacy_fleet(40)
    bulk(hooks=BulkHooks(progressed=lambda fields: written.append(fields.get("done"))))
    assert [done for done in written if done] == [4, 8, 12, 16, 20, 24, 28, 32, 36, 40]


@pytest.mark.django_db
def test_it_beats_while_it_reads_a_batch_from_a_slow_grid(legacy_fleet, settings):
    steps = []
    settings.JOB_HEARTBEAT_TIMEOUT = 0  # every read is overdue
    legacy_fleet(3)
    job = bulk(limits=ONE_BATCH, hooks=BulkHooks(progressed=lambda fields: steps.append(fields["step"])))
    assert job.steps[1]["step"].startswith("3 stale catalog(s)")  # what the hook saw was written too
    assert [s for s in steps if s.startswith("reading")] == ["reading nodes 1-3 from the grid, a page (0 of 3 done)"]


# --- a worker that dies mid-run ------------------------------------------------------------------


class WorkerDied(BaseException):
    """Stands for a SIGKILL between two batches: nothing after it runs, not even the job's own failure."""


@pytest.mark.django_db
def test_a_bulk_job_whose_worker_died_keeps_the_count_of_what_was_done(legacy_fleet, support_client, settings):
    from datetime import timedelta

    from django.urls import reverse
    from django.utils import timezone

    from dashboard.jobs.services.job_reaper import jobs_reap

    legacy_fleet(20)  # batches of 2 nodes
    legacy_fleet.grid.remove_node(3)

    def die(done):
        if done >= 8:
            raise WorkerDied

    job = job_claim(job_id=job_request(kind=Job.Kind.BULK_REREGISTER).job.pk)
    with pytest.raises(WorkerDied):
        job_execute(job=job, hooks=BulkHooks(batch_done=die))
    later = timezone.now() + timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT + 1)
    assert jobs_reap(now=later) == 1  # the reaper wins: no worker takes the job over
    job.refresh_from_db()
    words = "7 of 20 stale node(s) re-registered before the worker died; 0 already up to date; 1 failed"
    assert (job.state, job.result["stale"], job.result["reregistered"], job.result["failed"]) == (
        Job.State.FAILED,
        20,
        7,
        1,
    )
    assert job.result["words"].startswith(words) and words in job.error
    assert carved_with("zos") == {1, 2, 4, 5, 6, 7, 8}
    assert words in support_client.get(reverse("job", args=[job.pk])).content.decode()
