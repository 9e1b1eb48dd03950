"""Bulk re-register: every stale node (or one farm's), each in its own short transaction."""

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.models import Job, Node, Slice
from dashboard.services.jobs import job_claim, job_execute, job_request
from dashboard.services.reregister import BULK_GRID_DOWN_AFTER


def bulk(**kwargs) -> Job:
    job = job_claim(job_id=job_request(kind=Job.Kind.BULK_REREGISTER, **kwargs).job.pk)
    job_execute(job=job)
    job.refresh_from_db()
    return job


def carved_with(policy: str) -> set[int]:
    return set(Node.objects.filter(carved_policy_name=policy).values_list("node_id", flat=True))


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
        7, 7, "re-registered 7 of 7 stale node(s); 0 already up to date; 0 failed"
    )


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


@pytest.fixture
def small_sample(monkeypatch):
    from dashboard.services import reregister

    monkeypatch.setattr(reregister, "BULK_SAMPLE", 5)
    return 5


@pytest.fixture
def fleet_210_with_3_gone(legacy_fleet, small_sample):
    legacy_fleet(210)
    for gone in (3, 150, 209):
        legacy_fleet.grid.remove_node(gone)
    before = Slice.objects.exclude(node__node_id__in=(3, 150, 209)).count()
    return bulk(), before


@pytest.mark.django_db
def test_it_keeps_only_a_sample_of_the_changed_nodes(fleet_210_with_3_gone):
    result = fleet_210_with_3_gone[0].result
    assert [n["node_id"] for n in result["nodes"]] == [1, 2, 4, 5, 6]
    assert (result["nodes_total"], result["nodes_truncated"]) == (207, True)


@pytest.mark.django_db
def test_it_keeps_every_failure_and_the_counts_beside_the_sample(fleet_210_with_3_gone):
    result = fleet_210_with_3_gone[0].result
    assert [f["node_id"] for f in result["failures"]] == [3, 150, 209]
    assert (result["stale"], result["seen"], result["reregistered"], result["unchanged"], result["failed"]) == (
        210, 210, 207, 0, 3
    )


@pytest.mark.django_db
def test_it_totals_the_slices_and_the_fleet_figures_of_every_node_not_only_the_sample(fleet_210_with_3_gone):
    job, slices_before = fleet_210_with_3_gone
    result = job.result
    slices_after = Slice.objects.exclude(node__node_id__in=(3, 150, 209)).count()
    assert (result["fleet"]["before"]["slices"], result["fleet"]["after"]["slices"]) == (slices_before, slices_after)
    assert result["slices"]["added"] - result["slices"]["removed"] == slices_after - slices_before
    assert result["slices"]["kept"] + result["slices"]["added"] == slices_after


@pytest.mark.django_db
def test_it_counts_the_failures_past_the_cap_without_listing_them(legacy_fleet, monkeypatch):
    from dashboard.services import reregister

    monkeypatch.setattr(reregister, "BULK_FAILURES_KEPT", 2)
    legacy_fleet(6)
    for gone in (1, 3, 4, 6):
        legacy_fleet.grid.remove_node(gone)
    result = bulk().result
    assert ([f["node_id"] for f in result["failures"]], result["failures_more"], result["failed"]) == ([1, 3], 2, 4)
    assert result["words"].endswith("4 failed")


@pytest.mark.django_db
def test_it_keeps_the_result_the_same_size_whatever_the_number_of_nodes(legacy_fleet, small_sample):
    import json

    legacy_fleet(10, first=1)
    ten = len(json.dumps(bulk().result))
    legacy_fleet(60, first=100)
    sixty = len(json.dumps(bulk().result))
    assert sixty - ten < 40, (ten, sixty)  # only the digits of the counts grow


@pytest.mark.django_db
def test_it_leaves_each_nodes_own_line_in_its_audit_trail(legacy_fleet, small_sample):
    from dashboard.models import AuditEvent

    legacy_fleet(8)
    job = bulk()
    events = list(AuditEvent.objects.filter(job=job, action="job.node-reregistered").order_by("node__node_id"))
    assert [e.node.node_id for e in events] == list(range(1, 9))
    assert events[7].detail["result"]["after"]["slices"] == Slice.objects.filter(node__node_id=8).count()
