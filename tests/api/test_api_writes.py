"""A transaction never spans a write and a 500: each API write path, failed after its write, writes nothing.

The failure is injected through the seam the API offers (dashboard.api.writes.api_write_done, sent
inside the call's transaction after its writes and its answer), never by patching the code.
"""

import datetime as dt

import pytest
from django.utils import timezone

from dashboard.api.writes import WRITE_OPERATIONS, api_write_done
from dashboard.capacity import GiB
from dashboard.catalogs.services.reregister.waves import bulk_request
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import (
    AuditEvent,
    Deployment,
    Hold,
    Job,
    Node,
    NodeWithhold,
    Observation,
    PoolReport,
    ProbeProposal,
    Slice,
    WaveRun,
)
from dashboard.nodes.services.withholds import node_withhold

pytestmark = pytest.mark.django_db
MEMORY_ERROR = "cannot fulfil required memory size 4294967296 bytes out of usable 4187593113 bytes"


@pytest.fixture
def node_1774(sim_node):
    node = sim_node(1774, policy_name="legacy", cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242)
    Slice.objects.filter(node=node).update(created_at=timezone.now() - dt.timedelta(days=1))
    return node


@pytest.fixture
def failing_after(request):
    """failing_after(operation): the next call of that operation fails just before its commit."""
    seen = []

    def arm(operation: str):
        def fail(sender, **kwargs):
            seen.append(sender)
            if sender == operation:  # the sender is the operation's name (compared by value: it is a str)
                raise RuntimeError(f"injected failure after the writes of {sender}")

        api_write_done.connect(fail, weak=False, dispatch_uid="test-failing-after")
        request.addfinalizer(lambda: api_write_done.disconnect(dispatch_uid="test-failing-after"))
        return seen

    return arm


def rows() -> dict:
    """Everything a write path could leave behind."""
    return {
        "deployments": list(Deployment.objects.values_list("pk", "state")),
        "slices": list(Slice.objects.order_by("pk").values_list("pk", "state")),
        "audit": AuditEvent.objects.count(),
        "jobs": Job.objects.count(),
        "observations": Observation.objects.count(),
        "readings": list(Node.objects.values_list("seen_at", "prechecked_at", "used_mru", "placeable_now")),
        "pools": (PoolReport.objects.count(), list(Node.objects.values_list("pools_sru", "pools_source"))),
        "withholds": (
            list(NodeWithhold.objects.values_list("pk", "released_at")),
            list(Node.objects.values_list("withheld_reason", "phantom_reasons")),
        ),
        "holds": Hold.objects.count(),
        "probes proposed": ProbeProposal.objects.count(),
        "waves": list(WaveRun.objects.values_list("pk", "state", "spent_at_resume", "rollback")),
    }


def assert_a_500_in_the_api_shape(response):
    assert response.status_code == 500
    assert response["Content-Type"].startswith("application/json")
    assert set(response.json()) == {"detail", "field"} and "nothing was written" in response.json()["detail"]


CALLS = {
    "deployments.report": (
        "report",
        "/api/v1/deployments",
        lambda: {
            "node_id": 1774,
            "slice_index": 6,
            "marketplace_id": "c-1",
            "outcome": "failed",
            "error": MEMORY_ERROR,
            "at": (timezone.now() - dt.timedelta(minutes=1)).isoformat(),
        },
    ),
    "nodes.precheck": ("precheck", "/api/v1/nodes/1774/precheck", lambda: {}),
    "nodes.reregister": ("act", "/api/v1/nodes/1774/reregister", lambda: {}),
    # Two SSDs where the node was registered with one: a change the call writes.
    "nodes.pools": (
        "report",
        "/api/v1/nodes/1774/pools",
        lambda: {
            "pools": [
                {"name": "a", "type": "ssd", "size": int(465.75 * GiB), "used": 20 * GiB},
                {"name": "b", "type": "ssd", "size": int(465.75 * GiB), "used": 0},
            ]
        },
    ),
    "nodes.withhold": ("act", "/api/v1/nodes/1774/withhold", lambda: {"reason": "disk swap"}),
    "nodes.withhold-release": ("act", "/api/v1/nodes/1774/withhold", lambda: None),
    "holds.create": (
        "report",
        "/api/v1/holds",
        lambda: {"node_id": 1774, "slice_index": 5, "ttl_seconds": 60, "marketplace_id": "c-1"},
    ),
}
for _action in ("approve", "resume", "stop"):
    CALLS[f"jobs.waves-{_action}"] = ("act", "/api/v1/jobs/{job}/waves/" + _action, lambda: None)
