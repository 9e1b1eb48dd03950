"""The simulated ZOS grid: ZOS's accounting, its exact refusals, and safe concurrent deploys."""

import sqlite3
import threading

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dashboard.capacity import PROFILES, GiB, MiB, Resources, SliceSize, carve
from dashboard.grid.types import (
    DeploymentFailed,
    GridUnavailable,
    NodeAway,
    NodeNotFound,
    NodeOffline,
    WorkloadNotFound,
)
from sim.grid import NodeAlreadyOnGrid, SimulatedGrid, zos_reserve_mru
from tests.factories import TOTAL_1774

NODE_1774 = {"cru": TOTAL_1774.cru, "mru": TOTAL_1774.mru, "sru": TOTAL_1774.sru}
ZOS_SLICE = SliceSize(cru=1, mru=4 * GiB, sru=151 * GiB, rootfs=500 * MiB)
LEGACY_SLICE = SliceSize(cru=1, mru=4 * GiB, sru=133 * GiB)
# 31 GiB - (6 x 4 GiB + 31 GiB // 10): what ZOS has left for a seventh VM on node 1774.
USABLE_AFTER_SIX = 33285996544 - (6 * 4 * GiB + 3328599654)


@pytest.fixture
def grid(tmp_path):
    return SimulatedGrid(tmp_path / "simgrid.sqlite3")


@pytest.fixture
def node_1774(grid):
    grid.add_node(1774, **NODE_1774, farm_id=4242)
    return grid


def deploy_many(grid, node_id, size, count, prefix="vm"):
    return [grid.deploy_vm(node_id, size, name=f"{prefix}{i}") for i in range(count)]


# --- node 1774, the node ------------------------------------------------------------


def test_it_takes_six_zos_slices_on_node_1774(node_1774):
    deployed = deploy_many(node_1774, 1774, ZOS_SLICE, 6)

    assert [vm.workload_id for vm in deployed] == [f"2774-{i}-vm{i - 1}" for i in range(1, 7)]


def test_it_refuses_a_seventh_zos_slice_on_memory_with_the_exact_zos_message(node_1774):
    deploy_many(node_1774, 1774, ZOS_SLICE, 6)

    with pytest.raises(DeploymentFailed) as raised:
        node_1774.deploy_vm(1774, ZOS_SLICE, name="vm6")

    assert raised.value.raw == (
        "workload vm6 within deployment 7 failed with error: failed to satisfy required capacity: "
        f"cannot fulfil required memory size 4294967296 bytes out of usable {USABLE_AFTER_SIX} bytes"
    )


def test_it_refuses_the_seventh_legacy_slice_on_memory(node_1774):
    deploy_many(node_1774, 1774, LEGACY_SLICE, 6)

    with pytest.raises(DeploymentFailed) as raised:
        node_1774.deploy_vm(1774, LEGACY_SLICE, name="vm6")

    assert (
        f"cannot fulfil required memory size 4294967296 bytes out of usable {USABLE_AFTER_SIX} bytes"
        in raised.value.raw
    )


def test_it_refuses_a_data_disk_no_pool_can_hold_when_memory_fits(node_1774):
    deploy_many(node_1774, 1774, ZOS_SLICE, 5)

    with pytest.raises(DeploymentFailed) as raised:
        node_1774.deploy_vm(1774, SliceSize(cru=1, mru=4 * GiB, sru=300 * GiB), name="vm5")

    assert raised.value.raw == (
        "workload vm5disk within deployment 6 failed with error: failed to find a candidate to host vdisk "
        f"of size '{300 * GiB}': not enough space left in pools of this type ssd"
    )


def test_it_reports_used_capacity_the_way_the_proxy_does(node_1774):
    deploy_many(node_1774, 1774, ZOS_SLICE, 2)

    used = node_1774.node(1774).used

    assert used == Resources(cru=2, mru=8 * GiB + 3328599654, sru=2 * (151 * GiB + 500 * MiB) + 20 * GiB)


def test_it_reports_statistics_with_the_reserve_as_system(node_1774):
    deploy_many(node_1774, 1774, ZOS_SLICE, 1)

    stats = node_1774.statistics(1774)

    assert (stats.system.mru, stats.system.sru, stats.used.mru, stats.deployments) == (
        3328599654,
        20 * GiB,
        4 * GiB + 3328599654,
        1,
    )


