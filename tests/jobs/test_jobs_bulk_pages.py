"""Bulk re-register reads pages, not nodes: one GET /nodes by id per batch, one by one only what a page lacks."""

import datetime as dt
import time

import pytest
from django.utils import timezone

from dashboard.catalogs.services.reregister import BulkLimits
from dashboard.grid.types import GridUnavailable
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import Job, Node
from tests.bulk_runs import ONE_BATCH


class CountingGrid:
    """The simulated grid behind a proxy-like face: counts page and node reads, can omit nodes from
    pages, fail pages, or be slow to answer for one node."""

    def __init__(self, grid, *, omit=(), pages_fail=False, slow_node=None, slow_s=0.0, sleep=time.sleep):
        self.grid, self.omit, self.pages_fail = grid, set(omit), pages_fail
        self.slow_node, self.slow_s, self.sleep = slow_node, slow_s, sleep
        self.pages: list[list[int]] = []
        self.single: list[int] = []

    def nodes(self, **kwargs):
        self.pages.append(sorted(kwargs.get("node_ids") or []))
        if self.pages_fail:
            raise GridUnavailable("the proxy answered 502 for the page")
        page = self.grid.nodes(**kwargs)
        return type(page)(
            nodes=tuple(n for n in page.nodes if n.node_id not in self.omit),
            page=page.page,
            size=page.size,
            skipped=page.skipped,
        )

    def node(self, node_id):
        self.single.append(node_id)
        if node_id == self.slow_node:
            self.sleep(self.slow_s)
        return self.grid.node(node_id)

    def __getattr__(self, name):
        return getattr(self.grid, name)


@pytest.fixture
def counting_grid(legacy_fleet):
    """counting_grid(**options) -> CountingGrid over this test's simulated grid; `bulk(grid)` reads it."""

    def make(**options):
        return CountingGrid(legacy_fleet.grid, **options)

    return make


def bulk(grid, *, limits: BulkLimits = ONE_BATCH, **kwargs) -> Job:
    """A bulk job run in this process on `grid`, through the run's own seams (its grid and limits)."""
    job = job_claim(job_id=job_request(kind=Job.Kind.BULK_REREGISTER, **kwargs).job.pk)
    job_execute(job=job, grid=grid, limits=limits)
    job.refresh_from_db()
    return job


def zos_carved() -> set[int]:
    return set(Node.objects.filter(carved_policy_name="zos").values_list("grid_id", flat=True))


@pytest.mark.django_db
def test_it_reads_a_batch_of_30_nodes_in_one_request(legacy_fleet, counting_grid):
    legacy_fleet(30)
    grid = counting_grid()
    job = bulk(grid)
    assert (grid.pages, grid.single) == ([list(range(1, 31))], [])
    assert (job.result["pages"], job.result["read_alone"], job.result["requests"], job.result["reregistered"]) == (
        1,
        0,
        1,
        30,
    )


@pytest.mark.django_db
def test_it_reads_a_node_the_page_omits_on_its_own(legacy_fleet, counting_grid):
    legacy_fleet(6)
    grid = counting_grid(omit={4})
    job = bulk(grid)
    assert grid.single == [4] and zos_carved() == set(range(1, 7))
    assert job.result["reads"] == "read from the grid in 1 page(s) and 1 node(s) on their own"


@pytest.mark.django_db
def test_it_reads_each_node_of_a_page_that_fails_on_its_own(legacy_fleet, counting_grid):
    legacy_fleet(4)
    grid = counting_grid(pages_fail=True)
    job = bulk(grid)
    assert grid.single == [1, 2, 3, 4] and zos_carved() == {1, 2, 3, 4}
    assert (job.state, job.result["pages_failed"], job.result["read_alone"]) == (Job.State.SUCCEEDED, 1, 4)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "clock", ["moved", pytest.param("real", marks=pytest.mark.slow)], ids=["the clock moved", "the real clock"]
)
def test_it_reads_a_page_again_when_its_plans_are_past_the_reading_age(
    legacy_fleet, counting_grid, settings, monkeypatch, clock
):
    settings.BULK_READING_MAX_AGE = 0.3
    legacy_fleet(5)
    sleep = time.sleep
    if clock == "moved":  # the run's clock (timezone.now) jumps ahead instead of the test waiting
        ahead, now = [dt.timedelta(0)], timezone.now
        monkeypatch.setattr(timezone, "now", lambda: now() + ahead[0])

        def sleep(seconds):
            ahead[0] += dt.timedelta(seconds=seconds)

    # Node 5 is missing from the page and slow on its own: the page's four plans are too old after it.
    grid = counting_grid(omit={5}, slow_node=5, slow_s=0.5, sleep=sleep)
    job = bulk(grid)
    assert grid.pages == [[1, 2, 3, 4, 5], [1, 2, 3, 4]] and job.result["reread"] == 4
    assert zos_carved() == {1, 2, 3, 4, 5}


