"""The month's memory in the light of ZOS's rule: builds, the fleet's lessons, odds and probes."""

import pytest

from dashboard.capacity import GiB, MemoryPoint, MiB, overhead_fit
from dashboard.grid.simgrid import ZOS_BUILDS, ZosMachine
from dashboard.traffic import simulate
from dashboard.traffic.drift import Drift
from dashboard.traffic.fleet import BUILD_MAJOR, BUILD_MINOR, hidden_use_for

POLICIES = ("legacy", "zos", "zos-learning")


@pytest.fixture(scope="module")
def month():
    return simulate(nodes=80, events=900, seed=5, policies=POLICIES, pools_reported=1.0, drift=Drift(seed=5))


@pytest.fixture(scope="module")
def month_probed():
    return simulate(
        nodes=80, events=900, seed=5, policies=("zos-learning",), pools_reported=1.0, drift=Drift(seed=5), probes=True
    )


def test_the_months_report_has_the_new_figures(month):
    figures = month.as_dict()["policies"]["zos-learning"]
    for key in (
        "refused_per_1000_nodes",
        "refused_by_reason",
        "refused_by_build",
        "first_refusals_by_build",
        "odds_calibration",
        "catalog_truth",
        "utilisation",
    ):
        assert key in figures
    assert set(figures["odds_calibration"]) == {"outcomes", "brier", "ece"}


def test_utilisation_is_at_most_one_for_every_policy(month):
    for figures in month.policies.values():
        assert 0 < figures.utilisation <= 1
        for day in figures.daily:
            assert day["util_num"] <= day["util_den"] + 1e-6


def test_the_refusals_add_up_by_why_by_build_and_per_node(month):
    for figures in month.policies.values():
        assert sum(figures.refused_by_reason.values()) == figures.refused
        assert sum(figures.refused_by_build.values()) == figures.refused
        assert sum(figures.first_refusals_by_build.values()) == figures.nodes_refused
        assert figures.refused_per_1000_nodes == pytest.approx(1000 * figures.refused / month.nodes, abs=0.01)


def test_every_node_runs_a_build_most_on_one(month):
    builds = month.mix["zos_builds"]
    assert set(builds) == {BUILD_MAJOR, BUILD_MINOR}
    assert builds[BUILD_MAJOR] > builds[BUILD_MINOR] > 0


def test_the_fleets_lesson_spares_the_refusals_zos_alone_makes(month):
    # Every node uses memory beyond ZOS's count: without learning, each fills into a refusal.
    assert month.policies["zos-learning"].refused * 5 < month.policies["zos"].refused


def test_the_probes_are_counted_and_refused_as_no_buyers(month_probed):
    probes = month_probed.policies["zos-learning"].probes
    assert probes["sent"] > 0
    assert probes["refused_on_a_build_a_probe_taught"] <= month_probed.policies["zos-learning"].refused


def test_hidden_use_nodes_leaves_the_fleet_without_builds():
    import random

    from dashboard.traffic import fleet_mix

    specs = fleet_mix(20, random.Random(1))
    assert hidden_use_for(specs, "nodes", 1) == specs
    assert all(s.zos_build and not s.hidden_mru for s in hidden_use_for(specs, "builds", 1))
    with pytest.raises(ValueError):
        hidden_use_for(specs, "some", 1)


def test_a_refusal_while_the_test_vm_runs_is_left_out_of_the_line():
    # ZOS's rule, on simulated 32 GiB nodes of a build: actual use at 2, 4 and 6 VMs of 2 GiB (hidden
    # use, not the count, decides), the last told with the 512 MiB provisiontest VM running.
    points = []
    for node_id, vms, test_vm in ((11, 2, False), (12, 4, False), (13, 6, True)):
        machine = ZosMachine.boot(node_id, cru=16, mru=32 * GiB, sru=1000 * GiB, zos_build=BUILD_MAJOR)
        for i in range(vms):
            machine.place(_size(2 * GiB), name=f"v{i}", deployment_id=i + 1)
        machine.test_vm = test_vm
        _vm, refusal = machine.place(_size(40 * GiB), name="probe", deployment_id=99)
        usable = int(refusal.raw.rsplit("usable ", 1)[1].split()[0])
        points.append(
            MemoryPoint(node=node_id, total_mru=32 * GiB, vms=vms, vm_mru=vms * 2 * GiB, actual_mru=32 * GiB - usable)
        )
    fit = overhead_fit(points)
    build = ZOS_BUILDS[BUILD_MAJOR]
    assert fit.points == 3
    # The node refused beside the test VM keeps what it told as its own: the test VM and its overhead.
    assert abs(fit.residuals[13] - (512 * MiB + build.per_vm_mru)) <= 96 * MiB
    # The build's figures, give or take the nodes' own spread (records.build_spread).
    assert abs(fit.per_vm_mru - build.per_vm_mru) <= 16 * MiB
    assert abs(fit.own_mru - build.own_mru) <= 96 * MiB


def _size(mru):
    from dashboard.capacity import SliceSize

    return SliceSize(cru=1, mru=mru, sru=0)
