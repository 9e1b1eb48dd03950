import itertools
import tempfile
from pathlib import Path

import pytest
from django.db.models import F
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from dashboard.capacity import GiB, MiB, zos_rootfs
from dashboard.deployments.selectors.deployments import deployment_words
from dashboard.deployments.services.deploy import (
    SliceBusy,
    SliceChanged,
    SliceNotFound,
    SliceNotFree,
    slice_deploy,
    slices_deploy_all_free,
)
from dashboard.deployments.services.deploy_delete import deployment_delete
from dashboard.grid.types import DeployNotSupported, GridUnavailable, MalformedPayload
from dashboard.models import AuditEvent, CapacitySample, Deployment, Node, Slice
from dashboard.nodes.services.registration import node_register
from sim.grid import SimulatedGrid

NODE_1774 = dict(cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana")
pytestmark = pytest.mark.django_db


def test_it_deploys_every_slice_of_the_default_carve_of_1774(sim_node):
    node = sim_node(1774, **NODE_1774)
    done = slices_deploy_all_free(node=node)
    assert [d.state for d in done] == ["deployed"] * 6
    assert node.slices.filter(state="deployed").count() == 6


def test_it_refuses_the_seventh_legacy_slice_by_precheck_naming_memory(sim_node):
    node = sim_node(1774, policy_name="legacy", **NODE_1774)
    done = slices_deploy_all_free(node=node)
    refused = done[-1]
    assert [d.state for d in done] == ["deployed"] * 6 + ["refused"]
    assert (refused.cause, refused.needed_bytes, refused.raw_error) == ("memory", 4 * GiB, "")
    assert refused.usable_bytes == 31 * GiB - 24 * GiB - 31 * GiB // 10  # what is left beside 6 VMs and the reserve


def test_it_keeps_the_precheck_verdict_words_on_a_refusal(sim_node):
    node = sim_node(1774, policy_name="legacy", **NODE_1774)
    refused = slices_deploy_all_free(node=node)[-1]
    assert "memory: needs 4 GiB, 3.9 GiB available" in refused.capacity_seen["verdict"]["words"]
    assert "refused by the precheck" in deployment_words(refused)


def test_it_sends_the_seventh_legacy_slice_to_the_grid_without_precheck(sim_node):
    node = sim_node(1774, policy_name="legacy", **NODE_1774)
    failed = slices_deploy_all_free(node=node, precheck=False)[-1]
    assert (failed.state, failed.cause, failed.needed_bytes) == ("failed", "memory", 4 * GiB)
    assert "cannot fulfil required memory size 4294967296 bytes out of usable" in failed.raw_error


def test_it_records_memory_when_zos_refuses_on_memory_really_in_use(sim_node):
    # A hidden 1 GiB per VM: the accounting (and so the precheck) sees room that the host does not have.
    node = sim_node(2877, cru=24, mru=64 * GiB, sru=1863 * GiB, per_vm_overhead_mru=GiB)
    done = slices_deploy_all_free(node=node)
    failed = [d for d in done if d.state != "deployed"]
    # ZOS refuses the 12th (the one that teaches); the precheck then refuses the rest itself.
    assert [(d.slice_index, d.state, d.cause) for d in failed] == [
        (11, "failed", "memory"),
        (12, "refused", "memory"),
        (13, "refused", "memory"),
    ]
    assert "cannot fulfil required memory size 4294967296 bytes out of usable" in failed[0].raw_error
    assert (failed[0].needed_bytes, failed[0].usable_bytes) == (4 * GiB, 64 * GiB - 55 * GiB - 64 * GiB // 10)
    node.refresh_from_db()
    assert (node.hidden_mru_per_vm, node.observations.get().vm_count) == (GiB, 11)


def test_it_leaves_a_failed_slice_free(sim_node):
    node = sim_node(1774, policy_name="legacy", **NODE_1774)
    slices_deploy_all_free(node=node, precheck=False)
    assert node.slices.get(index=6).state == "free"


def test_it_keeps_the_capacity_it_saw_on_every_deployment(sim_node):
    node = sim_node(1774, policy_name="legacy", **NODE_1774)
    done = slices_deploy_all_free(node=node, precheck=False)
    seen = done[-1].capacity_seen
    assert all({"total", "used", "status"} <= set(d.capacity_seen) for d in done)
    assert (seen["status"], seen["total"]["mru"], seen["used"]["mru"]) == ("up", 31 * GiB, 24 * GiB + 31 * GiB // 10)


def test_it_records_the_grid_workload_and_marks_the_slice_deployed(sim_node):
    node = sim_node(1774, **NODE_1774)
    deployment = slice_deploy(node=node, slice_index=2)
    vms = sim_node.grid.vms(1774)
    assert [vm.workload_id for vm in vms] == [deployment.grid_workload_id]
    assert node.slices.get(index=2).state == "deployed"


def test_it_records_disk_when_no_single_pool_holds_the_disk(sim_node):
    # A catalog carved on the SSD total alone (as before the carve knew pools may be hidden), the pools unknown.
    sim_node.grid.add_node(2310, cru=8, mru=31 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])
    node = node_register(node_id=2310, total=sim_node.grid.node(2310).total, farm_id=1, pools=[930 * GiB])
    Node.objects.filter(pk=node.pk).update(pools_sru=None)
    done = slices_deploy_all_free(node=node)
    assert [(d.state, d.cause) for d in done] == [("deployed", "")] * 5 + [("failed", "disk")]
    assert "not enough space left in pools of this type ssd" in done[-1].raw_error


def test_every_slice_deploys_on_two_ssds_nobody_reported_once_carved_for_unknown_pools(sim_node):
    # The same node registered from the Grid Proxy's face alone: carved for every plausible layout.
    sim_node.grid.add_node(2310, cru=8, mru=31 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB])
    node = node_register(node_id=2310, total=sim_node.grid.node(2310).total, farm_id=1)
    done = slices_deploy_all_free(node=node)
    assert [(d.state, d.cause) for d in done] == [("deployed", "")] * 6


def test_it_records_node_offline_when_the_grid_refuses_a_down_node(sim_node):
    node = sim_node(3021, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), status="down")
    deployment = slice_deploy(node=node, slice_index=0, precheck=False)
    assert (deployment.state, deployment.cause) == ("failed", "node-offline")
    assert deployment.raw_error