# Node 1774 runs a VM no reading tells: the list proposes it, and taking the list keeps it as proposed.
CALLS["probes.take"] = ("report", "/api/v1/probes", lambda: None)
CALLS["jobs.rollback"] = ("act", "/api/v1/jobs/{job}/rollback", lambda: None)
CALLS["jobs.node-rollback"] = ("act", "/api/v1/jobs/{job}/rollback/1774", lambda: None)
METHODS = {"nodes.pools": "put", "nodes.withhold-release": "delete"}  # the others are POSTs


def reregistered(wave_state: str | None = None) -> dict:
    """Node 1774 re-registered by a finished run in waves (its catalog kept); its WaveRun in `wave_state`."""
    job = bulk_request(parameters={"waves": True}, by=None).job
    job_execute(job=job_claim(job_id=job.pk))
    if wave_state is not None:
        WaveRun.objects.filter(job=job).update(state=wave_state)
    return {"job": job.pk}


# What must be there before the call (a window to release, a run to steer); a dict fills the path.
SETUP = {
    "nodes.withhold-release": lambda: node_withhold(nodes=Node.objects.all(), reason="disk swap") and None,
    "jobs.waves-approve": lambda: reregistered(WaveRun.State.AWAITING_APPROVAL),
    "jobs.waves-resume": lambda: reregistered(WaveRun.State.PAUSED),
    "jobs.waves-stop": lambda: reregistered(WaveRun.State.RUNNING),
    "jobs.rollback": reregistered,
    "jobs.node-rollback": reregistered,
}


def test_every_write_operation_is_covered_here():
    assert set(CALLS) == set(WRITE_OPERATIONS)


@pytest.mark.parametrize("operation", sorted(CALLS))
def test_a_failure_after_the_write_rolls_back_everything_the_call_wrote(
    operation, node_1774, api_call, api_token, failing_after, django_capture_on_commit_callbacks
):
    scope, path, body = CALLS[operation]
    token = api_token(scope, role="admins")
    # Give the node a reading that the precheck would overwrite, and a deployed slice the report could touch.
    Node.objects.filter(pk=node_1774.pk).update(used_mru=3 * GiB, seen_at=timezone.now() - dt.timedelta(hours=1))
    path = path.format(**(SETUP.get(operation, lambda: None)() or {}))
    before = rows()
    seen = failing_after(operation)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = api_call(METHODS.get(operation, "post"), path, token, json=body())
    assert seen == [operation]  # the failure did come after the writes
    assert_a_500_in_the_api_shape(response)
    assert rows() == before
    assert callbacks == []  # nothing queued for after a commit that never happened


@pytest.mark.parametrize("operation", sorted(CALLS))
def test_without_the_failure_the_same_call_writes(operation, node_1774, api_call, api_token):
    scope, path, body = CALLS[operation]
    Node.objects.filter(pk=node_1774.pk).update(used_mru=3 * GiB, seen_at=timezone.now() - dt.timedelta(hours=1))
    path = path.format(**(SETUP.get(operation, lambda: None)() or {}))
    before = rows()
    response = api_call(METHODS.get(operation, "post"), path, api_token(scope, role="admins"), json=body())
    assert response.status_code in (200, 201, 202), response.json()
    assert rows() != before