@pytest.mark.django_db
def test_it_reads_a_fleet_in_farm_order_a_page_per_batch(legacy_fleet, counting_grid):
    legacy_fleet(10, first=1, farm_id=2)
    legacy_fleet(10, first=100, farm_id=1)
    grid = counting_grid()
    bulk(grid, limits=BulkLimits(chunk=10, progress_steps=1))
    assert grid.pages == [list(range(100, 110)), list(range(1, 11))] and grid.single == []


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_reads_a_node_the_page_omits_on_its_own(
    legacy_fleet, counting_grid, live_worker, job_finished, monkeypatch
):
    legacy_fleet(12)
    grid = counting_grid(omit={9})
    # The worker runs the job as the product does (no seams passed): it reads the configured grid.
    monkeypatch.setattr("dashboard.catalogs.services.reregister.bulk.get_grid", lambda: grid)
    job = job_finished(job_request(kind=Job.Kind.BULK_REREGISTER).job, timeout=60)
    assert (job.state, job.result["reregistered"], job.result["failures"]) == (Job.State.SUCCEEDED, 12, []), job.error
    assert grid.single == [9] and 9 in zos_carved()
    assert job.result["read_alone"] == 1 and job.result["pages"] == len(grid.pages)


@pytest.mark.django_db
def test_it_asks_for_no_more_nodes_a_page_than_the_proxy_serves(legacy_fleet, counting_grid, settings):
    settings.GRID_PAGE_SIZE = 4
    legacy_fleet(10)
    grid = counting_grid()
    job = bulk(grid)
    assert grid.pages == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]] and grid.single == []
    assert job.result["reregistered"] == 10


# --- a policy edit committed during the run (issue 22, finding 6) ---------------------------------


class EditingGrid(CountingGrid):
    """The grid, and an admin who saves a policy edit while the n-th page is being read."""

    def __init__(self, grid, *, on_page: int, edit):
        super().__init__(grid)
        self.on_page, self.edit = on_page, edit

    def nodes(self, **kwargs):
        if len(self.pages) + 1 == self.on_page:
            self.edit()
        return super().nodes(**kwargs)


@pytest.fixture
def fleet_default():
    from dashboard import capacity
    from dashboard.models import Policy
    from dashboard.policies.services.policy import policy_create

    return policy_create(
        name="fleet", scope="fleet", parameters=Policy.parameters_from(capacity.PROFILES["zos"]), source="command"
    )


def smaller_slices(policy):
    from dashboard.capacity import GiB
    from dashboard.policies.services.policy import policy_update

    return lambda: policy_update(policy=policy, parameters={"slice_mru": 2 * GiB}, source="command")


@pytest.mark.django_db
def test_nodes_planned_before_a_policy_edit_are_planned_again_with_it(legacy_fleet, fleet_default):
    legacy_fleet(6)
    grid = EditingGrid(legacy_fleet.grid, on_page=1, edit=smaller_slices(fleet_default))
    job = bulk(grid)
    assert job.state == Job.State.SUCCEEDED
    assert set(Node.objects.values_list("carved_policy_version", flat=True)) == {2}
    assert not Node.objects.filter(stale=True).exists()
    assert any("6 node(s) planned again" in note and "fleet v1 -> fleet v2" in note for note in job.outcome.notes)


@pytest.mark.django_db
def test_nodes_written_before_a_policy_edit_are_said_to_be_stale_again(legacy_fleet, fleet_default):
    legacy_fleet(6)  # six batches of one node
    grid = EditingGrid(legacy_fleet.grid, on_page=3, edit=smaller_slices(fleet_default))
    job = bulk(grid, limits=BulkLimits(chunk=1, progress_steps=6))
    versions = list(Node.objects.order_by("grid_id").values_list("carved_policy_version", flat=True))
    assert versions == [1, 1, 2, 2, 2, 2]
    assert Node.objects.filter(stale=True).count() == 2
    notes = " ".join(job.outcome.notes)
    assert "1 node(s) planned again" in notes and "2 node(s) re-registered by this run are stale again" in notes
