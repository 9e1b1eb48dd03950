"""dashboard.jobs.services.jobs without a worker: requesting, claiming, re-registering, failing, reaping.

The worker-driven paths (a real Celery worker on Redis) are in test_tasks_worker.py.
"""

import json
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from dashboard.capacity import GiB
from dashboard.catalogs.services.reregister import (
    CATALOG_CHANGED,
    GRID_READ_ATTEMPTS,
    CatalogChanged,
    node_capacity_read,
    reregister_apply,
    reregister_plan,
)
from dashboard.jobs.services.job_reaper import jobs_reap
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import JobError, JobLost, job_claim, job_request
from dashboard.models import AuditEvent, Deployment, Job, Node, Slice
from dashboard.policies.selectors.policy_book import policy_for_node

pytestmark = pytest.mark.django_db


def proxy_node_1774(*, mru) -> dict:
    """GET /nodes/1774 in the Grid Proxy's shape (see ../shared/gridproxy/node-1774.json)."""
    return {
        "nodeId": 1774,
        "farmId": 1,
        "farmName": "farm one",
        "twinId": 9011,
        "status": "up",
        "dedicated": False,
        "rentedByTwinId": 0,
        "country": "Egypt",
        "city": "Cairo",
        "updatedAt": 1747729266,
        "healthy": True,
        "capacity": {
            "total_resources": {"cru": 8, "mru": mru, "sru": int(931.5 * GiB), "hru": 0},
            "used_resources": {"cru": 1, "mru": 7 * GiB, "sru": 153 * GiB, "hru": 0},
        },
    }


def claimed(**request) -> Job:
    request.setdefault("kind", Job.Kind.REREGISTER)
    return job_claim(job_id=job_request(**request).job.pk)


def catalog(node: Node) -> list[tuple]:
    return list(Slice.objects.filter(node=node).order_by("index").values_list("pk", "index", "mru", "sru", "state"))


def run(job: Job) -> Job:
    job_execute(job=job)
    job.refresh_from_db()
    return job


# --- requesting ---------------------------------------------------------------------------------


def test_it_queues_a_job_and_records_who_asked(legacy_node_1774, django_user_model):
    ada = django_user_model.objects.create_user("ada")
    request = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774, by=ada)
    event = AuditEvent.objects.get(job=request.job, action="job.requested")
    assert (request.created, request.job.state, request.job.source) == (True, Job.State.QUEUED, "web")
    assert (event.actor, event.source, event.node) == (ada, "web", legacy_node_1774)


def test_it_records_the_os_user_for_a_command_line_request(legacy_node_1774):
    request = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774, source=Job.Source.COMMAND)
    event = AuditEvent.objects.get(job=request.job, action="job.requested")
    assert event.source == "command" and event.detail["os_user"]


def test_it_sends_the_task_after_commit_with_the_job_id_as_task_id(
    legacy_node_1774, broker_purged, django_capture_on_commit_callbacks
):
    with broker_purged.connection_for_write() as conn:
        redis = conn.default_channel.client
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            job = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job
        assert redis.llen("celery") == 0
        for callback in callbacks:
            callback()
        message = json.loads(redis.lrange("celery", 0, -1)[0])
    assert (message["headers"]["task"], message["headers"]["id"]) == ("dashboard.job_run", str(job.pk))


def test_it_leaves_the_time_limits_to_the_worker(legacy_node_1774, broker_purged, django_capture_on_commit_callbacks):
    import dashboard.tasks  # noqa: F401  registered here, Celery would copy this process's limits into the message

    with django_capture_on_commit_callbacks(execute=True):
        job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    with broker_purged.connection_for_write() as conn:
        message = json.loads(conn.default_channel.client.lrange("celery", 0, -1)[0])
    assert message["headers"]["timelimit"] == [None, None]


def test_it_returns_the_active_job_instead_of_a_second_one(legacy_node_1774):
    first = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    second = job_request(kind=Job.Kind.PRECHECK, node=legacy_node_1774)
    assert (second.created, second.job.pk) == (False, first.job.pk)
    assert Job.objects.count() == 1


