"""The live holds summed on each node row (figures.services.held_figures), as placement's first cut charges them."""

import datetime as dt

import pytest
from django.core.management import call_command
from django.utils import timezone

from dashboard.deployments.services.deploy import SliceBusy, slice_deploy
from dashboard.deployments.services.holds import hold_create, hold_release
from dashboard.figures.services.figures import figures_refresh
from dashboard.figures.services.held_figures import held_sizes_key
from dashboard.models import Node, Slice
from dashboard.policies.selectors.policy_book import policy_for_node
from tests.factories import sim_node_1774

pytestmark = pytest.mark.django_db


def _sums(grid_id: int) -> tuple:
    node = Node.objects.get(grid_id=grid_id)
    return (
        node.held_slices,
        node.held_mru,
        node.held_sru,
        node.held_sizes,
        node.held_first_expiry,
        node.held_last_expiry,
    )


def test_a_hold_made_and_released_is_summed_on_its_node_and_taken_off_again(sim_node):
    node = sim_node_1774(sim_node)
    now = timezone.now()
    first = hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="a", now=now)
    hold_create(node_id=1774, slice_index=2, ttl_seconds=60, marketplace_id="b", now=now)
    slices = {s.index: s for s in Slice.objects.filter(node=node, index__in=(2, 5))}
    # Charged as the node's policy charges each VM, by an independent reckoning of the two slices.
    charges = [policy_for_node(node).vm_charge(s.cru, s.mru, s.sru) for s in (slices[2], slices[5])]
    assert _sums(1774) == (
        2,
        sum(c.mru for c in charges) + 2 * node.hidden_mru_per_vm,
        sum(c.sru for c in charges),
        held_sizes_key((s.cru, s.mru, s.sru) for s in (slices[2], slices[5])),  # in slice order
        now + dt.timedelta(seconds=60),
        now + dt.timedelta(seconds=600),
    )
    # A lesson of hidden memory per VM (stored with figures_refresh) is charged on each held VM too.
    Node.objects.filter(pk=node.pk).update(hidden_mru_per_vm=3 * 2**30)
    figures_refresh([node.pk])
    assert _sums(1774)[1] == sum(c.mru for c in charges) + 2 * 3 * 2**30
    hold_release(hold_id=first.pk, now=now)
    assert _sums(1774)[0] == 1 and _sums(1774)[5] == now + dt.timedelta(seconds=60)


def test_an_expired_hold_is_not_summed_by_the_next_write(sim_node):
    sim_node_1774(sim_node)
    hold_create(
        node_id=1774, slice_index=4, ttl_seconds=60, marketplace_id="old", now=timezone.now() - dt.timedelta(hours=1)
    )
    hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="new")
    assert _sums(1774)[0] == 1


def test_a_held_slice_changed_by_hand_is_dropped_from_the_sums_by_the_figures_repair(sim_node):
    """A slice rented by hand under a hold counts once, as rented: figures_refresh (which every slice
    write calls, and the repair command runs) stores the sums again."""
    sim_node_1774(sim_node)
    hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="a")
    Slice.objects.filter(node__grid_id=1774, index=5).update(state=Slice.State.RENTED)
    assert _sums(1774)[0] == 1  # the row says so until a write looks again
    call_command("figures_refresh", verbosity=0)
    assert _sums(1774) == (0, 0, 0, "", None, None)


def test_the_dashboards_own_deploy_refuses_a_held_slice_naming_the_hold(sim_node):
    node = sim_node_1774(sim_node)
    hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="buyer-7")
    with pytest.raises(SliceBusy, match=r"slice 5 of node 1774 is held: hold #\d+ .* for 'buyer-7'"):
        slice_deploy(node=node, slice_index=5, precheck=False)
    assert Slice.objects.get(node=node, index=5).state == Slice.State.FREE
    assert not node.deployments.exists()


def _held_live(now, key):
    """The reference: every live hold at `now` read one by one, Held.on_node by node, added up by `key`."""
    from dashboard.deployments.selectors.holds import Held
    from dashboard.models import Hold

    per_node: dict = {}
    for hold in Hold.objects.live(now).select_related("node", "slice"):
        if hold.slice is not None and hold.slice.state == Slice.State.FREE:
            per_node.setdefault(hold.node, 0)
            per_node[hold.node] += 1
    found: dict = {}
    for node, n in per_node.items():
        held = Held.on_node(
            n,
            placeable=node.placeable_now,
            phantom=node.phantom_slices,
            up_and_open=node.status == "up" and not node.closure,
        )
        value = key(node)
        found[value] = found.get(value, Held()) + held
    return found


