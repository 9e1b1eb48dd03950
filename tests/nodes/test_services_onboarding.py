"""Adding farms and node ids from the grid: paged reads, one commit per page, idempotent."""

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.capacity import GiB
from dashboard.grid.paging import PageRead
from dashboard.grid.types import GridUnavailable
from dashboard.models import AuditEvent, Node, Slice
from dashboard.nodes.services.onboarding import OnboardError, OnboardRequest, OnboardStopped, grid_onboard


@pytest.fixture
def farms(sim_node, settings):
    """Farm 4242 with 7 nodes (ids 1-7), farm 4243 with 3 (ids 11-13); node 5 is down. Pages of 3."""
    settings.GRID_PAGE_SIZE = 3
    for node_id in range(1, 8):
        sim_node(
            node_id,
            register=False,
            cru=8,
            mru=31 * GiB,
            sru=int(931.5 * GiB),
            farm_id=4242,
            farm_name="big",
            status="down" if node_id == 5 else "up",
        )
    for node_id in range(11, 14):
        sim_node(node_id, register=False, cru=4, mru=16 * GiB, sru=500 * GiB, farm_id=4243)
    return sim_node.grid


def onboard(grid, **request):
    return grid_onboard(request=OnboardRequest(**request), grid=grid)


def registered() -> set[int]:
    return set(Node.objects.values_list("grid_id", flat=True))


@pytest.mark.django_db
def test_it_registers_every_node_of_the_farms_with_deployable_slices(farms):
    result = onboard(farms, farm_ids=(4242, 4243))
    assert registered() == {1, 2, 3, 4, 5, 6, 7, 11, 12, 13}
    assert (result.registered, result.refreshed, result.finished) == (10, 0, True)
    assert result.deployable == sum(Node.objects.values_list("deployable", flat=True)) > 0


@pytest.mark.django_db
def test_it_reads_pages_until_a_short_one(farms):
    result = onboard(farms, farm_ids=(4242, 4243))
    assert result.reads == 4  # 3 + 3 + 3 + 1 nodes


@pytest.mark.django_db
def test_it_keeps_when_it_read_and_when_the_node_reported(farms):
    onboard(farms, farm_ids=(4242,))
    node = Node.objects.get(grid_id=1)
    assert node.seen_at > timezone.now() - timedelta(minutes=1)
    assert node.reported_at is not None and node.reported_at > timezone.now() - timedelta(minutes=1)


@pytest.mark.django_db
def test_it_takes_only_the_status_asked_for(farms):
    onboard(farms, farm_ids=(4242,), status="up")
    assert registered() == {1, 2, 3, 4, 6, 7}


@pytest.mark.django_db
def test_it_registers_new_nodes_with_the_chosen_policy(farms):
    onboard(farms, farm_ids=(4243,), policy="legacy")
    assert set(Node.objects.values_list("carved_policy_name", flat=True)) == {"legacy"}


@pytest.mark.django_db
def test_a_second_run_carves_nothing_again(farms):
    onboard(farms, farm_ids=(4242, 4243))
    slices = list(Slice.objects.order_by("pk").values_list("pk", "node_id", "sru"))
    again = onboard(farms, farm_ids=(4242, 4243))
    assert (again.registered, again.refreshed, again.changed) == (0, 10, 0)
    assert list(Slice.objects.order_by("pk").values_list("pk", "node_id", "sru")) == slices


@pytest.mark.django_db
def test_a_known_node_gets_its_new_reading_and_figures(farms):
    onboard(farms, farm_ids=(4242,))
    farms.set_status(2, "down")
    result = onboard(farms, farm_ids=(4242,))
    node = Node.objects.get(grid_id=2)
    assert (result.changed, node.status, node.phantom_reasons) == (1, "down", {"down": node.slices_free})


@pytest.mark.django_db
def test_a_dry_run_writes_nothing_and_says_what_it_would_carve(farms):
    result = onboard(farms, farm_ids=(4242,), dry_run=True)
    assert (registered(), result.registered, result.new_nodes[0]["deployable"]) == (set(), 7, 6)