# --- disks are placed per pool --------------------------------------------------------------


def test_two_465_gib_pools_refuse_one_500_gib_disk(grid):
    grid.add_node(7, cru=8, mru=64 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])

    with pytest.raises(DeploymentFailed) as raised:
        grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=500 * GiB), name="big")

    assert raised.value.raw == (
        "workload bigdisk within deployment 1 failed with error: failed to find a candidate to host vdisk "
        f"of size '{500 * GiB}': not enough space left in pools of this type ssd"
    )


def test_it_puts_zos_cache_in_the_pool_with_the_most_space(grid):
    grid.add_node(7, cru=8, mru=64 * GiB, sru=930 * GiB, pools=[400 * GiB, 530 * GiB])

    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=500 * GiB), name="a")

    # 530 GiB less the 20 GiB cache still holds 500 GiB; the 400 GiB pool was never mounted.
    assert [(vm.data_pool, vm.rootfs_pool) for vm in grid.vms(7)] == [(1, 1)]


def test_it_mounts_the_next_pool_only_when_no_mounted_one_holds_the_disk(grid):
    grid.add_node(7, cru=8, mru=64 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])

    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=400 * GiB), name="a")
    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=400 * GiB), name="b")

    # b's data disk mounts pool 1; its rootfs then goes where most room is left: pool 1 too.
    assert [(vm.data_pool, vm.rootfs_pool) for vm in grid.vms(7)] == [(0, 0), (1, 1)]


def test_it_puts_a_disk_in_the_mounted_pool_with_the_most_room_left(grid):
    grid.add_node(7, cru=8, mru=64 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])
    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=400 * GiB), name="a")
    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=300 * GiB), name="b")  # mounts pool 1

    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=40 * GiB), name="c")

    # Pool 0 has 44.5 GiB left, pool 1 164.5 GiB: c goes to pool 1, not the first that holds it.
    assert [(vm.data_pool, vm.rootfs_pool) for vm in grid.vms(7)][-1] == (1, 1)


def test_a_data_disk_prefers_a_pool_that_already_holds_vdisks(grid):
    grid.add_node(7, cru=8, mru=64 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])
    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=0), name="a")  # no data disk: rootfs only
    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=440 * GiB), name="b")  # mounts pool 1 with a vdisk
    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=0), name="c")

    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=20 * GiB), name="d")

    # Pool 0 has the most room left (444 GiB against 24.5 GiB) but holds no vdisk.
    assert [vm.data_pool for vm in grid.vms(7)][-1] == 1


def test_its_proxy_face_tells_no_pools_as_the_grid_proxy_tells_none(grid):
    grid.add_node(7, cru=8, mru=64 * GiB, sru=930 * GiB, pools=[400 * GiB, 530 * GiB])

    assert grid.node(7).pools_sru is None
    assert grid.nodes(node_ids=[7]).nodes[0].pools_sru is None


def test_it_answers_storage_pools_as_a_zos_node_in_device_order_with_what_each_holds(grid):
    grid.add_node(7, cru=8, mru=64 * GiB, sru=930 * GiB, pools=[400 * GiB, 530 * GiB])
    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=100 * GiB), name="a")

    pools = grid.storage_pools(7)

    # zos-cache (20 GiB) and the VM (100 GiB and a 500 MiB rootfs) sit in the larger pool; the other is not mounted, so ZOS says 0 used.
    assert [(p.type, p.size, p.used) for p in pools] == [
        ("ssd", 400 * GiB, 0),
        ("ssd", 530 * GiB, 120 * GiB + 500 * MiB),
    ]
    assert len({p.name for p in pools}) == 2


def test_a_node_that_is_away_does_not_answer_for_its_pools(grid):
    grid.add_node(7, cru=8, mru=64 * GiB, sru=930 * GiB, status="standby")

    with pytest.raises(NodeAway, match="storage pools"):
        grid.storage_pools(7)


