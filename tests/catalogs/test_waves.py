"""Re-registers in waves: the order, Stop between batches, each node's previous generation and its rollback,
and the second admin's approval (catalogs.services.reregister.waves and .rollback)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.catalogs.services.reregister import BulkHooks, BulkLimits
from dashboard.catalogs.services.reregister.rollback import (
    RollbackRefused,
    node_rollback,
    run_rollback,
    run_rollback_request,
)
from dashboard.catalogs.services.reregister.waves import (
    WaveRefused,
    bulk_request,
    wave_order,
    wave_run_approve,
    wave_run_stop,
)
from dashboard.deployments.services.holds import hold_create, hold_release
from dashboard.jobs.services.job_reaper import jobs_reap
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim, job_request
from dashboard.models import AuditEvent, CatalogGeneration, Hold, Job, Node, Slice, WaveRun


def test_it_puts_the_canary_farm_first_then_batches():
    farm_of = {1: 1, 2: 2, 3: 1, 4: 2, 5: 1}
    waves = wave_order([1, 2, 3, 4, 5], farm_of, canary_farm=2, canary_share=50, batch_size=2)
    assert waves == [("canary: farm 2", [2, 4]), ("batch 1", [1, 3]), ("batch 2", [5])]


def test_it_takes_a_share_of_the_stale_nodes_evenly_as_the_canary():
    waves = wave_order(list(range(10)), {}, canary_farm=None, canary_share=20, batch_size=5)
    assert waves[0] == ("canary: 20% of the stale nodes", [0, 5])
    assert [pks for _label, pks in waves[1:]] == [[1, 2, 3, 4, 6], [7, 8, 9]]


def test_it_has_no_canary_at_zero_percent_nor_for_a_farm_with_no_stale_node():
    assert wave_order([1, 2], {1: 1, 2: 1}, canary_farm=None, canary_share=0, batch_size=5) == [("batch 1", [1, 2])]
    assert wave_order([1, 2], {1: 1, 2: 1}, canary_farm=9, canary_share=0, batch_size=5) == [("batch 1", [1, 2])]


def run(grid, job: Job, **seams) -> Job:
    """The job run in this process on the test's simulated grid, through the run's own seams."""
    job_execute(job=job_claim(job_id=job.pk), grid=grid, **seams)
    job.refresh_from_db()
    return job


def legacy_sizes(node: Node) -> list[tuple[int, int]]:
    return [(s.mru, s.sru) for s in node.slices.order_by("index")]


@pytest.mark.django_db
def test_a_run_in_waves_takes_the_canary_first_and_keeps_each_nodes_previous_generation(legacy_fleet):
    legacy_fleet(6, farm_id=1)
    legacy_fleet(3, first=100, farm_id=2)
    job = bulk_request(parameters={"canary_farm": 2, "batch_size": 4, "budget": 5}).job
    job = run(legacy_fleet.grid, job)
    wave = job.wave_run
    assert [(w["label"], w["nodes"], w["done"]) for w in wave.waves] == [
        ("canary: farm 2", 3, 3),
        ("batch 1", 4, 4),
        ("batch 2", 2, 2),
    ]
    assert (job.state, job.result["reregistered"], wave.state) == (Job.State.SUCCEEDED, 9, WaveRun.State.DONE)
    generation = CatalogGeneration.objects.get(job=job, node__grid_id=100)
    assert generation.before["carved_policy_name"] == "legacy" and len(generation.slices_before) == 3


@pytest.mark.django_db
def test_stop_ends_the_run_after_the_batch_in_hand_and_leaves_the_rest_untouched(legacy_fleet, role_user):
    nodes = legacy_fleet(9)
    before = {n.grid_id: legacy_sizes(n) for n in nodes}
    admin = role_user("admins")
    job = bulk_request(parameters={"canary_share": 0, "batch_size": 3}, by=admin).job

    def stop_after_first(done):
        if done == 3:
            wave_run_stop(wave=WaveRun.objects.get(job=job), by=admin)

    job = run(legacy_fleet.grid, job, limits=BulkLimits(chunk=3), hooks=BulkHooks(batch_done=stop_after_first))
    carved = dict(Node.objects.values_list("grid_id", "carved_policy_name"))
    assert [gid for gid, name in sorted(carved.items()) if name == "zos"] == [1, 2, 3]
    # The nodes not reached are exactly as they were: every slice of the old carve, none of the new.
    assert all(legacy_sizes(Node.objects.get(grid_id=gid)) == before[gid] for gid in range(4, 10))
    assert job.wave_run.state == WaveRun.State.STOPPED and job.state == Job.State.SUCCEEDED
    assert any("stopped by" in note and "6 node(s) not reached" in note for note in job.result["notes"])
    assert AuditEvent.objects.filter(action="waves.stopped", actor=admin, job=job).exists()


def occupy(node: Node, index: int, state: str = "rented") -> Slice:
    Slice.objects.filter(node=node, index=index).update(state=state, rented_by_twin_id=7)
    return Slice.objects.get(node=node, index=index)


@pytest.mark.django_db
def test_a_node_rolls_back_to_its_old_catalog_keeping_its_occupied_slice(legacy_fleet, role_user):
    (node,) = legacy_fleet(1)
    rented = occupy(node, 0)
    old = legacy_sizes(node)
    job = run(legacy_fleet.grid, bulk_request(parameters={"waves": True}).job)
    assert legacy_sizes(node) != old
    admin = role_user("admins")
    done = node_rollback(generation=CatalogGeneration.objects.get(job=job, node=node), by=admin)
    node.refresh_from_db()
    assert legacy_sizes(node) == old and node.carved_policy_name == "legacy" and node.stale
    assert Slice.objects.get(pk=rented.pk).state == "rented"  # the same row, untouched
    assert done["kept"] == 1
    assert AuditEvent.objects.filter(action="job.node-rolled-back", node=node, actor=admin).exists()


@pytest.mark.django_db
def test_a_slice_rented_since_the_reregister_blocks_the_rollback_said_plainly(legacy_fleet):
    (node,) = legacy_fleet(1)
    job = run(legacy_fleet.grid, bulk_request(parameters={"waves": True}).job)
    after = legacy_sizes(node)
    occupy(node, node.slices.order_by("index").last().index)
    with pytest.raises(RollbackRefused, match=r"since the re-register slice \d+ was rented \(free -> rented\)"):
        node_rollback(generation=CatalogGeneration.objects.get(job=job, node=node))
    assert legacy_sizes(node) == after  # nothing written


@pytest.mark.django_db
def test_an_added_slice_held_since_the_reregister_blocks_the_rollback_said_plainly(legacy_fleet):
    (node,) = legacy_fleet(1)
    job = run(legacy_fleet.grid, bulk_request(parameters={"waves": True}).job)
    after = legacy_sizes(node)
    added = node.slices.order_by("index").last()
    held = hold_create(node_id=1, slice_index=added.index, ttl_seconds=600, marketplace_id="buyer", source="command")
    with pytest.raises(RollbackRefused, match=rf"slice {added.index}, added by the re-register, is held for 'buyer'"):
        node_rollback(generation=CatalogGeneration.objects.get(job=job, node=node))
    held.refresh_from_db()
    assert legacy_sizes(node) == after and held.slice_id == added.pk  # nothing written


@pytest.mark.django_db
def test_a_released_hold_on_an_added_slice_lets_the_rollback_go(legacy_fleet):
    (node,) = legacy_fleet(1)
    old = legacy_sizes(node)
    job = run(legacy_fleet.grid, bulk_request(parameters={"waves": True}).job)
    added = node.slices.order_by("index").last()
    held = hold_create(node_id=1, slice_index=added.index, ttl_seconds=600, marketplace_id="buyer", source="command")
    hold_release(hold_id=held.pk, source="command")
    node_rollback(generation=CatalogGeneration.objects.get(job=job, node=node))
    held.refresh_from_db()
    assert legacy_sizes(node) == old and (held.end, held.slice_id) == (Hold.End.RELEASED, None)


@pytest.mark.django_db
def test_a_run_rolls_back_every_node_but_the_one_whose_slice_changed_hands(legacy_fleet):
    nodes = legacy_fleet(3)
    kept = occupy(nodes[0], 1, state="deployed")
    old = {n.grid_id: legacy_sizes(n) for n in nodes}
    job = run(legacy_fleet.grid, bulk_request(parameters={"batch_size": 2}).job)
    occupy(nodes[2], nodes[2].slices.order_by("index").last().index)
    summary = run_rollback(job=job)
    assert summary["rolled_back"] == [1, 2] and list(summary["blocked"]) == ["3"]
    assert [legacy_sizes(n) == old[n.grid_id] for n in nodes] == [True, True, False]
    assert Slice.objects.get(pk=kept.pk).state == "deployed"
    assert WaveRun.objects.get(job=job).rollback["rolled_back"] == [1, 2]


@pytest.mark.django_db
def test_a_run_over_the_approval_threshold_waits_for_a_second_admin(
    legacy_fleet, role_user, settings, django_capture_on_commit_callbacks
):
    legacy_fleet(4)
    settings.BULK_APPROVAL_OVER = 3
    asker, second = role_user("admins", username="ada"), role_user("admins", username="bob")
    with django_capture_on_commit_callbacks() as sent:
        job = bulk_request(by=asker).job
    assert sent == [] and job.wave_run.state == WaveRun.State.AWAITING_APPROVAL
    assert job_claim(job_id=job.pk) is None  # a stray message cannot start it
    with pytest.raises(WaveRefused, match="not the one who asked"):
        wave_run_approve(wave=job.wave_run, by=asker)
    with django_capture_on_commit_callbacks() as sent:
        wave_run_approve(wave=job.wave_run, by=second)
    assert len(sent) == 1 and WaveRun.objects.get(job=job).approved_by == second
    assert AuditEvent.objects.filter(action="waves.approved", actor=second, job=job).exists()


@pytest.mark.django_db
def test_the_reaper_leaves_a_run_waiting_for_approval_queued(legacy_fleet, settings):
    legacy_fleet(2)
    settings.BULK_APPROVAL_OVER = 1
    job = bulk_request().job
    jobs_reap(now=timezone.now() + timedelta(seconds=settings.JOB_QUEUED_TIMEOUT + 60))
    job.refresh_from_db()
    assert job.state == Job.State.QUEUED


@pytest.mark.django_db
def test_a_run_under_the_approval_threshold_starts_at_once(legacy_fleet, settings, django_capture_on_commit_callbacks):
    legacy_fleet(2)
    settings.BULK_APPROVAL_OVER = 2
    with django_capture_on_commit_callbacks() as sent:
        job = bulk_request().job
    assert len(sent) == 1 and not WaveRun.objects.filter(job=job).exists()


@pytest.mark.django_db
def test_refusals_on_the_runs_recarved_nodes_spend_its_budget_and_pause_it(legacy_fleet, role_user):
    from dashboard.models import Deployment

    nodes = legacy_fleet(4)
    admin = role_user("admins")
    job = bulk_request(parameters={"canary_share": 0, "batch_size": 2, "budget": 0}, by=admin).job

    def refused_after_the_first_batch(done):
        if done == 2:  # a buyer's deploy on a node this run re-carved is refused by ZOS
            Deployment.objects.create(
                node=nodes[0], slice_index=0, cru=1, mru=4 * 2**30, sru=10 * 2**30, state="failed", cause="memory"
            )

    seen = []

    def admin_stops(wave):
        seen.append((wave.state, wave.refusals, wave.failures))
        wave_run_stop(wave=wave, by=admin)

    job = run(
        legacy_fleet.grid,
        job,
        limits=BulkLimits(chunk=2),
        hooks=BulkHooks(batch_done=refused_after_the_first_batch, paused=admin_stops),
    )
    assert seen == [(WaveRun.State.PAUSED, 1, 0)]
    assert "1 refusal(s) and 0 failure(s) since it started, over its budget of 0" in job.wave_run.paused_reason
    assert set(Node.objects.filter(carved_policy_name="zos").values_list("grid_id", flat=True)) == {1, 2}


@pytest.mark.django_db
def test_a_paused_run_nobody_resumes_stops_itself_after_the_pause_limit(legacy_fleet, settings):
    settings.WAVES_PAUSE_LIMIT = 0  # past at once: the first look while paused ends it
    legacy_fleet(4)
    legacy_fleet.grid.remove_node(1)
    job = bulk_request(parameters={"canary_share": 0, "batch_size": 2, "budget": 0}).job
    job = run(legacy_fleet.grid, job, limits=BulkLimits(chunk=2), hooks=BulkHooks(paused=lambda wave: None))
    assert job.wave_run.state == WaveRun.State.STOPPED and "stopped itself" in job.wave_run.paused_reason
    assert Node.objects.filter(carved_policy_name="zos").count() == 1  # node 2 only; 3 and 4 untouched


@pytest.mark.django_db
def test_a_second_run_rollback_while_one_is_queued_returns_it_and_queues_nothing(legacy_fleet, role_user):
    legacy_fleet(2)
    job = run(legacy_fleet.grid, bulk_request(parameters={"waves": True}).job)
    admin = role_user("admins")
    first = run_rollback_request(job=job, by=admin)
    second = run_rollback_request(job=job, by=admin)
    assert (first.created, second.created, second.job.pk) == (True, False, first.job.pk)
    assert Job.objects.filter(kind=Job.Kind.RUN_ROLLBACK).count() == 1


@pytest.mark.django_db
def test_the_database_refuses_two_active_rollbacks_of_one_run_even_past_the_check(legacy_fleet):
    legacy_fleet(1)
    job = run(legacy_fleet.grid, bulk_request(parameters={"waves": True}).job)
    first = job_request(kind=Job.Kind.RUN_ROLLBACK, parameters={"job_id": job.pk})
    again = job_request(kind=Job.Kind.RUN_ROLLBACK, parameters={"job_id": job.pk})  # the race's loser
    other = job_request(kind=Job.Kind.RUN_ROLLBACK, parameters={"job_id": job.pk + 1000})  # another run's: its own
    assert (again.created, again.job.pk) == (False, first.job.pk) and other.created
    assert AuditEvent.objects.filter(action="job.already-active", job=first.job).exists()


@pytest.mark.django_db
def test_a_run_rollback_is_refused_while_the_run_is_active_and_when_nothing_is_left(legacy_fleet):
    legacy_fleet(1)
    queued = bulk_request(parameters={"waves": True}).job
    with pytest.raises(RollbackRefused, match="is still queued: stop it first"):
        run_rollback_request(job=queued)
    job = run(legacy_fleet.grid, queued)
    run_rollback(job=job)
    with pytest.raises(RollbackRefused, match="no re-registered node left to roll back"):
        run_rollback_request(job=job)
    assert not Job.objects.filter(kind=Job.Kind.RUN_ROLLBACK).exists()


@pytest.mark.django_db
def test_a_run_rollback_job_keeps_its_result_with_the_blocked_nodes_said_why(legacy_fleet):
    nodes = legacy_fleet(2)
    job = run(legacy_fleet.grid, bulk_request(parameters={"waves": True}).job)
    occupy(nodes[1], nodes[1].slices.order_by("index").last().index)
    rollback = run_rollback_request(job=job).job
    job_execute(job=job_claim(job_id=rollback.pk))
    rollback.refresh_from_db()
    assert rollback.state == Job.State.SUCCEEDED and rollback.outcome.rolled_back == [1]
    assert "node 2 cannot be rolled back" in rollback.outcome.blocked["2"]
    assert rollback.outcome.sentence() == f"1 of 2 node(s) of job #{job.pk} rolled back, 1 left as they were"
    assert rollback.described == f"rollback of re-register job #{job.pk} (job #{rollback.pk})"


def test_finding_7_one_nodes_rollback_is_one_service_and_every_door_says_the_same(
    legacy_fleet, admins_client, api_call, api_token
):
    from django.core.management import CommandError, call_command

    from dashboard.catalogs.services.reregister.rollback import RollbackNotKept, RollbackRefused, run_node_rollback

    legacy_fleet(2)
    job = job_claim(job_id=job_request(kind=Job.Kind.BULK_REREGISTER, source="command").job.pk)
    job_execute(job=job)
    job.refresh_from_db()
    with pytest.raises(RollbackNotKept, match=f"job #{job.pk} kept no catalog of node 77"):
        run_node_rollback(job=job, node_id=77)
    assert api_call("post", f"/api/v1/jobs/{job.pk}/rollback/77", api_token("act")).status_code == 404
    run_node_rollback(job=job, node_id=1, source="command")
    # The second time: the same refusal, in the same words, from the API, the page and the command.
    with pytest.raises(RollbackRefused) as refused:
        run_node_rollback(job=job, node_id=1)
    said = str(refused.value)
    assert said.startswith("node 1 was already rolled back at ")
    again = api_call("post", f"/api/v1/jobs/{job.pk}/rollback/1", api_token("act"))
    assert (again.status_code, again.json()["detail"]) == (409, said)
    page = admins_client.post(f"/jobs/{job.pk}/rollback/1/", headers={"HX-Request": "true"}).content.decode()
    assert said in page
    with pytest.raises(CommandError, match=said):
        call_command("node_reregister", "--job", str(job.pk), "--rollback", "--rollback-node", "1")
