"""Onboarding with a real worker against the Grid Proxy client and a loopback proxy (simhttp)."""

import threading

import pytest
from django.db.models import Count

from dashboard.capacity import GiB
from dashboard.grid.types import GridUnavailable
from dashboard.jobs.services.jobs import job_request
from dashboard.models import Job, Node
from dashboard.nodes.services.onboarding import OnboardRequest
from sim.grid import SimulatedGrid, serve_simulator

PAGE = 4


class FlakyProxy:
    """The simulated grid behind simhttp, with an outage on one page and nodes a page leaves out."""

    def __init__(self, grid: SimulatedGrid):
        self.grid = grid
        self.failing_page: int | None = None
        self.omitted: set[int] = set()
        self.read_alone: list[int] = []

    def nodes(self, **kwargs):
        if kwargs.get("page") == self.failing_page:
            raise GridUnavailable(f"simulated outage on page {self.failing_page}")
        page = self.grid.nodes(**kwargs)
        return type(page)(
            nodes=tuple(n for n in page.nodes if n.node_id not in self.omitted), page=page.page, size=page.size
        )

    def node(self, node_id):
        self.read_alone.append(node_id)
        return self.grid.node(node_id)


@pytest.fixture
def proxy(simgrid_path, settings):
    """Farm 4242 with 14 nodes (ids 1-14) behind the real Grid Proxy client, pages of 4."""
    grid = SimulatedGrid(simgrid_path)
    for node_id in range(1, 15):
        grid.add_node(node_id, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana")
    flaky = FlakyProxy(grid)
    server = serve_simulator(flaky)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    settings.GRID_BACKEND = "gridproxy"
    settings.GRID_PROXY_URL = f"http://127.0.0.1:{server.server_address[1]}"
    settings.GRID_RETRIES = 0
    settings.GRID_PAGE_SIZE = PAGE
    yield flaky
    server.shutdown()
    server.server_close()


def onboarding(**request) -> Job:
    return job_request(
        kind=Job.Kind.ONBOARD, source="command", parameters=OnboardRequest(**request).as_parameters()
    ).job


def consistent() -> bool:
    """Every registered node holds the catalog it was carved with and figures that count it."""
    nodes = Node.objects.annotate(n=Count("slices"))
    return all(n.n == n.carved_deployable == n.slices_free and n.seen_at and n.reported_at for n in nodes)


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_failed_page_3_keeps_pages_1_and_2_says_so_and_a_second_run_finishes(proxy, live_worker, job_finished):
    proxy.failing_page = 3
    first = job_finished(onboarding(farm_ids=(4242,)))
    assert first.state == Job.State.FAILED
    assert set(Node.objects.values_list("grid_id", flat=True)) == set(range(1, 2 * PAGE + 1)) and consistent()
    assert "page 3 of farm 4242" in first.error and "simulated outage on page 3" in first.error
    assert "run it again to finish the rest" in first.error
    assert (first.result["reads"], first.result["registered"], first.result["finished"]) == (2, 2 * PAGE, False)

    proxy.failing_page = None
    second = job_finished(onboarding(farm_ids=(4242,)))
    assert second.state == Job.State.SUCCEEDED, second.error
    assert (second.result["registered"], second.result["refreshed"]) == (14 - 2 * PAGE, 2 * PAGE)
    assert Node.objects.count() == 14 and consistent()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_node_a_page_omits_is_read_on_its_own(proxy, live_worker, job_finished):
    proxy.omitted = {6}
    job = job_finished(onboarding(node_ids=(2, 6, 9, 99)))
    assert job.state == Job.State.SUCCEEDED, job.error
    assert set(Node.objects.values_list("grid_id", flat=True)) == {2, 6, 9}
    assert (proxy.read_alone, job.result["not_found"]) == ([6, 99], [99])


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_second_run_changes_no_catalog(proxy, live_worker, job_finished):
    job_finished(onboarding(farm_ids=(4242,)))
    catalogs = sorted(Node.objects.values_list("grid_id", "catalog_generation", "carved_deployable"))
    again = job_finished(onboarding(farm_ids=(4242,)))
    assert (again.result["registered"], again.result["refreshed"], again.result["changed"]) == (0, 14, 0)
    assert sorted(Node.objects.values_list("grid_id", "catalog_generation", "carved_deployable")) == catalogs