def test_it_refuses_a_down_node_by_precheck_without_asking_the_grid_to_deploy(sim_node):
    node = sim_node(3021, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), status="down")
    deployment = slice_deploy(node=node, slice_index=0)
    assert (deployment.state, deployment.cause, deployment.capacity_seen["status"]) == (
        "refused",
        "node-offline",
        "down",
    )
    assert sim_node.grid.vms(3021) == []


def test_it_refuses_a_slice_that_is_not_free_and_writes_nothing(sim_node):
    node = sim_node(1774, **NODE_1774)
    Slice.objects.filter(node=node, index=1).update(state="rented", rented_by_twin_id=77)
    with pytest.raises(SliceNotFree, match="slice 1 of node 1774 is rented"):
        slice_deploy(node=node, slice_index=1)
    assert not Deployment.objects.exists()


def test_it_refuses_an_unknown_slice_index(sim_node):
    node = sim_node(1774, **NODE_1774)
    with pytest.raises(SliceNotFound, match=r"no slice 9 \(its slices: 0, 1, 2, 3, 4, 5\)"):
        slice_deploy(node=node, slice_index=9)


def test_it_refuses_a_slice_whose_deploy_is_in_flight(sim_node):
    node = sim_node(1774, **NODE_1774)
    s = node.slices.get(index=0)
    Deployment.objects.create(node=node, slice=s, slice_index=0, cru=s.cru, mru=s.mru, sru=s.sru)
    with pytest.raises(SliceBusy):
        slice_deploy(node=node, slice_index=0)
    assert sim_node.grid.vms(1774) == []


class RecarvingGrid(SimulatedGrid):
    """Someone re-registers the node while its capacity is being read."""

    def node(self, node_id):
        live = super().node(node_id)
        Slice.objects.filter(node__grid_id=node_id, index=0).update(sru=F("sru") - GiB)
        return live


def test_it_refuses_a_slice_re_carved_while_the_grid_was_read(sim_node, simgrid_path):
    node = sim_node(1774, **NODE_1774)
    with pytest.raises(SliceChanged, match="re-carved"):
        slice_deploy(node=node, slice_index=0, grid=RecarvingGrid(simgrid_path))
    assert not Deployment.objects.exists()


def test_it_records_validation_when_zos_refuses_a_slice_below_its_minimum_memory(sim_node):
    node = sim_node(1774, **NODE_1774)
    Slice.objects.filter(node=node, index=0).update(mru=200 * MiB)  # a corrupt catalog slot
    deployment = slice_deploy(node=node, slice_index=0, precheck=False)
    assert (deployment.state, deployment.cause) == ("failed", "validation")
    assert "mem capacity can't be less that 250M" in deployment.raw_error


def test_it_refuses_a_slice_below_zos_minimum_memory_by_precheck(sim_node):
    node = sim_node(1774, **NODE_1774)
    Slice.objects.filter(node=node, index=0).update(mru=200 * MiB)
    deployment = slice_deploy(node=node, slice_index=0)
    assert (deployment.state, deployment.cause, deployment.needed_bytes) == ("refused", "validation", 250 * MiB)


class DyingGrid(SimulatedGrid):
    """The grid deploys the VM, then the process recording it dies (a kill, a power cut)."""

    def deploy_vm(self, node_id, size, *, name):
        super().deploy_vm(node_id, size, name=name)
        raise KeyboardInterrupt


def test_it_leaves_an_honest_deploying_record_when_the_process_dies_mid_deploy(sim_node, simgrid_path):
    node = sim_node(1774, **NODE_1774)
    with pytest.raises(KeyboardInterrupt):
        slice_deploy(node=node, slice_index=0, grid=DyingGrid(simgrid_path))
    assert list(Deployment.objects.values_list("state", flat=True)) == ["deploying"]


