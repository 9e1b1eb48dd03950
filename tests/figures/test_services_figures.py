"""The catalog figures kept on each node's row: written by every service that changes them."""

import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction

from dashboard.capacity import PROFILES, GiB
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.deployments.services.deploy_delete import deployment_delete
from dashboard.figures.node_figures import FIGURE_FIELDS
from dashboard.figures.services.figures import (
    figures_compute,
    figures_refresh,
    figures_refresh_all,
    nodes_lock,
)
from dashboard.models import Node, Policy, Slice
from dashboard.nodes.services.registration import node_register
from dashboard.policies.services.policy import policy_create, policy_delete, policy_update
from tests.factories import NODE_1774

pytestmark = pytest.mark.django_db


def stored(node: Node) -> dict:
    return Node.objects.filter(pk=node.pk).values(*FIGURE_FIELDS).get()


def assert_current() -> None:
    """Every node's stored figures are what figures_compute makes of its rows now."""
    call_command("figures_refresh", "--check", stdout=open("/dev/null", "w"))


def test_it_stores_the_figures_of_a_registered_node(sim_node):
    node = sim_node(1774, policy_name="legacy", **NODE_1774)
    figures = stored(node)
    # No VM runs yet: one more can be charged what the reading leaves. The simulated grid's node told its
    # pools (Grid.storage_pools), so they decide: the node gets a shape key, shared with nodes like it.
    node.refresh_from_db()
    assert node.pools_sru is not None
    assert (figures.pop("room_mru"), figures.pop("room_sru")) == (
        node.total_mru - node.used_mru,
        node.total_sru - node.used_sru,
    )
    assert len(figures.pop("pools_shape")) == 16
    assert figures == {
        "slices_free": 7,
        "slices_rented": 0,
        "slices_deployed": 0,
        "slices_failed": 0,
        "deployable": 6,
        "stale": True,
        "stale_reason": "carved with policy legacy v1; its policy is zos v1; 7 free slice(s) where the policy carves 6; "
        "free slices of 1 vCPU / 4 GiB / 133 GiB where the policy carves 1 vCPU / 4 GiB / 151 GiB",
        "effective_policy": "zos v1",
        "closure": "",  # up, and nothing else closes it
        "closure_detail": "",
        # Registered with the grid's reading: 6 of the 7 legacy slices fit, the 7th is short of memory.
        "placeable_now": 6,
        "phantom_slices": 1,
        "phantom_reasons": {"memory": 1},
    }


def test_it_recomputes_placeable_and_phantom_when_the_policy_changes(sim_node):
    from dashboard import capacity
    from dashboard.models import Policy
    from dashboard.policies.services.policy import policy_create

    node = sim_node(1774, **NODE_1774)
    assert (stored(node)["placeable_now"], stored(node)["phantom_slices"]) == (6, 0)
    # A farm policy counting 3 GiB more per VM: the same reading now holds fewer of the free slices.
    heavy = Policy.parameters_from(capacity.with_overrides(capacity.profile("zos"), overhead_mru_per_vm=3 * GiB))
    policy_create(name="heavy", scope="farm", farm_id=4242, parameters=heavy)
    assert (stored(node)["placeable_now"], stored(node)["phantom_slices"], stored(node)["phantom_reasons"]) == (
        3,
        3,
        {"memory": 3},
    )


def test_it_counts_a_deploy_and_its_deletion(sim_node):
    node = sim_node(1774, **NODE_1774)
    deployment = slice_deploy(node=node, slice_index=0)
    assert (stored(node)["slices_free"], stored(node)["slices_deployed"]) == (5, 1)
    deployment_delete(deployment=deployment)
    assert (stored(node)["slices_free"], stored(node)["slices_deployed"]) == (6, 0)
    assert_current()


def test_it_leaves_the_counts_of_a_refused_deploy_alone(sim_node):
    node = sim_node(1774, policy_name="legacy", **NODE_1774)
    for index in range(7):
        slice_deploy(node=node, slice_index=index)
    assert (stored(node)["slices_free"], stored(node)["slices_deployed"]) == (1, 6)
    assert_current()