def test_it_audits_a_refused_duplicate(legacy_node_1774):
    job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774, source=Job.Source.COMMAND)
    assert AuditEvent.objects.filter(action="job.already-active", source="command").count() == 1


def test_it_queues_a_new_job_once_the_last_one_finished(legacy_node_1774):
    first = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job
    Job.objects.filter(pk=first.pk).update(state=Job.State.SUCCEEDED)
    again = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    assert again.created and again.job.pk != first.pk


def test_it_allows_one_bulk_job_at_a_time():
    first = job_request(kind=Job.Kind.BULK_REREGISTER)
    second = job_request(kind=Job.Kind.BULK_REREGISTER, farm_id=7)
    assert (second.created, second.job.pk) == (False, first.job.pk)


@pytest.mark.parametrize(
    "request_kwargs, words",
    [
        ({"kind": "rebuild"}, "unknown job kind"),
        ({"kind": Job.Kind.REREGISTER}, "needs a registered node"),
        ({"kind": Job.Kind.PRECHECK, "node": "N", "dry_run": True}, "has no dry run"),
        ({"kind": Job.Kind.BULK_REREGISTER, "node": "N"}, "takes no node"),
        ({"kind": Job.Kind.BULK_REREGISTER, "farm_id": -1}, "farm id must be"),
        ({"kind": Job.Kind.REREGISTER, "node": "N", "farm_id": 1}, "only applies to a bulk"),
        ({"kind": Job.Kind.REREGISTER, "node": "N", "source": "cron"}, "unknown source"),
    ],
)
def test_it_refuses_a_bad_request_and_writes_nothing(legacy_node_1774, request_kwargs, words):
    if request_kwargs.get("node") == "N":
        request_kwargs["node"] = legacy_node_1774
    with pytest.raises(JobError, match=words):
        job_request(**request_kwargs)
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_creates_exactly_one_job_from_20_concurrent_requests(legacy_node_1774, broker_purged):
    barrier = threading.Barrier(20)
    outcomes, errors = [], []

    def ask():
        try:
            barrier.wait(timeout=10)
            request = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
            outcomes.append((request.job.pk, request.created))
        except Exception as exc:  # reported below; a thread's exception would otherwise vanish
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert Job.objects.count() == 1
    assert sorted(created for _, created in outcomes) == [False] * 19 + [True]
    assert {pk for pk, _ in outcomes} == {Job.objects.get().pk}


# --- claiming -----------------------------------------------------------------------------------


def test_it_claims_a_queued_job_once(legacy_node_1774):
    job = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job
    first, second = job_claim(job_id=job.pk), job_claim(job_id=job.pk)
    assert (first.state, first.attempts, second) == (Job.State.RUNNING, 1, None)


def test_it_reclaims_a_running_job_whose_heartbeat_is_stale(legacy_node_1774, settings):
    job = claimed(node=legacy_node_1774)
    later = timezone.now() + timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT + 1)
    again = job_claim(job_id=job.pk, now=later)
    assert (again.state, again.attempts) == (Job.State.RUNNING, 2)


def test_it_leaves_a_running_job_whose_heartbeat_is_recent(legacy_node_1774):
    job = claimed(node=legacy_node_1774)
    assert job_claim(job_id=job.pk) is None


def test_it_gives_up_on_a_job_that_lost_its_worker_too_often(legacy_node_1774, settings):
    settings.JOB_MAX_ATTEMPTS = 1
    job = claimed(node=legacy_node_1774)
    later = timezone.now() + timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT + 1)
    assert job_claim(job_id=job.pk, now=later) is None
    job.refresh_from_db()
    assert (job.state, job.error) == (
        Job.State.FAILED,
        "gave up after 1 attempts: the worker running it was lost each time",
    )


def test_it_does_not_claim_a_finished_job(legacy_node_1774):
    job = run(claimed(node=legacy_node_1774))
    assert job_claim(job_id=job.pk) is None


# --- re-registering -----------------------------------------------------------------------------


def test_it_recarves_node_1774_from_7_to_6_slices(legacy_node_1774):
    job = run(claimed(node=legacy_node_1774))
    assert job.state == Job.State.SUCCEEDED, job.error
    assert (job.result["before"]["slices"], job.result["after"]["slices"]) == (7, 6)
    assert Slice.objects.filter(node=legacy_node_1774).count() == 6


