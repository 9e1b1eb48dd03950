"""What refusals teach, end to end on the simulated grid (which hides its memory use as ZOS does)."""

import pytest

from dashboard.capacity import GiB
from dashboard.catalogs.services.precheck import precheck_run
from dashboard.deployments.services.deploy import slice_deploy, slices_deploy_all_free
from dashboard.deployments.services.deploy_delete import deployment_delete
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.lessons.services.observations import observations_clear
from dashboard.models import Deployment, Job, Node, Observation
from dashboard.nodes.services.registration import node_register

pytestmark = pytest.mark.django_db
HIDDEN = dict(cru=24, mru=64 * GiB, sru=1863 * GiB, farm_id=902, per_vm_overhead_mru=GiB)
THREE_POOLS = dict(cru=16, mru=62 * GiB, sru=1397 * GiB, pools=[465 * GiB, 466 * GiB, 466 * GiB])


def reregister(node: Node) -> dict:
    job = job_claim(job_id=job_request(kind=Job.Kind.REREGISTER, node=node).job.pk)
    job_execute(job=job)
    job.refresh_from_db()
    assert job.state == "succeeded", job.error
    return job.result


def refused_by_zos(deployments) -> list:
    return [d for d in deployments if d.state == Deployment.State.FAILED]


def test_after_a_memory_refusal_the_precheck_says_nothing_fits_until_something_changes(sim_node):
    node = sim_node(2877, **HIDDEN)
    done = slices_deploy_all_free(node=node)
    assert len(refused_by_zos(done)) == 1  # the one that teaches
    assert precheck_run(node=node).precheck.placeable_now == 0

    first_vm = next(d for d in done if d.state == Deployment.State.DEPLOYED)
    deployment_delete(deployment=first_vm)  # something changes: a VM goes
    assert precheck_run(node=Node.objects.get(pk=node.pk)).precheck.placeable_now == 1
    assert slice_deploy(node=Node.objects.get(pk=node.pk), slice_index=first_vm.slice_index).state == "deployed"


@pytest.mark.slow
def test_a_reregister_after_a_refusal_gives_a_catalog_that_deploys_in_full(sim_node):
    node = sim_node(2877, **HIDDEN)
    slice_deploy(node=node, slice_index=0)
    slices_deploy_all_free(node=node, precheck=False)  # ZOS refuses what does not fit; the first teaches
    for deployment in Deployment.objects.filter(node=node, state="deployed")[1:]:
        deployment_delete(deployment=deployment)  # the marketplace's customers leave

    result = reregister(Node.objects.get(pk=node.pk))
    node = Node.objects.get(pk=node.pk)
    after = slices_deploy_all_free(node=node, precheck=False)
    assert refused_by_zos(after) == []
    assert result["after"]["deployable"] == node.deployable == node.slices.count()


def test_placeable_now_on_a_busy_node_with_several_pools_is_what_deploys(sim_node):
    node = sim_node(2456, **THREE_POOLS)
    for index in range(5):
        slice_deploy(node=node, slice_index=index)
    placeable = precheck_run(node=Node.objects.get(pk=node.pk)).precheck.placeable_now
    done = slices_deploy_all_free(node=Node.objects.get(pk=node.pk), precheck=False)
    assert sum(d.state == "deployed" for d in done) == placeable == len(done)


def test_a_fresh_node_with_several_pools_deploys_its_whole_catalog(sim_node):
    node = sim_node(2456, **THREE_POOLS)
    done = slices_deploy_all_free(node=node, precheck=False)
    assert [d.state for d in done] == ["deployed"] * node.slices.count()


def test_a_disk_refusal_on_a_node_whose_pools_are_unknown_bounds_the_pools(sim_node):
    # Two 465 GiB SSDs the catalog does not know: the sixth 151 GiB disk fits neither.
    sim_node(2310, cru=8, mru=31 * GiB, sru=930 * GiB, pools=[465 * GiB, 465 * GiB], register=False)
    live = sim_node.grid.node(2310)
    # Its catalog carved on the SSD total alone, as before the carve knew pools may be hidden (a
    # catalog kept from then), and its pools still unknown.
    node = node_register(
        node_id=2310, total=live.total, farm_id=live.farm_id, status=live.status, used=live.used, pools=[930 * GiB]
    )
    Node.objects.filter(pk=node.pk).update(pools_sru=None)
    done = slices_deploy_all_free(node=node)
    assert [d.cause for d in refused_by_zos(done)] == ["disk"]
    node = Node.objects.get(pk=node.pk)
    assert node.observations.get().kind == Observation.Kind.DISK
    assert precheck_run(node=node).precheck.placeable_now == 0
    assert (node.phantom_reasons, node.stale) == ({"pool": 1}, True)


def test_clearing_the_observations_gives_the_node_its_accounting_back(sim_node):
    node = sim_node(2877, **HIDDEN)
    slices_deploy_all_free(node=node)
    node = Node.objects.get(pk=node.pk)
    assert observations_clear(node=node) == 1
    node = Node.objects.get(pk=node.pk)
    assert (node.hidden_mru_per_vm, node.placeable_now) == (0, node.slices_free)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the refusals' own turns end with their committed transactions
def test_clearing_waits_for_the_turn_of_the_build_its_readings_taught(sim_node):
    """A clear changes what its build's reports are judged against, so it takes the build's turn first
    (lessons.services.group_steps.group_turn) as reports do: while another session holds that turn, it waits."""
    import psycopg
    from django.db import OperationalError, connection, transaction

    node = sim_node(2878, **HIDDEN)
    slices_deploy_all_free(node=node)
    build = Observation.objects.get(node=node).zos_build
    params = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"}, autocommit=True) as other:
        other.execute("SET lock_timeout = '5s'")  # never hang the suite
        other.execute("SELECT pg_advisory_lock(hashtext(%s))", [f"memory-group:{build}"])
        with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '300ms'")
            observations_clear(node=node)
    assert Observation.objects.get(node=node).cleared_at is None  # nothing cleared while it waited
    assert observations_clear(node=node) == 1  # the turn given back, it runs