def test_it_marks_the_nodes_of_a_changed_policy_stale_in_the_same_transaction(sim_node):
    node = sim_node(1774, **NODE_1774)
    fleet = Policy.objects.create(name="fleet", scope=Policy.Scope.FLEET, **Policy.parameters_from(PROFILES["zos"]))
    figures_refresh_all()
    policy_update(policy=fleet, parameters={"slice_mru": 8 * GiB})
    figures = stored(node)
    assert (figures["stale"], figures["deployable"], figures["effective_policy"]) == (True, 3, "fleet v2")
    assert "the policy is now v2" in figures["stale_reason"] or "its policy is fleet v2" in figures["stale_reason"]


def test_it_moves_a_farms_nodes_to_its_new_override_and_back_when_deleted(sim_node):
    node = sim_node(1774, **NODE_1774)
    other = sim_node(2000, **{**NODE_1774, "farm_id": 1})
    override = policy_create(
        name="mitana", scope=Policy.Scope.FARM, farm_id=4242, parameters=Policy.parameters_from(PROFILES["legacy"])
    )
    assert (stored(node)["effective_policy"], stored(other)["effective_policy"]) == ("mitana v1", "zos v1")
    policy_delete(policy=override)
    assert (stored(node)["effective_policy"], stored(node)["stale"]) == ("zos v1", False)
    assert_current()


def test_it_repairs_rows_changed_by_hand_and_the_check_names_them(sim_node):
    node = sim_node(1774, **NODE_1774)
    Slice.objects.filter(node=node, index__in=[0, 1]).update(state=Slice.State.RENTED)
    with pytest.raises(CommandError, match="1 node\\(s\\) have out-of-date figures: 1774"):
        assert_current()
    assert figures_refresh_all() == 1
    assert stored(node)["slices_rented"] == 2
    assert_current()


def test_it_changes_nothing_when_the_figures_are_current(sim_node):
    node = sim_node(1774, **NODE_1774)
    assert figures_refresh([node.pk]) == 0


def test_it_computes_any_number_of_nodes_in_four_queries(sim_node, django_assert_num_queries):
    # The nodes, their slices, the policies, and the probes' readings of their groups (nodes never read where
    # those differ: lessons.selectors.odds.unread_among), whatever their number.
    for node_id in range(1, 21):
        sim_node(node_id, **{**NODE_1774, "farm_id": 1 + node_id % 3})
    with django_assert_num_queries(4):
        figures = figures_compute(Node.objects.all())
    assert len(figures) == 20


def test_it_gives_a_node_without_slices_zero_counts():
    node = node_register(node_id=9, total=Node(total_cru=1, total_mru=GiB, total_sru=0).total, farm_id=1)
    assert (stored(node)["slices_free"], stored(node)["deployable"], stored(node)["stale"]) == (0, 0, False)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_locks_the_node_before_counting_a_deploy(sim_node):
    # Two writers of one node must store its figures in turn, each after the other's commit;
    # otherwise the one committing last overwrites the other's count with its own view.
    node = sim_node(1774, **NODE_1774)
    locked, release, finished = threading.Event(), threading.Event(), threading.Event()
    errors = []

    def hold_the_node() -> None:
        try:
            with transaction.atomic():
                nodes_lock([node.pk])
                locked.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    def deploy() -> None:
        try:
            slice_deploy(node=Node.objects.get(pk=node.pk), slice_index=0)
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            finished.set()
            connection.close()

    holder = threading.Thread(target=hold_the_node)
    holder.start()
    assert locked.wait(timeout=10)
    deployer = threading.Thread(target=deploy)
    deployer.start()
    try:
        assert not finished.wait(timeout=1.5), "the deploy stored its figures without waiting for the node's lock"
        assert Slice.objects.get(node=node, index=0).state == Slice.State.FREE
    finally:
        release.set()
        holder.join(timeout=30)
        deployer.join(timeout=60)
    assert not errors
    assert (stored(node)["slices_free"], stored(node)["slices_deployed"]) == (5, 1)
    assert_current()
