"""The farm totals stay what summing the nodes gives, whoever wrote the nodes and how: read at once
(a farm written since its refresh is summed live) and kept (figures.services.farm_totals, run on commit).

The independent answer is the same sums made over the Node rows at the moment of reading.
"""

import threading
from dataclasses import replace

import pytest
from django.db import connection, connections, transaction

from dashboard.figures.selectors.farm_totals import AGGREGATES, FarmSums, farm_totals, fleet_totals, summed
from dashboard.figures.selectors.tiers import TIER_FIGURES, TIERS, tier_sums
from dashboard.figures.services.farm_totals import (
    _refresh_committed,
    farm_totals_refresh,
    farm_totals_refresh_on_commit,
)
from dashboard.figures.services.figures import figures_refresh
from dashboard.models import FarmTotals, FarmTotalsChanged, Node, Slice
from tests.node_writes import WRITES, reading_written

pytestmark = pytest.mark.django_db


def summed_now() -> list[FarmSums]:
    return summed(Node.objects.all())


def kept_rows() -> list[FarmSums]:
    """What FarmTotals holds, as FarmSums (farms with nodes only)."""
    names = [f for f in FarmSums.__dataclass_fields__ if f != "held"]  # holds are read live, never kept
    rows = FarmTotals.objects.filter(nodes__gt=0).order_by("farm_id").values_list(*names)
    return [FarmSums(**dict(zip(names, row, strict=True))) for row in rows]


def test_the_tiers_are_the_fleet_pages():
    from dashboard.figures.selectors import farm_totals as totals

    # One definition (figures.selectors.tiers): the farm totals sum each tier with the fleet page's own filter.
    assert {TIER_FIGURES[t]: str(AGGREGATES[TIER_FIGURES[t]]) for t in TIERS} == {
        name: str(value) for name, value in tier_sums().items()
    }
    assert not hasattr(totals, "NOW")
    assert set(AGGREGATES) == {f for f in FarmSums.__dataclass_fields__ if f not in ("farm_id", "held")}


@pytest.fixture
def two_farms(legacy_fleet):
    legacy_fleet(4, farm_id=1)
    legacy_fleet(3, first=20, farm_id=2)
    farm_totals_refresh()
    assert kept_rows() == summed_now() and not FarmTotalsChanged.objects.exists()
    return legacy_fleet


@pytest.mark.parametrize("write", WRITES)
def test_after_every_kind_of_write_the_totals_read_are_the_live_sums_before_and_after_the_refresh(
    two_farms, sim_node, write
):
    before = kept_rows()
    WRITES[write](two_farms.grid, sim_node)
    assert summed_now() != before  # the write changed what a farm sums to
    assert farm_totals() == summed_now()  # read at once: the farm written is summed live
    assert fleet_totals() == replace(FarmSums.total(summed_now()), farm_id=0)
    farm_totals_refresh()
    assert kept_rows() == summed_now() and farm_totals() == summed_now()
    assert not FarmTotalsChanged.objects.exists()  # every mark read was cleared


def test_one_farm_and_the_fleet(two_farms):
    Node.objects.filter(farm_id=2).update(status="standby")
    (one,) = farm_totals(farm_id=2)
    assert one == [s for s in summed_now() if s.farm_id == 2][0]
    assert FarmSums.total(farm_totals()).nodes == 7


def test_a_read_writes_nothing_even_when_farms_are_behind(two_farms):
    Node.objects.filter(farm_id=1).update(status="down")
    marks, kept = list(FarmTotalsChanged.objects.values_list("pk", flat=True)), kept_rows()
    farm_totals()
    fleet_totals()
    assert list(FarmTotalsChanged.objects.values_list("pk", flat=True)) == marks and kept_rows() == kept


@pytest.mark.django_db(transaction=True)
def test_a_service_write_refreshes_the_totals_once_its_transaction_commits(two_farms):
    node = Node.objects.filter(farm_id=1).order_by("pk").first()
    with transaction.atomic():
        Slice.objects.filter(node=node, index=1).update(state=Slice.State.RENTED)
        figures_refresh([node.pk])
        reading_written(two_farms.grid)
        farm_totals_refresh_on_commit()
        asked = [entry for entry in connection.run_on_commit if entry[1] is _refresh_committed]
        assert len(asked) == 1  # one refresh however many writes asked
        assert FarmTotalsChanged.objects.exists()
    assert kept_rows() == summed_now() and not FarmTotalsChanged.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_write_rolled_back_leaves_nothing_to_refresh(two_farms):
    with pytest.raises(RuntimeError), transaction.atomic():
        reading_written(two_farms.grid)
        raise RuntimeError("refused")
    assert connection.run_on_commit == [] and not FarmTotalsChanged.objects.exists()
    assert kept_rows() == summed_now()


@pytest.mark.django_db(transaction=True)
def test_a_change_committed_by_another_connection_during_a_refresh_is_read_live_then_summed_by_the_next(
    legacy_fleet,
):
    """A writer holds its transaction open across a refresh: the refresh does not see it (nor clear
    its mark); once it commits, readers sum that farm live, and the next refresh keeps it."""
    legacy_fleet(2, farm_id=1)
    farm_totals_refresh()
    written, release, done = threading.Event(), threading.Event(), threading.Event()

    def writer():
        try:
            with transaction.atomic():
                Node.objects.filter(farm_id=1).update(status="down")
                written.set()
                release.wait(10)
        finally:
            connections.close_all()
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert written.wait(10)
    farm_totals_refresh()
    during = farm_totals()
    release.set()
    assert done.wait(10)
    thread.join()
    assert during[0].nodes_up == 2  # uncommitted: not seen
    assert farm_totals() == summed_now() and farm_totals()[0].nodes_up == 0  # committed: read live
    assert FarmTotalsChanged.objects.exists()
    farm_totals_refresh()
    assert kept_rows() == summed_now()
