"""The fleet map kept per farm (FarmTotals) is always the map read live from the nodes, whoever wrote them.

The independent answer is the live map: the same rendering over the Node rows at the moment of reading.
"""

import threading

import pytest
from django.db import connections, transaction

from dashboard.capacity import GiB
from dashboard.models import FarmTotals, Node, Slice
from dashboard.selectors import fleet_map as fleet_map_module
from dashboard.selectors.fleet_map import STATES, _live_farms, fleet_map
from dashboard.services.figures import figures_refresh

pytestmark = pytest.mark.django_db


@pytest.fixture
def remade(monkeypatch):
    """The farms whose cells each read made again, one list a read that made any."""
    made = []
    remake = fleet_map_module._cells_remake

    def spy(farms, **kwargs):
        made.append(sorted(farms))
        return remake(farms, **kwargs)

    monkeypatch.setattr(fleet_map_module, "_cells_remake", spy)
    return made


def assert_kept_is_live():
    kept = fleet_map()
    live = _live_farms(Node.objects.all())
    assert kept.farms == live  # farm ids, names, counts and the cells' HTML byte for byte
    assert kept.counts == {state: sum(f.counts.get(state, 0) for f in live) for state in STATES}


@pytest.fixture
def three_farms(legacy_fleet, sim_node):
    legacy_fleet(3, farm_id=1)
    legacy_fleet(2, first=10, farm_id=2)
    sim_node(4242, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=3, farm_name='mitana <&> "quoted"')
    assert_kept_is_live()


def test_it_keeps_the_live_map_byte_for_byte(three_farms):
    kept = FarmTotals.objects.get(farm_id=3)
    assert kept.map_farm_name == 'mitana <&> "quoted"' and 'data-node="4242"' in kept.map_cells
    assert kept.map_cells_of == kept.computed_at


def test_a_second_reader_makes_nothing_again(three_farms, remade, django_assert_num_queries):
    with django_assert_num_queries(2):
        fleet_map()
    assert remade == []


def test_a_nodes_figures_changing_remakes_its_farm_only(three_farms, remade):
    node = Node.objects.filter(farm_id=1).order_by("grid_id").first()
    Slice.objects.filter(node=node, index=1).update(state=Slice.State.RENTED)
    figures_refresh([node.pk])
    Node.objects.filter(farm_id=1, grid_id=2).update(status="down")
    assert_kept_is_live()
    assert remade == [[1]]


def test_a_node_deleted(three_farms, remade):
    Node.objects.filter(grid_id=11).delete()
    assert_kept_is_live()
    assert remade == [[2]]


def test_a_node_moving_farm_remakes_both_farms(three_farms, remade):
    Node.objects.filter(grid_id=1).update(farm_id=2, farm_name="moved")
    assert_kept_is_live()
    assert remade == [[1, 2]]
    assert 'data-node="1"' in FarmTotals.objects.get(farm_id=2).map_cells


def test_a_new_farm_appears(three_farms, legacy_fleet, remade):
    legacy_fleet(2, first=20, farm_id=9)
    assert_kept_is_live()
    assert remade == [[9]] and [f.farm_id for f in fleet_map().farms] == [1, 2, 3, 9]


def test_a_farm_emptied_leaves_the_map(three_farms, remade):
    Node.objects.filter(farm_id=2).delete()
    assert_kept_is_live()
    assert [f.farm_id for f in fleet_map().farms] == [1, 3] and remade == []


def test_one_farm_is_read_from_its_kept_cells(three_farms, remade, django_assert_num_queries):
    with django_assert_num_queries(2):
        (farm,) = fleet_map(farm_id=2).farms
    assert farm == [f for f in _live_farms(Node.objects.all()) if f.farm_id == 2][0] and remade == []


def test_other_words_make_every_farm_again(three_farms, remade, monkeypatch):
    monkeypatch.setitem(STATES, "stale", "catalog older than the policy")
    assert_kept_is_live()
    assert remade == [[1, 2, 3]]
    assert "— catalog older than the policy" in fleet_map().farms[0].cells_html


def test_another_node_url_makes_every_farm_again(three_farms, remade, monkeypatch):
    monkeypatch.setattr(fleet_map_module, "node_href", lambda: ("/fleet/nodes/", "/"))
    fleet_map()
    assert remade == [[1, 2, 3]] and 'href="/fleet/nodes/4242/"' in fleet_map().farms[2].cells_html


def _committed_in_another_connection(write) -> None:
    """Run `write` in its own connection and transaction, committed before this returns."""

    def run():
        try:
            with transaction.atomic():
                write()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("when", ["after the totals", "after the nodes were read"])
def test_a_write_committed_while_a_reader_makes_cells_is_never_kept_as_fresh(three_farms, monkeypatch, when):
    """Another connection commits a change to farm 1 in the middle of a read that makes farm 1's cells:
    either that read shows it, or the next one makes the farm again. Never old cells taken for fresh."""
    Node.objects.filter(farm_id=1).update(stale=False)  # farm 1 changed: the next read makes its cells

    def write():
        Node.objects.filter(grid_id=3).update(status="standby")

    if when == "after the totals":
        recompute = fleet_map_module.changed_farms_recompute

        def then_write():
            recompute()
            _committed_in_another_connection(write)

        monkeypatch.setattr(fleet_map_module, "changed_farms_recompute", then_write)
    else:
        store = fleet_map_module._cells_store

        def write_then_store(*args):
            _committed_in_another_connection(write)
            store(*args)

        monkeypatch.setattr(fleet_map_module, "_cells_store", write_then_store)
    fleet_map()
    monkeypatch.undo()
    assert_kept_is_live()
    assert 'data-node="3" data-state="standby"' in fleet_map().farms[0].cells_html