def test_it_samples_capacity_after_each_deploy_for_calibration(sim_node):
    node = sim_node(1774, **NODE_1774)
    slices_deploy_all_free(node=node)
    samples = list(CapacitySample.objects.filter(node=node).order_by("at", "pk"))
    size = node.slices.get(index=0)
    assert [s.vm_count for s in samples] == [1, 2, 3, 4, 5, 6]
    assert samples[-1].vm_sru == 6 * (size.sru + zos_rootfs(size.cru, size.mru))


class NoStatisticsGrid(SimulatedGrid):
    def statistics(self, node_id):
        raise GridUnavailable("statistics timed out")


def test_it_deploys_even_when_the_statistics_cannot_be_read(sim_node, simgrid_path):
    node = sim_node(1774, **NODE_1774)
    deployment = slice_deploy(node=node, slice_index=0, grid=NoStatisticsGrid(simgrid_path))
    assert deployment.state == "deployed"
    assert not CapacitySample.objects.exists()


def test_it_writes_an_audit_event_for_every_attempt(sim_node, django_user_model):
    user = django_user_model.objects.create_user("ops")
    node = sim_node(1774, policy_name="legacy", **NODE_1774)
    slices_deploy_all_free(node=node, by=user, source="command")
    events = AuditEvent.objects.filter(action__startswith="deployment.", actor=user, source="command")
    assert events.count() == 7
    refused = events.get(detail__slice=6)
    assert refused.action == "deployment.refused" and "refused by the precheck" in refused.message


def test_it_keeps_the_node_figures_current_after_a_deploy(sim_node):
    node = sim_node(1774, policy_name="legacy", **NODE_1774)
    slice_deploy(node=node, slice_index=0)
    node.refresh_from_db()
    assert (node.placeable_now, node.phantom_slices, node.used_mru) == (5, 1, 4 * GiB + 31 * GiB // 10)


def test_it_deletes_a_deployment_and_frees_its_slice(sim_node):
    node = sim_node(1774, **NODE_1774)
    deployment = deployment_delete(deployment=slice_deploy(node=node, slice_index=0))
    assert (deployment.state, node.slices.get(index=0).state) == ("deleted", "free")
    assert sim_node.grid.vms(1774) == []


def _registered_without_grid():
    from dashboard.capacity import Resources

    return node_register(
        node_id=1774, total=Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB)), farm_id=4242, farm_name="mitana"
    )


def test_it_raises_grid_unavailable_and_writes_nothing_when_the_grid_is_down(gridproxy_down):
    node = _registered_without_grid()
    with pytest.raises(GridUnavailable):
        slice_deploy(node=node, slice_index=0)
    assert not Deployment.objects.exists()


def test_it_raises_malformed_payload_and_writes_nothing(gridproxy_serving):
    gridproxy_serving({"/nodes/1774": {"nodeId": 1774, "capacity": {"total_resources": {"mru": "lots"}}}})
    node = _registered_without_grid()
    with pytest.raises(MalformedPayload):
        slice_deploy(node=node, slice_index=0)
    assert not Deployment.objects.exists()


def test_it_refuses_to_deploy_through_the_read_only_grid_proxy(gridproxy_serving):
    payload = (Path(__file__).resolve().parents[1] / "data" / "gridproxy" / "node-1774.json").read_bytes()
    gridproxy_serving({"/nodes/1774": payload})
    node = _registered_without_grid()
    with pytest.raises(DeployNotSupported, match="read-only"):
        slice_deploy(node=node, slice_index=0)
    assert not Deployment.objects.exists()


_node_ids = itertools.count(50_000)


# Long (every slice of a dozen random nodes deployed through the services): `make test` runs it;
# test_grid_simulator's carve property and test_capacity_properties cover the rule in `make check`.
@pytest.mark.slow
@hypothesis_settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cru=st.integers(1, 64),
    mru_gib=st.integers(4, 256),
    sru_gib=st.integers(60, 8000),
    two_pools=st.booleans(),
)
def test_it_deploys_every_slice_of_the_default_carve_of_any_node(cru, mru_gib, sru_gib, two_pools):
    node_id = next(_node_ids)
    with tempfile.TemporaryDirectory(prefix="deploy-prop-") as scratch:
        grid = SimulatedGrid(Path(scratch) / "simgrid.sqlite3")
        sru = sru_gib * GiB
        pools = [sru // 2, sru - sru // 2] if two_pools else None
        grid.add_node(node_id, cru=cru, mru=mru_gib * GiB, sru=sru, pools=pools)
        node = node_register(node_id=node_id, total=grid.node(node_id).total, farm_id=1, pools=pools)
        done = slices_deploy_all_free(node=node, grid=grid)
        assert [(d.state, d.raw_error) for d in done] == [("deployed", "")] * node.slices.count()
        assert len(grid.vms(node_id)) == len(done)