def test_a_release_frees_exactly_what_the_deploy_took(grid):
    grid.add_node(7, cru=8, mru=64 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])
    before = grid.node(7).used
    vm = grid.deploy_vm(7, SliceSize(cru=2, mru=8 * GiB, sru=100 * GiB), name="a")
    assert grid.node(7).used - before == Resources(cru=2, mru=8 * GiB, sru=102 * GiB)

    grid.delete_vm(7, vm.workload_id)

    assert grid.node(7).used == before
    grid.deploy_vm(7, SliceSize(cru=1, mru=4 * GiB, sru=444 * GiB), name="b")  # the room is all back


def test_it_refuses_a_rootfs_that_no_pool_can_hold(grid):
    grid.add_node(8, cru=4, mru=16 * GiB, sru=30 * GiB)  # 10 GiB left after the zos-cache

    with pytest.raises(DeploymentFailed) as raised:
        grid.deploy_vm(8, SliceSize(cru=1, mru=4 * GiB, sru=10 * GiB), name="vm")

    assert raised.value.raw == (
        "workload vm within deployment 1 failed with error: failed to create vm rootfs: "
        "not enough space left in pools of this type ssd"
    )


# --- memory actually in use -----------------------------------------------------------------


def test_a_hidden_per_vm_overhead_refuses_a_vm_the_proxy_has_room_for(grid):
    grid.add_node(9, cru=8, mru=31 * GiB, sru=931 * GiB, per_vm_overhead_mru=GiB)
    deploy_many(grid, 9, SliceSize(cru=1, mru=4 * GiB, sru=50 * GiB), 5)
    node = grid.node(9)
    assert node.total.mru - node.used.mru > 4 * GiB  # the proxy's figures say a sixth fits

    with pytest.raises(DeploymentFailed, match="cannot fulfil required memory size 4294967296 bytes"):
        grid.deploy_vm(9, SliceSize(cru=1, mru=4 * GiB, sru=50 * GiB), name="vm5")


def test_statistics_show_only_the_accounted_memory_as_zos_getcounters_does(grid):
    grid.add_node(9, cru=8, mru=31 * GiB, sru=931 * GiB, per_vm_overhead_mru=GiB)
    deploy_many(grid, 9, SliceSize(cru=1, mru=4 * GiB, sru=50 * GiB), 2)

    assert grid.statistics(9).used.mru == grid.node(9).used.mru == 8 * GiB + zos_reserve_mru(31 * GiB)


def test_a_memory_refusal_reveals_the_memory_really_in_use(grid):
    grid.add_node(9, cru=8, mru=31 * GiB, sru=931 * GiB, per_vm_overhead_mru=GiB)
    deploy_many(grid, 9, SliceSize(cru=1, mru=4 * GiB, sru=50 * GiB), 5)

    with pytest.raises(DeploymentFailed) as raised:
        grid.deploy_vm(9, SliceSize(cru=1, mru=4 * GiB, sru=50 * GiB), name="vm5")

    usable = int(raised.value.raw.rsplit("usable ", 1)[1].split()[0])
    assert 31 * GiB - usable == 5 * (4 * GiB + GiB) + zos_reserve_mru(31 * GiB)


# --- ZOS validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "reason"),
    [
        (SliceSize(cru=1, mru=200 * MiB, sru=GiB), "mem capacity can't be less that 250M"),
        # zosbase pkg/gridtypes/zos/zmachine.go Valid (the "capcity" typo is fixed at 063d895)
        (SliceSize(cru=0, mru=4 * GiB, sru=GiB), "cpu capacity can't be 0"),
        (
            SliceSize(cru=4, mru=16 * GiB, sru=GiB, rootfs=GiB),
            f"disk size can't be less that {2 * GiB}. Set to 0 for minimum",
        ),
    ],
)
def test_it_rejects_an_invalid_vm_before_creating_a_contract(node_1774, size, reason):
    with pytest.raises(DeploymentFailed) as raised:
        node_1774.deploy_vm(1774, size, name="vm")

    assert raised.value.raw == f"deployment is invalid: {reason}"
    assert node_1774.deploy_vm(1774, ZOS_SLICE, name="ok").workload_id == "2774-1-ok"