def test_it_keeps_the_deployed_slice_as_the_same_row_and_size(legacy_node_1774):
    deployed = catalog(legacy_node_1774)[0]
    run(claimed(node=legacy_node_1774))
    assert catalog(legacy_node_1774)[0] == deployed


def test_it_reports_the_change_in_the_contract_shape(legacy_node_1774):
    result = run(claimed(node=legacy_node_1774)).result
    assert result["before"] == {"slices": 7, "free": 6, "deployable": 6, "placeable": 5, "phantom": 1}
    assert result["after"] == {"slices": 6, "free": 5, "deployable": 6, "placeable": 5, "phantom": 0}
    assert (len(result["removed"]), len(result["added"]), len(result["kept"]), result["dry_run"]) == (6, 5, 1, False)
    assert result["kept"][0] == {"index": 0, "cru": 1, "mru": 4 * GiB, "sru": 133 * GiB, "state": "deployed"}


def test_it_numbers_the_new_slices_after_every_number_the_node_used(legacy_node_1774):
    result = run(claimed(node=legacy_node_1774)).result
    # 0..6 were used (0 is kept, deployed): the re-carved slices never take a removed one's number.
    assert [s["index"] for s in result["added"]] == [7, 8, 9, 10, 11]


def test_it_stores_the_policy_and_the_capacity_seen(legacy_node_1774):
    run(claimed(node=legacy_node_1774))
    node = Node.objects.get(pk=legacy_node_1774.pk)
    assert (node.carved_policy_name, node.carved_deployable, node.catalog_generation) == ("zos", 6, 2)
    # The node's pools are heard with its 20 GiB zos-cache, so the carve keeps room for its next 5 GiB step.
    assert (node.carved_slice_sru, node.used_mru, node.phantom_slices) == (154 * GiB, 4 * GiB + 31 * GiB // 10, 0)


def test_it_stores_the_nodes_figures_with_its_new_catalog(legacy_node_1774):
    Node.objects.filter(pk=legacy_node_1774.pk).update(stale=True, stale_reason="carved with legacy v1")
    run(claimed(node=legacy_node_1774))
    node = Node.objects.get(pk=legacy_node_1774.pk)
    assert (node.slices_free, node.slices_deployed, node.deployable, node.stale, node.stale_reason) == (
        5,
        1,
        6,
        False,
        "",
    )


def test_it_knows_every_row_that_points_at_a_slice():
    """Re-registering deletes slices in SQL, doing by hand what Slice.delete() would for these relations."""
    relations = [(r.related_model.__name__, r.field.name, r.on_delete.__name__) for r in Slice._meta.related_objects]
    assert sorted(relations) == [("Deployment", "slice", "SET_NULL"), ("Hold", "slice", "SET_NULL")]


def test_it_changes_nothing_on_a_second_run(legacy_node_1774):
    run(claimed(node=legacy_node_1774))
    before = catalog(legacy_node_1774)
    second = run(claimed(node=legacy_node_1774))
    assert catalog(legacy_node_1774) == before
    assert second.result["notes"][0].startswith("already up to date")
    assert Node.objects.get(pk=legacy_node_1774.pk).catalog_generation == 2


def test_it_changes_nothing_on_a_dry_run_but_reports_the_diff(legacy_node_1774):
    before, node_before = catalog(legacy_node_1774), Node.objects.filter(pk=legacy_node_1774.pk).values().get()
    job = run(claimed(node=legacy_node_1774, dry_run=True))
    assert (job.state, job.result["dry_run"], job.result["after"]["slices"], len(job.result["removed"])) == (
        Job.State.SUCCEEDED,
        True,
        6,
        6,
    )
    assert catalog(legacy_node_1774) == before
    assert Node.objects.filter(pk=legacy_node_1774.pk).values().get() == node_before


def test_it_keeps_free_slices_still_of_the_carved_size_after_a_deploy(legacy_node_1774):
    run(claimed(node=legacy_node_1774))
    second = Slice.objects.filter(node=legacy_node_1774, state=Slice.State.FREE).order_by("index").first()
    legacy_node_1774.grid.deploy_vm(1774, second.size, name="vm1774s1")
    Slice.objects.filter(pk=second.pk).update(state=Slice.State.DEPLOYED)
    before = catalog(legacy_node_1774)
    job = run(claimed(node=legacy_node_1774))
    assert (catalog(legacy_node_1774), job.result["removed"], job.result["added"]) == (before, [], [])


def test_it_never_deletes_rented_slices_even_beyond_what_is_deployable(legacy_node_1774):
    Slice.objects.filter(node=legacy_node_1774, index__gt=0).update(state=Slice.State.RENTED, rented_by_twin_id=42)
    before = catalog(legacy_node_1774)
    job = run(claimed(node=legacy_node_1774))
    assert catalog(legacy_node_1774) == before
    assert any("no free slice" in note for note in job.result["notes"])


def test_it_replaces_failed_slices_like_free_ones(legacy_node_1774):
    Slice.objects.filter(node=legacy_node_1774, index=3).update(state=Slice.State.FAILED)
    result = run(claimed(node=legacy_node_1774)).result
    assert {"index": 3, "cru": 1, "mru": 4 * GiB, "sru": 133 * GiB, "state": "failed"} in result["removed"]
    assert not Slice.objects.filter(node=legacy_node_1774, state=Slice.State.FAILED).exists()


def plan_now(node):
    """The node's re-register plan on a reading taken now, as a job's first step makes it."""
    seen = node_capacity_read(grid=node.grid, node_id=node.grid_id)
    return reregister_plan(node=node, slices=list(node.slices.all()), policy=policy_for_node(node), seen=seen)


def test_it_refuses_to_swap_when_a_slice_was_deployed_meanwhile(legacy_node_1774):
    job = claimed(node=legacy_node_1774)
    plan = plan_now(legacy_node_1774)
    Slice.objects.filter(node=legacy_node_1774, index=4).update(state=Slice.State.DEPLOYED)
    before = catalog(legacy_node_1774)
    with pytest.raises(CatalogChanged, match=CATALOG_CHANGED):
        reregister_apply(plan=plan, job=job, dry_run=False, finish=True)
    assert catalog(legacy_node_1774) == before


def deploy_in_flight(node, index, **fields) -> Deployment:
    """What slice_deploy writes before it asks the grid: the attempt, with the slice still free."""
    s = Slice.objects.get(node=node, index=index)
    deployment = Deployment.objects.create(
        node=node, slice=s, slice_index=index, cru=s.cru, mru=s.mru, sru=s.sru, state=Deployment.State.DEPLOYING
    )
    if fields:
        Deployment.objects.filter(pk=deployment.pk).update(**fields)
    return deployment


def test_it_keeps_a_slice_whose_deploy_is_in_flight(legacy_node_1774):
    deploy_in_flight(legacy_node_1774, 3)
    in_flight = [row for row in catalog(legacy_node_1774) if row[1] == 3]
    result = run(claimed(node=legacy_node_1774)).result
    assert [row for row in catalog(legacy_node_1774) if row[1] == 3] == in_flight
    assert ([k["index"] for k in result["kept"]], [a["index"] for a in result["added"]]) == ([0, 3], [7, 8, 9, 10])


def test_it_replaces_a_slice_whose_deploy_died_long_ago(legacy_node_1774):
    deploy_in_flight(legacy_node_1774, 3, started_at=timezone.now() - timedelta(hours=2))
    result = run(claimed(node=legacy_node_1774)).result
    assert [k["index"] for k in result["kept"]] == [0]


def test_it_refuses_to_swap_when_a_deploy_started_after_the_plan(legacy_node_1774):
    job = claimed(node=legacy_node_1774)
    plan = plan_now(legacy_node_1774)
    deploy_in_flight(legacy_node_1774, 2)
    with pytest.raises(CatalogChanged):
        reregister_apply(plan=plan, job=job, dry_run=False, finish=True)
    assert Slice.objects.filter(node=legacy_node_1774).count() == 7


def test_it_refuses_to_swap_when_the_generation_moved(legacy_node_1774):
    job = claimed(node=legacy_node_1774)
    plan = plan_now(legacy_node_1774)
    Node.objects.filter(pk=legacy_node_1774.pk).update(catalog_generation=5)
    with pytest.raises(CatalogChanged):
        reregister_apply(plan=plan, job=job, dry_run=False, finish=True)
    assert Slice.objects.filter(node=legacy_node_1774).count() == 7


def test_it_writes_nothing_when_the_job_was_reaped_before_the_swap(legacy_node_1774, settings):
    job = claimed(node=legacy_node_1774)
    plan = plan_now(legacy_node_1774)
    jobs_reap(now=timezone.now() + timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT + 1))
    with pytest.raises(JobLost):
        reregister_apply(plan=plan, job=job, dry_run=False, finish=True)
    assert Slice.objects.filter(node=legacy_node_1774).count() == 7


