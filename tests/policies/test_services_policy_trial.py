"""dashboard.policies.services.policy_trial: a month of traffic on the registered fleet, the policy in force against a candidate."""

import pytest

from dashboard import capacity
from dashboard.capacity import GiB
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import JobError, job_claim, job_request
from dashboard.models import Job, Node
from dashboard.policies.services.policy_trial import fleet_sample, node_spec, policy_trial_parameters

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_fleet(sim_node):
    """Three registered nodes under the built-in zos policy; one taught 1 GiB of hidden use per VM."""
    sim_node(21, cru=8, mru=32 * GiB, sru=960 * GiB, farm_id=4)
    sim_node(22, cru=8, mru=16 * GiB, sru=480 * GiB, pools=[240 * GiB, 240 * GiB], farm_id=4)
    sim_node(23, cru=16, mru=64 * GiB, sru=1920 * GiB, farm_id=4, per_vm_overhead_mru=GiB)
    Node.objects.filter(grid_id=23).update(hidden_mru_per_vm=GiB)
    return Node.objects.order_by("grid_id")


def tried(candidate: capacity.Policy, **scope) -> Job:
    scope.setdefault("scope", "fleet")
    job = job_request(kind=Job.Kind.SIMULATE, parameters=policy_trial_parameters(candidate=candidate, **scope)).job
    job_execute(job=job_claim(job_id=job.pk))
    job.refresh_from_db()
    return job


def overhead(mru: int) -> capacity.Policy:
    return capacity.with_overrides(capacity.profile("zos"), overhead_mru_per_vm=mru, version=2)


def test_it_gives_both_policies_figures(small_fleet):
    job = tried(overhead(3 * GiB))
    policies = job.result["policies"]
    assert job.state == Job.State.SUCCEEDED, job.error
    assert set(policies) == {"in_force", "candidate"}
    assert {"deploys", "refused", "refused_after_first", "utilisation", "phantom_slice_hours"} <= set(
        policies["candidate"]
    )


def test_it_shows_a_3_gib_overhead_uses_less_than_the_zos_policy_in_force(small_fleet):
    result = tried(overhead(3 * GiB)).result
    assert result["policies"]["candidate"]["utilisation"] < result["policies"]["in_force"]["utilisation"]
    assert "uses less of what ZOS allows" in result["words"]


def test_it_names_both_policies_and_the_fleet_it_ran_on(small_fleet):
    result = tried(overhead(3 * GiB)).result
    assert (result["in_force"], result["candidate"]) == ("zos v1 (in force)", "zos v2 (candidate)")
    assert (result["nodes"], result["hidden_use"], result["sampled"]) == (3, 1, False)


def test_it_runs_on_the_nodes_of_the_candidates_scope_only(small_fleet, sim_node):
    sim_node(31, cru=8, mru=32 * GiB, sru=960 * GiB, farm_id=9)
    result = tried(overhead(GiB), scope="farm", farm_id=9).result
    assert (result["nodes_in_scope"], result["nodes"]) == (1, 1)


def test_it_takes_the_shape_and_the_learnt_hidden_use_of_a_node(small_fleet):
    spec = node_spec(small_fleet.get(grid_id=23))
    assert (spec.cru, spec.mru, spec.sru, spec.pools, spec.hidden_mru) == (16, 64 * GiB, 1920 * GiB, (1920 * GiB,), GiB)
    assert node_spec(small_fleet.get(grid_id=22)).pools == (240 * GiB, 240 * GiB)


def test_it_samples_a_large_fleet_the_same_way_each_time():
    nodes = [Node(grid_id=i) for i in range(1000, 0, -1)]
    first = fleet_sample(nodes, limit=300)
    assert len(first) == 300 and [n.grid_id for n in first] == [n.grid_id for n in fleet_sample(nodes, limit=300)]
    assert [n.grid_id for n in first] == sorted(n.grid_id for n in first)


def test_it_fails_with_words_when_no_node_is_in_scope(small_fleet):
    job = tried(overhead(GiB), scope="farm", farm_id=77)
    assert job.state == Job.State.FAILED and "nothing to try it on" in job.error


def test_it_reports_progress_while_it_runs(small_fleet):
    job = tried(overhead(GiB))
    assert (job.progress_done, job.progress_total) == (job.progress_total, 2 * job.result["events"])


def test_it_runs_one_policy_trial_at_a_time(small_fleet):
    parameters = policy_trial_parameters(candidate=overhead(GiB), scope="fleet")
    first = job_request(kind=Job.Kind.SIMULATE, parameters=parameters)
    again = job_request(kind=Job.Kind.SIMULATE, parameters=parameters)
    assert (again.created, again.job.pk) == (False, first.job.pk)


def test_it_refuses_a_policy_trial_without_a_candidate():
    with pytest.raises(JobError, match="candidate"):
        job_request(kind=Job.Kind.SIMULATE, parameters={})


@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_the_policy_trial_to_its_result(small_fleet, live_worker, job_finished):
    job = job_request(
        kind=Job.Kind.SIMULATE, parameters=policy_trial_parameters(candidate=overhead(3 * GiB), scope="fleet")
    ).job
    done = job_finished(job, timeout=60)
    assert done.state == Job.State.SUCCEEDED, done.error
    assert done.result["policies"]["candidate"]["utilisation"] < done.result["policies"]["in_force"]["utilisation"]