@pytest.mark.parametrize(
    ("threads", "words"), [(2, "invalid cpu must be between 1 and 2"), (1, "invalid cpu must be 1")]
)
def test_vmd_refuses_a_vm_of_more_vcpus_than_the_node_has_threads_and_frees_its_disks(grid, threads, words):
    # zosbase pkg/vm.go VM.Validate, wrapped by pkg/vm/manager.go Run: after the disks, so they are freed again.
    grid.add_node(7, cru=threads, mru=16 * GiB, sru=465 * GiB)
    with pytest.raises(DeploymentFailed) as raised:
        grid.deploy_vm(7, SliceSize(cru=4, mru=2 * GiB, sru=50 * GiB), name="vm")

    assert raised.value.raw.endswith(f"failed with error: machine configuration validation failed: {words}")
    assert grid.vms(7) == [] and sum(p.used for p in grid.storage_pools(7)) == grid.zos_cache(7)[0]
    assert grid.deploy_vm(7, SliceSize(cru=threads, mru=2 * GiB, sru=50 * GiB), name="ok").node_id == 7


def test_it_refuses_a_vm_name_zos_could_not_carry(node_1774):
    with pytest.raises(ValueError, match="VM name 'my vm' must be 1 to 40 letters"):
        node_1774.deploy_vm(1774, ZOS_SLICE, name="my vm")


# --- node status ----------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["down", "standby"])
def test_a_node_that_is_not_up_refuses_deploys(node_1774, status):
    node_1774.set_status(1774, status)

    with pytest.raises(NodeOffline, match=f"node 1774 is {status}: it cannot deploy anything"):
        node_1774.deploy_vm(1774, ZOS_SLICE, name="vm")


def test_a_down_node_is_still_reported_with_its_status(node_1774):
    node_1774.set_status(1774, "down")

    assert node_1774.node(1774).status == "down"


def test_a_down_node_has_no_statistics(node_1774):
    node_1774.set_status(1774, "standby")

    with pytest.raises(NodeOffline):
        node_1774.statistics(1774)


def test_it_says_which_node_is_not_on_the_grid(grid):
    with pytest.raises(NodeNotFound, match="node 404 is not on the simulated grid"):
        grid.node(404)


def test_it_refuses_an_unknown_status(node_1774):
    with pytest.raises(ValueError, match="status 'paused' is not one of up, down, standby"):
        node_1774.set_status(1774, "paused")


# --- deleting -------------------------------------------------------------------------------


def test_deleting_a_vm_gives_its_room_back(node_1774):
    deployed = deploy_many(node_1774, 1774, ZOS_SLICE, 6)

    node_1774.delete_vm(1774, deployed[2].workload_id)

    assert node_1774.deploy_vm(1774, ZOS_SLICE, name="again").node_id == 1774


def test_it_says_when_a_workload_to_delete_is_not_there(node_1774):
    with pytest.raises(WorkloadNotFound, match="workload 1-2-x is not deployed on node 1774"):
        node_1774.delete_vm(1774, "1-2-x")


# --- administration -------------------------------------------------------------------------


def test_it_refuses_to_overwrite_a_node_unless_told(node_1774):
    with pytest.raises(NodeAlreadyOnGrid, match="node 1774 is already on the simulated grid"):
        node_1774.add_node(1774, **NODE_1774)


def test_replacing_a_node_drops_its_vms(node_1774):
    deploy_many(node_1774, 1774, ZOS_SLICE, 2)

    node_1774.add_node(1774, cru=4, mru=16 * GiB, sru=500 * GiB, replace=True)

    assert (node_1774.vms(1774), node_1774.node(1774).total.mru) == ([], 16 * GiB)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"pools": [500 * GiB, 500 * GiB]},
            "the pools add up to 1000 GiB, more than the node's SSD total of 931.5 GiB",
        ),
        ({"pools": [10 * GiB, 15 * GiB]}, "the largest pool is 15 GiB; it must hold the 20 GiB zos-cache"),
        ({"sru": 10 * GiB}, "sru is 10 GiB, must be at least 20 GiB (the 20 GiB zos-cache ZOS keeps)"),
        ({"cru": 0}, "cru is 0, must be at least 1"),
        ({"mru": 100 * 1024 * GiB}, "mru is 100 TiB, more than any single node has (at most 64 TiB)"),
        ({"status": "broken"}, "status 'broken' is not one of up, down, standby"),
    ],
)
def test_it_refuses_a_node_it_cannot_model_and_changes_nothing(grid, changes, message):
    with pytest.raises(ValueError) as raised:
        grid.add_node(1774, **(NODE_1774 | changes))

    assert str(raised.value) == message
    assert grid.node_ids() == []