@pytest.mark.django_db
def test_it_reads_on_its_own_a_node_the_page_omitted(farms):
    class Omitting:
        def __init__(self, grid):
            self.grid, self.single = grid, []

        def nodes(self, **kwargs):
            page = self.grid.nodes(**kwargs)
            return type(page)(nodes=tuple(n for n in page.nodes if n.node_id != 12), page=page.page, size=page.size)

        def node(self, node_id):
            self.single.append(node_id)
            return self.grid.node(node_id)

    grid = Omitting(farms)
    result = onboard(grid, node_ids=(11, 12, 13, 99))
    assert (registered(), grid.single, result.not_found) == ({11, 12, 13}, [12, 99], [99])


@pytest.mark.django_db
def test_a_failed_read_keeps_the_pages_before_it_and_a_second_run_finishes(farms):
    def failing_on_page_3():
        from dashboard.grid.paging import farm_pages

        for number, read in enumerate(farm_pages(farms, farm_ids=[4242], size=3), start=1):
            if number == 3:
                raise GridUnavailable("the grid proxy answered 502 Bad Gateway")
            yield read

    with pytest.raises(OnboardStopped) as stopped:
        grid_onboard(request=OnboardRequest(farm_ids=(4242,)), grid=farms, reads=failing_on_page_3())
    assert registered() == {1, 2, 3, 4, 5, 6}
    assert "502" in stopped.value.result.stopped and stopped.value.result.reads == 2
    again = onboard(farms, farm_ids=(4242,))
    assert (registered(), again.registered, again.refreshed) == ({1, 2, 3, 4, 5, 6, 7}, 1, 6)


@pytest.mark.django_db
def test_it_reports_malformed_entries_and_goes_on(farms):
    reads = iter([PageRead(what="page 1", nodes=(farms.node(1),), skipped=(("position 2", "status is null"),))])
    result = grid_onboard(request=OnboardRequest(farm_ids=(4242,)), grid=farms, reads=reads)
    assert (result.registered, result.skipped) == (1, [["position 2", "status is null"]])


@pytest.mark.django_db
def test_it_audits_the_run(farms):
    onboard(farms, farm_ids=(4243,))
    assert AuditEvent.objects.filter(action="nodes onboarded").count() == 1


@pytest.mark.parametrize(
    "request_", [{}, {"farm_ids": (0,)}, {"node_ids": ("7",)}, {"farm_ids": (1,), "status": "sleeping"}]
)
def test_it_refuses_a_request_that_names_nothing_real(request_):
    with pytest.raises(OnboardError):
        OnboardRequest(**request_)


@pytest.mark.django_db
def test_it_refuses_an_unknown_policy():
    with pytest.raises(OnboardError, match="unknown policy"):
        OnboardRequest(farm_ids=(1,), policy="no-such-policy")


def _told(live):
    # A disk-bound node (90 GiB of SSD), whose first pool (1 GiB) cannot hold the zos-cache.
    return replace(live, total=replace(live.total, sru=90 * GiB), pools_sru=(GiB, 89 * GiB))


class _PoolsTold:
    """The farms' grid, where node 3's reading carries SSD pools whose first is too small for the zos-cache
    (a node that answered its pools wrongly): a registration refuses them and carves it as for unknown pools."""

    def __init__(self, grid):
        self.grid = grid

    def nodes(self, **kwargs):
        page = self.grid.nodes(**kwargs)
        told = tuple(_told(n) if n.node_id == 3 else n for n in page.nodes)
        return type(page)(nodes=told, page=page.page, size=page.size)

    def __getattr__(self, name):
        return getattr(self.grid, name)


@pytest.mark.django_db
def test_a_preview_counts_what_the_run_then_registers_node_by_node(farms):
    # One registration path (nodes.services.registration.registration_carve, through the page's plan): the
    # preview the operator confirms is the run's own checks and carve, never a carve of its own.
    grid = _PoolsTold(farms)
    preview = onboard(grid, farm_ids=(4242,), dry_run=True)
    run = onboard(grid, farm_ids=(4242,))
    assert (preview.registered, preview.deployable, preview.new_nodes) == (
        run.registered,
        run.deployable,
        run.new_nodes,
    )
    print(
        "DBG",
        preview.new_nodes,
        run.new_nodes,
        preview.left_out if hasattr(preview, "left_out") else "",
        Node.objects.get(grid_id=3).pools_refused,
        Node.objects.get(grid_id=3).pools_sru,
    )
    assert Node.objects.get(grid_id=3).pools_refused
