"""Bulk re-register: every stale node (or one farm's), each in its own short transaction."""

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.models import Job, Node, Slice
from dashboard.services.jobs import BULK_GRID_DOWN_AFTER, job_claim, job_execute, job_request


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