def test_it_audits_the_finish_with_who_asked_and_the_result(legacy_node_1774, django_user_model):
    ada = django_user_model.objects.create_user("ada")
    job = run(claimed(node=legacy_node_1774, by=ada))
    event = AuditEvent.objects.get(job=job, action="job.succeeded")
    assert (event.actor, event.source, event.detail["result"]["after"]["slices"]) == (ada, "web", 6)
    assert "7 → 6 slices" in event.message


# --- failures -----------------------------------------------------------------------------------


def test_it_fails_with_the_grids_words_when_the_grid_is_down(legacy_node_1774, gridproxy_down):
    before = catalog(legacy_node_1774)
    job = run(claimed(node=legacy_node_1774))
    assert job.state == Job.State.FAILED
    assert gridproxy_down.split("//")[1] in job.error
    assert catalog(legacy_node_1774) == before


@pytest.fixture
def flaky_proxy(settings):
    """flaky_proxy(statuses) -> the hits by path: a loopback Grid Proxy answering /nodes/1774 with
    each status in turn (503 = unavailable, 200 = node 1774), then 200 for good."""
    from tests.gridproxy_canned import Answer, start_canned_proxy

    servers = []

    def start(statuses: list[int]):
        canned, server = start_canned_proxy()
        servers.append(server)
        node = proxy_node_1774(mru=31 * GiB)
        canned.answer("/nodes/1774", *[Answer(s, node if s == 200 else {"error": "busy"}) for s in statuses], node)
        settings.GRID_BACKEND, settings.GRID_RETRIES = "gridproxy", 0
        settings.GRID_PROXY_URL = canned.url
        return canned.hits

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_it_reads_the_grid_again_when_it_was_briefly_unreachable(legacy_node_1774, flaky_proxy):
    hits = flaky_proxy([503, 503])
    job = run(claimed(node=legacy_node_1774))
    assert (job.state, hits["/nodes/1774"], job.result["after"]["slices"]) == (Job.State.SUCCEEDED, 3, 6)


