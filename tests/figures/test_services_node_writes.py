"""The block every node writer goes through: the nodes locked in pk order, their figures stored on exit."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.figures.node_figures import FIGURE_FIELDS
from dashboard.figures.services.node_writes import figures_follow, node_writes
from dashboard.models import Node, Slice
from tests.factories import NODE_1774

pytestmark = pytest.mark.django_db


def stored(node: Node) -> dict:
    return Node.objects.filter(pk=node.pk).values(*FIGURE_FIELDS).get()


def rent_slice_0(node: Node) -> None:
    Slice.objects.filter(node=node, index=0).update(state=Slice.State.RENTED)


def test_it_stores_the_figures_of_what_the_block_wrote(sim_node):
    node = sim_node(1774, **NODE_1774)
    with node_writes([node.pk]) as writes:
        rent_slice_0(node)
    assert (stored(node)["slices_free"], stored(node)["slices_rented"], writes.changed) == (5, 1, 1)


def test_it_stores_nothing_and_writes_nothing_when_the_block_raises(sim_node):
    node = sim_node(1774, **NODE_1774)
    with pytest.raises(RuntimeError), node_writes([node.pk]):
        rent_slice_0(node)
        raise RuntimeError("the writer failed")
    assert (stored(node)["slices_free"], Slice.objects.filter(node=node, state=Slice.State.RENTED).count()) == (6, 0)


def test_it_locks_the_nodes_in_pk_order_before_the_block(sim_node):
    nodes = [sim_node(grid_id, **NODE_1774) for grid_id in (11, 12)]
    with CaptureQueriesContext(connection) as captured, node_writes(reversed([n.pk for n in nodes])):
        locks = [q["sql"] for q in captured.captured_queries if "FOR UPDATE" in q["sql"]]
    assert len(locks) == 1 and locks[0].endswith("ORDER BY 1 ASC FOR UPDATE")


def test_refresh_only_leaves_the_others_as_stored(sim_node):
    first, second = sim_node(11, **NODE_1774), sim_node(12, **NODE_1774)
    with node_writes([first.pk, second.pk]) as writes:
        rent_slice_0(first)
        rent_slice_0(second)
        writes.refresh_only([first.pk])
    assert (stored(first)["slices_rented"], stored(second)["slices_rented"]) == (1, 0)


def test_refreshing_a_node_the_block_does_not_hold_is_refused_and_nothing_is_kept(sim_node):
    first, second = sim_node(11, **NODE_1774), sim_node(12, **NODE_1774)
    with pytest.raises(ValueError, match=rf"nodes \[{second.pk}\] are refreshed but not locked"):
        with node_writes([first.pk]) as writes:
            rent_slice_0(first)
            writes.refresh_only([first.pk, second.pk])
    assert Slice.objects.filter(state=Slice.State.RENTED).count() == 0


def test_a_block_that_only_locks_stores_no_figures(sim_node):
    node = sim_node(1774, **NODE_1774)
    with node_writes([node.pk], refresh=False):
        rent_slice_0(node)
    assert stored(node)["slices_rented"] == 0


def test_nodes_found_in_the_block_are_locked_and_refreshed_too(sim_node):
    first, second = sim_node(11, **NODE_1774), sim_node(12, **NODE_1774)
    with node_writes([first.pk]) as writes:
        writes.lock([second.pk])
        rent_slice_0(second)
    assert stored(second)["slices_rented"] == 1


def test_figures_follow_a_change_made_elsewhere(sim_node):
    node = sim_node(1774, **NODE_1774)
    rent_slice_0(node)
    assert (figures_follow([node.pk]), stored(node)["slices_rented"]) == (1, 1)
