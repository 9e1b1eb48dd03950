import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.catalogs.services.precheck import precheck_run
from dashboard.deployments.services.deploy import slice_deploy
from dashboard.grid.types import GridUnavailable, MalformedPayload
from dashboard.models import Node, Slice
from dashboard.nodes.services.registration import node_register, node_register_from_grid
from tests.factories import NODE_1774, TOTAL_1774

pytestmark = pytest.mark.django_db


def _legacy_1774_with_one_vm(sim_node):
    node = sim_node(1774, policy_name="legacy", **NODE_1774)
    slice_deploy(node=node, slice_index=0)
    return node


def test_it_names_the_seventh_legacy_slice_phantom(sim_node):
    report = precheck_run(node=_legacy_1774_with_one_vm(sim_node))
    assert (report.precheck.free_slices, report.precheck.placeable_now, report.precheck.phantom_slices) == (6, 5, (6,))


def test_it_says_why_a_phantom_slice_does_not_fit(sim_node):
    report = precheck_run(node=_legacy_1774_with_one_vm(sim_node))
    verdict = report.as_dict()["verdicts"][-1]
    assert (verdict["slice"], verdict["fits"]) == (6, False)
    assert "memory: needs 4 GiB, 3.9 GiB available" in verdict["words"]


def test_it_finds_no_phantom_in_the_default_carve(sim_node):
    # Registered with the node's own pools answer, so the carve keeps what the precheck will keep: the
    # zos-cache's quota it reports and its next step (issue 33, item 5).
    sim_node(1774, register=False, **NODE_1774)
    node = node_register_from_grid(live=sim_node.grid.node(1774))
    report = precheck_run(node=node)
    assert (report.precheck.placeable_now, report.precheck.phantom_slices) == (6, ())


def test_it_stores_the_live_figures_on_the_node(sim_node):
    node = _legacy_1774_with_one_vm(sim_node)
    report = precheck_run(node=node)
    stored = Node.objects.get(pk=node.pk)
    assert (stored.placeable_now, stored.phantom_slices) == (5, 1)
    assert (stored.used_mru, stored.used_sru) == (report.capacity.used.mru, report.capacity.used.sru)
    assert stored.prechecked_at == stored.seen_at == report.checked_at


def test_it_writes_only_the_node_row_the_reading_then_its_figures(sim_node):
    node = _legacy_1774_with_one_vm(sim_node)
    precheck_run(node=node)  # the first asks the simulated node for its pools and keeps its answer
    node.refresh_from_db()
    with CaptureQueriesContext(connection) as captured:
        precheck_run(node=node)
    writes = [
        q["sql"] for q in captured.captured_queries if not q["sql"].startswith(("SELECT", "SAVEPOINT", "RELEASE"))
    ]
    # Pools still fresh are not asked again (POOLS_MAX_AGE, through the simulated grid's RMB as over rmb-peer):
    # the reading's UPDATE; the figures' only when they changed.
    assert len(writes) in (1, 2) and all(w.startswith('UPDATE "dashboard_node"') for w in writes), writes


def test_it_never_touches_the_catalog(sim_node):
    node = _legacy_1774_with_one_vm(sim_node)
    before = list(node.slices.values_list("index", "state", "mru", "sru", "generation", "updated_at"))
    precheck_run(node=node)
    assert list(node.slices.values_list("index", "state", "mru", "sru", "generation", "updated_at")) == before


def test_it_checks_free_slices_only(sim_node):
    node = sim_node(1774, **NODE_1774)
    Slice.objects.filter(node=node, index__in=[1, 3]).update(state="rented", rented_by_twin_id=5)
    report = precheck_run(node=node)
    assert [v.index for v in report.precheck.verdicts] == [0, 2, 4, 5]


def test_it_calls_every_free_slice_phantom_on_a_down_node(sim_node):
    node = sim_node(1774, **NODE_1774)
    sim_node.grid.set_status(1774, "down")
    report = precheck_run(node=node)
    assert (report.precheck.placeable_now, report.precheck.phantom_slices) == (0, (0, 1, 2, 3, 4, 5))
    assert (report.as_dict()["cause"], Node.objects.get(pk=node.pk).status) == ("node-offline", "down")


def test_it_says_the_node_is_offline_in_each_verdict(sim_node):
    node = sim_node(1774, status="standby", **NODE_1774)
    verdict = precheck_run(node=node).as_dict()["verdicts"][0]
    assert "the node is on standby" in verdict["words"] and "until it is woken" in verdict["words"]


def test_it_says_when_there_is_no_free_slice(sim_node):
    node = sim_node(1774, **NODE_1774)
    Slice.objects.filter(node=node).update(state="rented", rented_by_twin_id=5)
    assert precheck_run(node=node).words == "node 1774 (up) has no free slice to place"


def test_it_reports_the_contract_keys(sim_node):
    data = precheck_run(node=sim_node(1774, **NODE_1774)).as_dict()
    assert {"free_slices", "placeable_now", "phantom_slices", "verdicts"} <= set(data)


def _registered_without_grid():
    return node_register(node_id=1774, total=TOTAL_1774, farm_id=4242, farm_name="mitana")


def test_it_raises_grid_unavailable_and_writes_nothing_when_the_grid_is_down(gridproxy_down):
    node = _registered_without_grid()
    with pytest.raises(GridUnavailable):
        precheck_run(node=node)
    assert Node.objects.get(pk=node.pk).prechecked_at is None


def test_it_raises_malformed_payload_and_writes_nothing(gridproxy_serving):
    gridproxy_serving({"/nodes/1774": {"nodeId": 1774, "capacity": {"total_resources": None}}})
    node = _registered_without_grid()
    with pytest.raises(MalformedPayload):
        precheck_run(node=node)
    assert Node.objects.get(pk=node.pk).used_mru is None