def test_it_gives_up_on_the_grid_after_a_bounded_number_of_reads(legacy_node_1774, flaky_proxy):
    hits = flaky_proxy([503] * 10)
    job = run(claimed(node=legacy_node_1774))
    assert (job.state, hits["/nodes/1774"]) == (Job.State.FAILED, GRID_READ_ATTEMPTS)
    assert Slice.objects.filter(node=legacy_node_1774).count() == 7


def test_it_fails_when_the_node_is_gone_from_the_grid(legacy_node_1774):
    legacy_node_1774.grid.remove_node(1774)
    job = run(claimed(node=legacy_node_1774))
    assert (job.state, "1774" in job.error) == (Job.State.FAILED, True)
    assert Slice.objects.filter(node=legacy_node_1774).count() == 7


def test_it_fails_naming_the_field_when_the_grid_answers_garbage(legacy_node_1774, gridproxy_serving):
    gridproxy_serving({"/nodes/1774": proxy_node_1774(mru="lots")})
    job = run(claimed(node=legacy_node_1774))
    assert job.state == Job.State.FAILED
    assert "total_resources.mru" in job.error
    assert Slice.objects.filter(node=legacy_node_1774).count() == 7


def test_it_reports_an_unexpected_exception_as_an_internal_error(legacy_node_1774, settings):
    # A corrupted row (pools_sru is not a list of sizes) and a grid that does not report pools.
    Node.objects.filter(pk=legacy_node_1774.pk).update(pools_sru="garbage")
    from sim.grid import serve_simulator

    server = serve_simulator(legacy_node_1774.grid)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    settings.GRID_BACKEND, settings.GRID_PROXY_URL = "gridproxy", f"http://127.0.0.1:{server.server_address[1]}"
    try:
        job = run(claimed(node=Node.objects.get(pk=legacy_node_1774.pk)))
    finally:
        server.shutdown()
        server.server_close()
    assert job.error.startswith("internal error: TypeError: ")


