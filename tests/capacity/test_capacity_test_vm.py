"""ZOS's test VM by build (issue 43, item 4): every 15 minutes on zos v3.14.7/v3.14.8 (zosbase v1.0.8,
`pkg/perf/healthcheck/`, cron `0 */15 * * * *`), the daily provisiontest before and from v3.14.8-patch.1
(zosbase `pkg/perf/provisiontest/`); the versions are ../shared/domain.md's, "The test VM's schedule"."""

from datetime import timedelta

import pytest

from dashboard import capacity
from dashboard.capacity import GiB, MiB
from sim.grid import ZosMachine
from sim.grid.machine import TEST_VM_HOURS
from sim.month import fleet
from sim.month.fleet import NodeSpec

DAILY, EVERY_15 = timedelta(days=1), timedelta(minutes=15)


@pytest.mark.parametrize(
    ("version", "period", "known"),
    [
        ("v3.14.6", DAILY, True),
        ("v3.13.2", DAILY, True),
        ("v3.14.7", EVERY_15, True),
        ("v3.14.8", EVERY_15, True),
        ("3.14.8", EVERY_15, True),  # told without its v
        (" v3.14.7 ", EVERY_15, True),
        ("v3.14.7-patch.1", EVERY_15, True),  # between the two 15-minute releases
        ("v3.14.8-rc1", EVERY_15, True),  # a candidate of a 15-minute release: prudent
        ("v3.14.8-patch.0", EVERY_15, True),
        ("v3.14.8-patch.1", DAILY, True),  # the daily provisiontest again
        ("v3.14.8-patch.2", DAILY, True),
        ("v3.14.9", DAILY, True),
        ("v3.15.0", DAILY, True),
        ("v4.0.0", DAILY, True),
        ("v3.14.0-sim", DAILY, True),  # the simulated grid's builds
        ("", DAILY, False),  # unknown: daily, saying so (capacity.test_vm says why)
        (None, DAILY, False),
        ("3.14", DAILY, False),  # malformed
        ("v3.14.x", DAILY, False),
        ("latest", DAILY, False),
        ("v3.14.8 patch 1", DAILY, False),
        ("v3.14.8-patch.1; rm -rf /", DAILY, False),
    ],
)
def test_the_schedule_follows_the_build(version, period, known):
    schedule = capacity.test_vm_schedule(version)
    assert (schedule.period, schedule.known) == (period, known)
    assert schedule.always_there == (period == EVERY_15)


def test_an_unknown_version_says_it_is_not_known():
    assert (
        capacity.test_vm_schedule("").why == "ZOS version unknown: taken as daily (the current release's provisiontest)"
    )
    assert "'latest' not understood" in capacity.test_vm_schedule("latest").why
    assert capacity.test_vm_reserve_mru(None, hidden_mru_per_vm=300 * MiB) == 0


def test_a_15_minute_build_keeps_the_test_vm_and_its_overhead():
    assert capacity.test_vm_reserve_mru("v3.14.8", hidden_mru_per_vm=300 * MiB) == 812 * MiB
    assert capacity.test_vm_reserve_mru("v3.14.8-patch.1", hidden_mru_per_vm=300 * MiB) == 0


def _observed(version: str | None) -> capacity.Observed:
    return capacity.observed_now(
        hidden_mru_per_vm=0, pool_room_below=None, bound_used_sru=None, used_sru=None, zos_version=version
    )


# 14.25 GiB: ZOS keeps 2 GiB, 12.25 GiB hold three 4 GiB slices with 256 MiB to spare, less than the test VM.
NODE = capacity.Resources(cru=8, mru=14 * GiB + 256 * MiB, sru=1000 * GiB, hru=0)


def test_the_carve_leaves_room_for_the_test_vm_on_a_15_minute_build():
    zos = capacity.PROFILES["zos"]
    daily = capacity.carve(NODE, zos, observed=_observed("v3.14.8-patch.1"))
    every_15 = capacity.carve(NODE, zos, observed=_observed("v3.14.8"))
    assert (daily.slices, every_15.slices) == (3, 2)


def test_the_precheck_counts_the_test_vm_on_a_15_minute_build():
    used = capacity.Resources(cru=0, mru=2 * GiB + 8 * GiB, sru=20 * GiB, hru=0)  # the reserve and two slices
    assert _observed("v3.14.8").hidden_mru(2, NODE.mru) == capacity.TEST_VM_MRU
    assert _observed("v3.14.6").hidden_mru(2, NODE.mru) == 0
    room = NODE.mru - used.mru
    assert room - _observed("v3.14.8").hidden_mru(2, NODE.mru) < 4 * GiB <= room


def _spec(build: str) -> NodeSpec:
    return NodeSpec(node_id=7, cru=8, mru=32 * GiB, sru=1000 * GiB, pools=(1000 * GiB,), hidden_mru=0, zos_build=build)


def _share_running(build: str) -> float:
    minutes = 24 * 60
    return sum(fleet.test_vm_running(_spec(build), m / 60) for m in range(minutes)) / minutes


def test_the_simulated_node_runs_its_test_vm_on_its_builds_schedule():
    assert _share_running("v3.14.7") == pytest.approx(TEST_VM_HOURS / 0.25, abs=0.01)  # 3 of every 15 minutes
    assert _share_running("v3.14.8-patch.1") == pytest.approx(TEST_VM_HOURS / 24, abs=0.001)  # 3 a day
    assert _share_running("") == 0  # a node of no build (the month before builds)


def test_a_simulated_15_minute_node_refuses_the_last_slice_while_its_test_vm_runs():
    machine = ZosMachine.boot(7, cru=8, mru=NODE.mru, sru=1000 * GiB)
    size = capacity.SliceSize(cru=1, mru=4 * GiB, sru=0, rootfs=2 * GiB)
    for n in range(3):
        assert machine.place(size, name=f"vm{n}", deployment_id=n)[0] is not None
    machine.vms.pop()  # the third goes again: room for it, and 256 MiB more
    running = next(m / 60 for m in range(15) if fleet.test_vm_running(_spec("v3.14.7"), m / 60))
    machine.test_vm = fleet.test_vm_running(_spec("v3.14.7"), running)
    vm, refusal = machine.place(size, name="vm3", deployment_id=3)
    assert vm is None and "cannot fulfil required memory size" in refusal.raw


@pytest.mark.parametrize(
    "version",
    [
        "v3.14.6",
        "v3.14.7",
        "v3.14.8",
        "v3.14.7-patch.1",
        "v3.14.8-patch.0",
        "v3.14.8-patch.1",
        "v3.15.0",
        "v3.14.0-sim",
    ],
)
def test_the_simulators_own_reading_agrees_with_the_products(version):
    from sim.grid.machine import _fifteen_minute_build

    assert _fifteen_minute_build(version) == capacity.test_vm_schedule(version).always_there


def test_the_nodes_kept_memory_names_the_test_vm_on_a_15_minute_build():
    from dashboard.capacity.kept import memory_kept

    zos = capacity.PROFILES["zos"]
    kept = memory_kept(NODE, zos, occupied=(), free=(), observed=_observed("v3.14.7"))
    hidden = next(p for p in kept.parts if p.key == "hidden")
    assert hidden.size == capacity.TEST_VM_MRU
    assert hidden.source.startswith("ZOS's test VM kept (512 MiB, every 15 minutes on its build)")