def test_the_readers_sums_agree_with_the_live_holds_while_they_end_by_time(sim_node):
    """held_by_node, held_by_farm and held_among read the sums on the node rows; asked while every hold
    is live, while some have ended by time (no write since) and once all have, they say what reading
    every live hold says."""
    from dashboard.deployments.selectors.holds import Held, held_among, held_by_farm, held_by_node

    for grid_id, farm in ((1774, 1), (1775, 1), (1776, 2)):
        sim_node(grid_id, cru=8, mru=31 * 2**30, sru=int(931.5 * 2**30), farm_id=farm, policy_name="legacy")
    now = timezone.now()
    for grid_id, lives in ((1774, (60, 600)), (1775, (600,)), (1776, (60, 60, 60))):
        for index, ttl in enumerate(lives):
            hold_create(
                node_id=grid_id, slice_index=index, ttl_seconds=ttl, marketplace_id=f"{grid_id}-{index}", now=now
            )
    seen = set()
    for later in (0, 120, 1200):
        at = now + dt.timedelta(seconds=later)
        by_node = _held_live(at, lambda n: n.pk)
        assert held_by_node(now=at) == by_node, later
        assert held_by_node(now=at, node_pks=[n.pk for n in Node.objects.filter(grid_id=1774)]) == {
            k: v for k, v in by_node.items() if Node.objects.get(pk=k).grid_id == 1774
        }
        assert held_by_farm(now=at) == _held_live(at, lambda n: n.farm_id), later
        assert held_by_farm(now=at, farm_id=2) == {
            k: v for k, v in _held_live(at, lambda n: n.farm_id).items() if k == 2
        }
        assert held_among(now=at) == sum(by_node.values(), Held()), later
        seen.add(held_among(now=at).slices)
    assert seen == {6, 2, 0}  # all live, some ended by time, none


@pytest.mark.django_db(transaction=True)  # the refresh runs when the hold's transaction commits
def test_a_hold_leaves_no_farm_behind(sim_node):
    """Storing a node's sums updates its row, which the trigger marks as a farm change: the hold's
    transaction sums the farm again on commit, so no page reads that farm live until the beat."""
    from dashboard.models import FarmTotalsChanged

    sim_node_1774(sim_node)
    from dashboard.figures.services.farm_totals import farm_totals_refresh

    farm_totals_refresh()
    assert not FarmTotalsChanged.objects.exists()
    made = hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="a")
    assert not FarmTotalsChanged.objects.exists()
    hold_release(hold_id=made.pk)
    assert not FarmTotalsChanged.objects.exists()


def test_the_overview_rows_take_the_holds_off_from_their_sums_or_their_live_holds(sim_node):
    """A row whose holds are all live takes them off from its own columns; one whose holds partly ended
    by time is read from its live holds: both as the reference, every live hold read one by one, says."""
    from dashboard.figures.selectors.fleet import fleet_page

    for grid_id in (1774, 1775):
        sim_node(grid_id, cru=8, mru=31 * 2**30, sru=int(931.5 * 2**30), farm_id=1, policy_name="legacy")
    hold_create(node_id=1774, slice_index=0, ttl_seconds=600, marketplace_id="all-live-1")
    hold_create(node_id=1774, slice_index=1, ttl_seconds=600, marketplace_id="all-live-2")
    hold_create(node_id=1775, slice_index=0, ttl_seconds=600, marketplace_id="live")
    hold_create(
        node_id=1775, slice_index=1, ttl_seconds=60, marketplace_id="ended", now=timezone.now() - dt.timedelta(hours=1)
    )
    assert Node.objects.get(grid_id=1775).held_first_expiry < timezone.now()  # partly ended, no write since
    reference = _held_live(timezone.now(), lambda n: n.grid_id)
    rows = {row.node_id: row for row in fleet_page().rows}
    for grid_id, held in reference.items():
        row = rows[grid_id]
        stored = Node.objects.get(grid_id=grid_id)
        assert (row.held, row.free) == (held.slices, stored.slices_free - held.slices), grid_id
        assert row.placeable_now == stored.placeable_now - held.placeable, grid_id
    assert {g: h.slices for g, h in reference.items()} == {1774: 2, 1775: 1}