@pytest.mark.django_db(transaction=True)
def test_it_records_the_failure_when_the_database_session_dropped_between_steps(legacy_node_1774):
    job = claimed(node=legacy_node_1774)
    ours = connection.connection.info.backend_pid

    def cut():  # what a PostgreSQL restart or an administrator does to the worker's session
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [ours])
        connection.close()

    killer = threading.Thread(target=cut)
    killer.start()
    killer.join()
    job = run(job)
    assert (job.state, job.error.startswith("internal error: OperationalError: ")) == (Job.State.FAILED, True)
    assert Slice.objects.filter(node=legacy_node_1774).count() == 7


# --- precheck jobs ------------------------------------------------------------------------------


def test_it_stores_the_precheck_report_as_the_result(legacy_node_1774):
    job = run(claimed(kind=Job.Kind.PRECHECK, node=legacy_node_1774))
    assert job.state == Job.State.SUCCEEDED, job.error
    assert (job.result["free_slices"], job.result["placeable_now"], job.result["phantom_slices"]) == (6, 5, [6])


# --- the reaper ---------------------------------------------------------------------------------


def test_it_reaps_a_running_job_whose_heartbeat_stopped(legacy_node_1774, settings):
    job = claimed(node=legacy_node_1774)
    reaped = jobs_reap(now=timezone.now() + timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT + 1))
    job.refresh_from_db()
    assert (reaped, job.state) == (1, Job.State.FAILED)
    assert job.error.startswith("worker lost: no heartbeat since ")


def test_it_does_not_reap_a_job_whose_heartbeat_is_recent(legacy_node_1774):
    job = claimed(node=legacy_node_1774)
    assert jobs_reap() == 0
    job.refresh_from_db()
    assert job.state == Job.State.RUNNING


def test_it_reaps_a_job_no_worker_took(legacy_node_1774, settings):
    job = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job
    settings.JOB_QUEUED_TIMEOUT = 60
    assert jobs_reap(now=timezone.now() + timedelta(seconds=30)) == 0
    assert jobs_reap(now=timezone.now() + timedelta(seconds=61)) == 1
    job.refresh_from_db()
    assert job.error.startswith("never started: queued at ")


def test_it_audits_a_reaped_job(legacy_node_1774, settings):
    job = claimed(node=legacy_node_1774)
    jobs_reap(now=timezone.now() + timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT + 1))
    assert AuditEvent.objects.filter(job=job, action="job.failed", message__contains="worker lost").count() == 1


def test_it_stores_the_country_and_city_the_grid_reports(legacy_node_1774, gridproxy_serving):
    gridproxy_serving({"/nodes/1774": proxy_node_1774(mru=31 * GiB)})
    job = run(claimed(node=legacy_node_1774))
    assert job.state == Job.State.SUCCEEDED, job.error
    assert Node.objects.values_list("country", "city").get(pk=legacy_node_1774.pk) == ("Egypt", "Cairo")


@pytest.mark.slow
def test_it_fails_the_read_on_the_steps_budget_with_the_deadline_in_words(
    legacy_node_1774, gridproxy_serving, settings
):
    from tests.gridproxy_canned import Answer

    url = gridproxy_serving({"/nodes/1774": Answer(200, proxy_node_1774(mru=31 * GiB), drip=0.5)})
    settings.GRID_STEP_DEADLINE = 1.0
    job = run(claimed(node=legacy_node_1774))
    assert (job.state, job.error) == (
        Job.State.FAILED,
        f"the grid proxy did not finish answering within 1 s ({url}/nodes/1774)",
    )
