"""deployment_outcome_record: one transaction per report, one record per marketplace id."""

import datetime as dt

import pytest
from django.utils import timezone

from dashboard.capacity import GiB
from dashboard.deployments.services import outcomes
from dashboard.deployments.services.outcomes import OutcomeError, deployment_outcome_record
from dashboard.models import AuditEvent, Deployment, Job, Slice
from tests.factories import sim_node_1774

pytestmark = pytest.mark.django_db
AT = timezone.now().replace(microsecond=0) - dt.timedelta(hours=1)
MEMORY_ERROR = "cannot fulfil required memory size 4294967296 bytes out of usable 4187593113 bytes"


def slices_made_earlier(node):
    """Reports are dated an hour ago; a report dated before its slice existed is refused."""
    Slice.objects.filter(node=node).update(created_at=AT - dt.timedelta(days=1))
    return node


@pytest.fixture
def node_1774(sim_node):
    return slices_made_earlier(sim_node_1774(sim_node))


def record(**fields):
    return deployment_outcome_record(
        **{
            "node_id": 1774,
            "slice_index": 6,
            "marketplace_id": "c-1",
            "outcome": "failed",
            "error": MEMORY_ERROR,
            "at": AT,
            **fields,
        }
    )


def test_it_dates_the_record_when_it_happened(node_1774):
    assert Deployment.objects.get(pk=record().deployment.pk).started_at == AT


def test_it_keeps_the_last_reading_beside_a_failure(node_1774):
    seen = record().deployment.capacity_seen
    assert (seen["source"], seen["total"]["mru"]) == ("last reading", 31 * GiB)


def test_it_hands_a_failure_to_the_learning_hook_once(node_1774, monkeypatch):
    seen = []
    monkeypatch.setattr(
        outcomes.record, "outcome_failed_learn", lambda deployment, diagnosis, **_: seen.append(diagnosis.cause)
    )
    record(), record()
    assert seen == ["memory"]


def test_it_writes_nothing_when_learning_fails(node_1774, monkeypatch):
    def broken(deployment, diagnosis, **_):
        raise RuntimeError("observation store down")

    monkeypatch.setattr(outcomes.record, "outcome_failed_learn", broken)
    with pytest.raises(RuntimeError):
        record()
    assert (Deployment.objects.count(), AuditEvent.objects.filter(action__startswith="deployment.").count()) == (0, 0)


def test_it_writes_nothing_when_the_slice_is_refused(node_1774):
    record(outcome="deployed", slice_index=1, error="")
    with pytest.raises(OutcomeError):
        record(outcome="deployed", slice_index=1, marketplace_id="c-2")
    assert Deployment.objects.count() == 1


def test_it_queues_a_precheck_after_a_deployment(node_1774, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        record(outcome="deployed", slice_index=1, error="")
    callbacks[0]()  # job_request; its own on_commit (the Celery message) is not run here
    assert Job.objects.get().kind == Job.Kind.PRECHECK


def test_it_queues_nothing_for_a_repeat(node_1774, django_capture_on_commit_callbacks):
    record(outcome="deployed", slice_index=1, error="")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        record(outcome="deployed", slice_index=1, error="")
    assert callbacks == []


def test_a_slice_deployed_with_no_record_is_handed_over_by_its_deploy_then_released(node_1774):
    Slice.objects.filter(node=node_1774, index=3).update(state="deployed")  # a legacy catalog, no record of who
    with pytest.raises(outcomes.OutcomeConflict) as unknown:
        record(outcome="released", slice_index=3, error="")
    assert unknown.value.field == "marketplace_id" and "no record of 'c-1'" in str(unknown.value)
    assert record(outcome="deployed", slice_index=3, error="").move == "take"
    assert Slice.objects.get(node=node_1774, index=3).state == "deployed"
    record(outcome="released", slice_index=3, error="", at=AT + dt.timedelta(minutes=1))
    assert Slice.objects.get(node=node_1774, index=3).state == "free"


@pytest.mark.django_db(transaction=True)
def test_it_records_one_deployment_when_the_same_report_races(sim_node):
    import threading

    from django.db import connection

    slices_made_earlier(sim_node_1774(sim_node))
    start = threading.Barrier(4)
    created = []

    def send():
        try:
            start.wait()
            created.append(record().created)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (sorted(created), Deployment.objects.count()) == ([False, False, False, True], 1)


def test_a_reported_memory_refusal_teaches_the_node_and_changes_its_precheck(sim_node):
    from dashboard.catalogs.services.precheck import precheck_run
    from dashboard.deployments.services.deploy import slice_deploy
    from dashboard.models import Node

    node = slices_made_earlier(sim_node_1774(sim_node, policy_name=None))  # zos: 6 slices
    for index in range(3):
        slice_deploy(node=node, slice_index=index)
    node.refresh_from_db()
    assert node.placeable_now == 3
    # The host really uses 1 GiB more per running VM than is accounted: ZOS's usable figure says so.
    usable = 31 * GiB - (node.used_mru + 3 * GiB)
    deployment_outcome_record(
        node_id=1774,
        slice_index=3,
        marketplace_id="c-9",
        outcome="failed",
        at=AT,
        error=f"cannot fulfil required memory size {4 * GiB} bytes out of usable {usable} bytes",
    )
    node = Node.objects.get(grid_id=1774)
    assert (node.hidden_mru_per_vm, node.observations.get().source) == (GiB, "reported")
    assert node.placeable_now == 2
    assert precheck_run(node=node).precheck.placeable_now == 2  # and a fresh reading says the same
