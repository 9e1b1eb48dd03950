import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dashboard.capacity import PROFILES, GiB, MiB, Resources
from dashboard.deployments.services.deploy import slice_deploy, slices_deploy_all_free
from dashboard.policies.services.calibration import (
    NEED_TWO_COUNTS,
    calibration_judge,
    fit_overhead,
    fit_pooled_overhead,
    fleet_calibration,
    node_calibration,
)

NODE_1774 = dict(cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana")


def _points(reserve, overhead, counts, vm=4 * GiB):
    return [(n, n * vm, reserve + n * vm + n * overhead) for n in counts]


def test_it_fits_reserve_and_overhead_from_exact_points():
    fit = fit_overhead(_points(3 * GiB, 512 * MiB, [1, 2, 3]))
    assert (fit.reserve, fit.overhead_per_vm, fit.residual) == (3 * GiB, 512 * MiB, 0)


def test_it_reports_the_misfit_of_points_off_the_line():
    points = _points(3 * GiB, 0, [1, 2, 3])
    points[1] = (2, 8 * GiB, 11 * GiB + 300 * MiB)  # 300 MiB above the others' line
    assert fit_overhead(points).residual > 100 * MiB


def test_it_cannot_fit_samples_at_one_vm_count():
    assert fit_overhead(_points(3 * GiB, 0, [2, 2, 2])) is None


def test_it_pools_nodes_each_with_its_own_reserve():
    groups = [_points(2 * GiB, 256 * MiB, [1, 2, 3]), _points(25 * GiB, 256 * MiB, [1, 4]), _points(9 * GiB, 0, [5])]
    assert fit_pooled_overhead(groups) == 256 * MiB


def test_it_flags_a_reserve_larger_than_the_policy_assumes():
    samples = [(n, vm, used, vm, used) for n, vm, used in _points(31 * GiB // 10, 0, [1, 2])]
    result = calibration_judge(
        node_id=1774, total=Resources(8, 31 * GiB, 900 * GiB), policy=PROFILES["legacy"], samples=samples
    )
    assert result.flagged
    assert "legacy assumes 1 GiB" in result.words


def test_it_says_one_vm_count_cannot_tell_reserve_from_overhead():
    samples = [(1, 4 * GiB, 7 * GiB, 134 * GiB, 154 * GiB)]
    result = calibration_judge(
        node_id=1774, total=Resources(8, 31 * GiB, 900 * GiB), policy=PROFILES["zos"], samples=samples
    )
    assert (result.enough, result.flagged) == (False, False)
    assert NEED_TWO_COUNTS in result.words


def _deploy(node, count):
    for index in range(count):
        assert slice_deploy(node=node, slice_index=index).state == "deployed"


def _refused(node):
    """Deploy every free slice without the precheck: ZOS refuses what does not fit, which shows
    the memory really in use (the node's statistics show only the accounted use)."""
    return [d for d in slices_deploy_all_free(node=node, precheck=False) if d.cause == "memory"]


@pytest.mark.django_db
def test_it_recovers_a_hidden_per_vm_overhead_of_512_mib(sim_node):
    node = sim_node(2877, cru=24, mru=64 * GiB, sru=1863 * GiB, per_vm_overhead_mru=512 * MiB)
    assert _refused(node)
    result = node_calibration(node)
    assert abs(result.mru.overhead_per_vm - 512 * MiB) < 4 * MiB
    assert result.flagged


@pytest.mark.django_db
def test_it_does_not_flag_a_node_whose_refusals_show_no_hidden_use(sim_node):
    node = sim_node(1774, policy_name="legacy", **NODE_1774)  # the 7th legacy slice is refused on memory
    assert _refused(node)
    result = node_calibration(node)
    assert abs(result.mru.overhead_per_vm) < 4 * MiB
    assert not result.flagged, result.findings


@pytest.mark.django_db
def test_it_answers_need_two_or_more_after_one_vm(sim_node):
    node = sim_node(1774, **NODE_1774)
    _deploy(node, 1)
    result = node_calibration(node)
    assert "need two or more VMs (at different counts) to tell reserve from per-VM overhead" in result.words


@pytest.mark.slow  # over a second: a fleet deployed full, slice by slice
@pytest.mark.django_db
def test_it_lists_the_flagged_nodes_of_the_fleet(sim_node):
    _refused(sim_node(2877, cru=24, mru=64 * GiB, sru=1863 * GiB, per_vm_overhead_mru=GiB))
    _refused(sim_node(1774, policy_name="legacy", **NODE_1774))
    fleet = fleet_calibration()
    assert [c.node_id for c in fleet.flagged] == [2877]


@pytest.mark.slow
@pytest.mark.django_db
def test_it_gives_the_median_node_beside_the_pooled_fleet_figure(sim_node):
    _refused(sim_node(2877, cru=24, mru=64 * GiB, sru=1863 * GiB, per_vm_overhead_mru=GiB))
    for node_id in (11, 12):
        _refused(sim_node(node_id, policy_name="legacy", **NODE_1774))
    assert fleet_calibration().median_overhead_mru_per_vm == 0


@pytest.mark.django_db
def test_it_reads_the_fleet_in_a_fixed_number_of_queries(sim_node):
    _deploy(sim_node(1774, **NODE_1774), 2)
    with CaptureQueriesContext(connection) as one_node:
        fleet_calibration()
    for node_id in (11, 12, 13):
        _deploy(sim_node(node_id, **NODE_1774), 2)
    with CaptureQueriesContext(connection) as four_nodes:
        fleet_calibration()
    assert len(four_nodes) == len(one_node)