def test_reset_empties_the_grid_but_never_reuses_a_workload_id(node_1774):
    first = node_1774.deploy_vm(1774, ZOS_SLICE, name="vm")

    node_1774.reset()
    node_1774.add_node(1774, **NODE_1774)

    assert node_1774.deploy_vm(1774, ZOS_SLICE, name="vm").workload_id != first.workload_id


def test_it_pages_and_filters_nodes_by_farm(grid):
    for node_id, farm in ((1, 10), (2, 20), (3, 10), (4, 10)):
        grid.add_node(node_id, cru=4, mru=16 * GiB, sru=500 * GiB, farm_id=farm)

    page = grid.nodes(farm_id=10, page=2, size=2)

    assert [n.node_id for n in page.nodes] == [4]


def test_another_process_sees_the_same_grid(node_1774, tmp_path):
    node_1774.deploy_vm(1774, ZOS_SLICE, name="vm")

    assert len(SimulatedGrid(tmp_path / "simgrid.sqlite3").vms(1774)) == 1


def test_it_keeps_its_file_in_wal_mode(node_1774, tmp_path):
    with sqlite3.connect(tmp_path / "simgrid.sqlite3") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# --- concurrency ----------------------------------------------------------------------------


def test_concurrent_deploys_never_oversubscribe_a_node(tmp_path):
    path = tmp_path / "simgrid.sqlite3"
    SimulatedGrid(path).add_node(1774, **NODE_1774)
    start = threading.Barrier(12)
    outcomes: list[str] = []

    def deploy(i: int) -> None:
        grid = SimulatedGrid(path)  # its own connections, like web, worker and a command
        start.wait()
        try:
            grid.deploy_vm(1774, ZOS_SLICE, name=f"vm{i}")
            outcomes.append("deployed")
        except DeploymentFailed:
            outcomes.append("refused")

    threads = [threading.Thread(target=deploy, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["deployed"] * 6 + ["refused"] * 6
    assert SimulatedGrid(path).node(1774).used.sru <= NODE_1774["sru"]


# --- the zos carve against the simulated ZOS ------------------------------------------------


@st.composite
def sane_nodes(draw):
    mru = draw(st.integers(min_value=8, max_value=256)) * GiB + draw(st.integers(0, GiB - 1))
    pool_count = draw(st.integers(min_value=1, max_value=4))
    pools = [
        draw(st.integers(min_value=64, max_value=2048)) * GiB + draw(st.integers(0, GiB - 1)) for _ in range(pool_count)
    ]
    spare = draw(st.sampled_from([0, 0, GiB // 2]))  # disk not given to any pool
    cru = draw(st.integers(min_value=1, max_value=64))
    return cru, mru, sum(pools) + spare, pools


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(node=sane_nodes())
def test_the_zos_carve_deploys_fully_and_not_one_slice_more(grid, node):
    cru, mru, sru, pools = node
    catalog = carve(Resources(cru=cru, mru=mru, sru=sru), PROFILES["zos"], pools=pools)
    assume(catalog.new_slices > 0)
    grid.add_node(1, cru=cru, mru=mru, sru=sru, pools=pools, replace=True)

    deploy_many(grid, 1, catalog.slice, catalog.new_slices)

    with pytest.raises(DeploymentFailed):
        grid.deploy_vm(1, catalog.slice, name="one_more")


def test_the_reserve_is_a_tenth_with_a_2_gib_floor():
    assert (zos_reserve_mru(31 * GiB), zos_reserve_mru(8 * GiB)) == (3328599654, 2 * GiB)


def test_a_long_lived_grid_survives_its_file_being_recreated(node_1774, tmp_path):
    for leftover in tmp_path.glob("simgrid.sqlite3*"):
        leftover.unlink()

    assert node_1774.node_ids() == []


def test_it_refuses_a_file_written_by_a_newer_version(tmp_path):
    path = tmp_path / "simgrid.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")

    with pytest.raises(GridUnavailable, match="was written by a newer version \\(schema 99\\)"):
        SimulatedGrid(path).node_ids()
