"""The kept farm totals are always what summing the nodes gives, whoever wrote the nodes and how.

The independent answer is the same sums made over the Node rows at the moment of reading.
"""

import pytest
from django.db import connection

from dashboard.capacity import GiB
from dashboard.models import FarmTotals, FarmTotalsChanged, Node, Slice
from dashboard.selectors.farm_totals import AGGREGATES, FarmSums, _summed, farm_totals
from dashboard.selectors.fleet import TIERS
from dashboard.services.figures import figures_refresh

pytestmark = pytest.mark.django_db


def summed_now() -> list[FarmSums]:
    return _summed(Node.objects.all())


def test_the_tiers_are_the_fleet_pages():
    from dashboard.selectors import farm_totals as totals

    assert (totals.NOW, totals.AFTER_WAKE, totals.BLOCKED) == (TIERS["now"], TIERS["after-wake"], TIERS["blocked"])
    assert set(AGGREGATES) == {f for f in FarmSums.__dataclass_fields__ if f != "farm_id"}


def test_they_follow_every_kind_of_write(legacy_fleet, sim_node):
    legacy_fleet(4, farm_id=1)
    legacy_fleet(3, first=20, farm_id=2)
    assert farm_totals() == summed_now()
    # A service write (figures), a queryset update, a raw SQL update, a delete, a node moving farm.
    node = Node.objects.filter(farm_id=1).first()
    Slice.objects.filter(node=node, index=1).update(state=Slice.State.RENTED)
    figures_refresh([node.pk])
    Node.objects.filter(farm_id=2).update(status="standby")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE dashboard_node SET stale = NOT stale WHERE farm_id = 1")
    Node.objects.filter(farm_id=2).order_by("pk").first().delete()
    Node.objects.filter(pk=node.pk).update(farm_id=3)
    sim_node(4242, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4)
    assert farm_totals() == summed_now()
    assert not FarmTotalsChanged.objects.exists()  # every mark read was cleared


def test_a_farm_with_no_node_left_disappears(legacy_fleet):
    legacy_fleet(2, farm_id=5)
    assert [f.farm_id for f in farm_totals()] == [5]
    Node.objects.filter(farm_id=5).delete()
    assert farm_totals() == [] and FarmTotals.objects.get(farm_id=5).nodes == 0


def test_one_farm_and_the_fleet(legacy_fleet):
    legacy_fleet(2, farm_id=1)
    legacy_fleet(2, first=10, farm_id=2)
    (one,) = farm_totals(farm_id=2)
    assert one == [s for s in summed_now() if s.farm_id == 2][0]
    assert FarmSums.total(farm_totals()).nodes == 4


@pytest.mark.django_db(transaction=True)
def test_a_change_committed_by_another_connection_while_reading_is_summed_by_the_next_read(legacy_fleet):
    """A writer holds its transaction open across a read: the read does not see it (nor clear its
    mark); once it commits, the next read sums that farm again."""
    import threading

    from django.db import connections, transaction

    legacy_fleet(2, farm_id=1)
    farm_totals()
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
    during = farm_totals()
    release.set()
    assert done.wait(10)
    thread.join()
    assert during[0].nodes_up == 2  # uncommitted: not seen
    assert farm_totals() == summed_now() and farm_totals()[0].nodes_up == 0
