"""A run in waves on a real Celery worker: paused by its budget, resumed, paused again, stopped, rolled back."""

import time

import pytest

from dashboard.catalogs.services.reregister.rollback import run_rollback
from dashboard.catalogs.services.reregister.waves import bulk_request, wave_run_resume, wave_run_stop
from dashboard.models import AuditEvent, CatalogGeneration, Job, Node, Slice, WaveRun

pytestmark = [pytest.mark.worker]


def until(check, *, timeout: float = 60.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)
    return value


def wave_of(job) -> WaveRun:
    return WaveRun.objects.get(job=job)


def sizes(grid_id: int) -> list[tuple[int, int, str]]:
    return list(Slice.objects.filter(node__grid_id=grid_id).order_by("index").values_list("mru", "sru", "state"))


@pytest.mark.django_db(transaction=True)
def test_a_run_paused_by_its_budget_is_resumed_stopped_and_rolled_back_keeping_occupied_slices(
    legacy_fleet, live_worker, job_finished, role_user
):
    nodes = legacy_fleet(12)
    for node in (nodes[0], nodes[5]):  # someone's VMs, before the run
        Slice.objects.filter(node=node, index=1).update(state="deployed", rented_by_twin_id=9)
    occupied = set(Slice.objects.filter(state="deployed").values_list("pk", "node_id", "index", "mru", "sru"))
    before = {n.grid_id: sizes(n.grid_id) for n in nodes}
    legacy_fleet.grid.remove_node(2)  # batch 1 fails on it: over a budget of 0
    legacy_fleet.grid.remove_node(8)  # batch 3 fails on it: over the budget again, counted from the resume
    admin = role_user("admins", username="ada")
    job = bulk_request(parameters={"canary_share": 0, "batch_size": 3, "budget": 0}, by=admin).job

    until(lambda: wave_of(job).state == WaveRun.State.PAUSED, what="the first pause")
    paused = wave_of(job)
    assert (paused.failures, [w["state"] for w in paused.waves]) == (1, ["done", "pending", "pending", "pending"])
    assert "over its budget of 0" in paused.paused_reason
    assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING  # holding its worker, heartbeat beating
    assert all(sizes(gid) == before[gid] for gid in range(4, 13))  # nothing past the batch in hand

    wave_run_resume(wave=paused, by=admin)
    until(lambda: wave_of(job).state == WaveRun.State.PAUSED and wave_of(job).failures == 2, what="the second pause")
    assert [w["state"] for w in wave_of(job).waves] == ["done", "done", "done", "pending"]

    wave_run_stop(wave=wave_of(job), by=admin)
    job = job_finished(job, timeout=60)
    assert (job.state, wave_of(job).state) == (Job.State.SUCCEEDED, WaveRun.State.STOPPED)
    carved = set(Node.objects.filter(carved_policy_name="zos").values_list("grid_id", flat=True))
    assert carved == {1, 3, 4, 5, 6, 7, 9}
    assert all(sizes(gid) == before[gid] for gid in (10, 11, 12))  # never reached: untouched
    assert {a.action for a in AuditEvent.objects.filter(job=job)} >= {"waves.paused", "waves.resumed", "waves.stopped"}

    summary = run_rollback(job=job, by=admin)
    assert sorted(summary["rolled_back"]) == [1, 3, 4, 5, 6, 7, 9] and summary["blocked"] == {}
    assert all(sizes(gid) == before[gid] for gid in range(1, 13))
    # Every occupied slice is the same row, in the same place, with the same sizes and state.
    assert set(Slice.objects.filter(state="deployed").values_list("pk", "node_id", "index", "mru", "sru")) == occupied
    assert CatalogGeneration.objects.filter(job=job, rolled_back_at__isnull=True).count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_run_rollback_job_on_a_worker_rolls_back_every_node_but_the_blocked_one_and_keeps_occupied_slices(
    legacy_fleet, live_worker, job_finished, role_user
):
    from dashboard.catalogs.services.reregister.rollback import run_rollback_request

    nodes = legacy_fleet(6)
    Slice.objects.filter(node=nodes[0], index=1).update(state="deployed", rented_by_twin_id=9)  # before the run
    occupied = set(Slice.objects.filter(state="deployed").values_list("pk", "node_id", "index", "mru", "sru"))
    before = {n.grid_id: sizes(n.grid_id) for n in nodes}
    admin = role_user("admins", username="ada")
    job = job_finished(bulk_request(parameters={"canary_share": 0, "batch_size": 4}, by=admin).job, timeout=60)
    assert job.state == Job.State.SUCCEEDED
    # Since the run, one of node 4's new slices changed hands: its rollback is blocked, said why.
    changed = Slice.objects.filter(node=nodes[3]).order_by("index").last()
    Slice.objects.filter(pk=changed.pk).update(state="rented", rented_by_twin_id=11)
    after_4 = sizes(4)

    requested = run_rollback_request(job=job, by=admin, source="api")
    rollback = job_finished(requested.job, timeout=60)

    assert rollback.state == Job.State.SUCCEEDED, rollback.error
    result = rollback.outcome
    assert (sorted(result.rolled_back), list(result.blocked)) == ([1, 2, 3, 5, 6], ["4"])
    assert f"slice {changed.index} was rented (free -> rented)" in result.blocked["4"]
    assert (rollback.progress_done, rollback.progress_total, rollback.progress_failed) == (6, 6, 1)
    assert all(sizes(gid) == before[gid] for gid in (1, 2, 3, 5, 6)) and sizes(4) == after_4  # 4 untouched
    assert set(Slice.objects.filter(state="deployed").values_list("pk", "node_id", "index", "mru", "sru")) == occupied
    assert wave_of(job).rollback["blocked"] == result.blocked
    rolled = AuditEvent.objects.filter(action="job.node-rolled-back", job=job)
    assert rolled.count() == 5 and set(rolled.values_list("actor__username", "source")) == {("ada", "api")}
