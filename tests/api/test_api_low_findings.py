"""Issue 44's LOW findings on the API and the jobs, each as the adversarial round found it:
- GET /api/v1/nodes/{id} answered a shape its own OpenAPI schema did not describe (two schemas named PoolsOut);
- an over-long placement query was a 414 nobody documented (gunicorn's, in plain text);
- with the broker down the re-register API answered "queued" for a job already failed;
- after its worker died, a failed run's waves still read "running";
- a support token saw every buyer's id in GET /holds, which GET /nodes/{id} hides from it;
- a `deployed` report was taken on a node rented by another twin, where a hold is refused.
"""

from __future__ import annotations

import os
import runpy
import socket
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import jsonschema
import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from config.celery import app as celery_app
from dashboard.catalogs.services.reregister.waves import bulk_request
from dashboard.deployments.services.holds import hold_create
from dashboard.jobs.services.job_reaper import jobs_reap
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import Job, Node, WaveRun
from dashboard.nodes.services.pools import pools_report
from dashboard.views.middleware import API_QUERY_MAX
from tests.factories import node_1774, sim_node_1774

pytestmark = pytest.mark.django_db


@pytest.fixture
def openapi(client) -> dict:
    return client.get("/api/v1/openapi.json").json()


def answer_schema(openapi: dict, path: str, method: str, status: int) -> dict:
    schema = openapi["paths"][path][method]["responses"][str(status)]["content"]["application/json"]["schema"]
    return {**schema, "components": openapi["components"]}


# --- GET /nodes/{id} against its own schema -----------------------------------------------------


def test_a_nodes_answer_matches_its_own_openapi_schema(sim_node, api_call, api_token, openapi):
    node = sim_node_1774(sim_node)
    pools_report(node=node, pools=[{"name": "a", "type": "ssd", "size": node.total_sru, "used": 0}], source="api")
    hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="buyer-1", source="command")
    answer = api_call("get", "/api/v1/nodes/1774", api_token("read")).json()
    jsonschema.validate(answer, answer_schema(openapi, "/api/v1/nodes/{node_id}", "get", 200))


def test_no_two_api_schemas_share_a_name():
    """The OpenAPI components are keyed by class name: two Schema classes of one name answer as one."""
    from ninja import Schema

    import dashboard.api.main  # noqa: F401 (every router, and so every schema, is loaded)

    def all_subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from all_subclasses(sub)

    ours = [c for c in all_subclasses(Schema) if c.__module__.startswith("dashboard.api")]
    names = [c.__name__ for c in ours]
    assert sorted({n for n in names if names.count(n) > 1}) == []


# --- the over-long query ------------------------------------------------------------------------


def test_an_over_long_placement_query_is_a_documented_json_414(api_call, api_token, openapi):
    ids = ",".join(str(n) for n in range(100_000, 102_000))  # 2,000 ids: 13,999 bytes
    response = api_call("get", "/api/v1/placement", api_token("read"), cru=1, mru=2**31, sru=2**34, exclude_nodes=ids)
    assert response.status_code == 414 and "more than the 8,000 this API reads" in response.json()["detail"]
    jsonschema.validate(response.json(), answer_schema(openapi, "/api/v1/placement", "get", 414))


def test_every_operation_documents_the_answers_the_door_itself_gives(openapi):
    for path, operations in openapi["paths"].items():
        for method, operation in operations.items():
            assert {"414", "429", "500"} <= set(map(str, operation["responses"])), (method, path)
            if "requestBody" in operation:
                assert "413" in set(map(str, operation["responses"])), (method, path)


def test_gunicorn_lets_the_api_say_414_itself():
    conf = runpy.run_path(str(Path(django_settings.BASE_DIR) / "gunicorn.conf.py"))
    longest_path = "/api/v1/jobs/2147483647/rollback/2147483647"
    assert conf["limit_request_line"] >= len(f"GET {longest_path}? HTTP/1.1") + API_QUERY_MAX


# --- the re-register API with the broker down ----------------------------------------------------


@contextmanager
def broker_down():
    """The Celery app pointed at a loopback port nobody listens on (what Celery does after a fork)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    saved_env, saved_conf = os.environ.get("CELERY_BROKER_URL"), celery_app.conf.broker_url
    os.environ["CELERY_BROKER_URL"] = celery_app.conf.broker_url = f"redis://127.0.0.1:{port}/0"
    celery_app._pool = None
    celery_app.amqp._producer_pool = None
    try:
        yield
    finally:
        celery_app.conf.broker_url = saved_conf
        if saved_env is None:
            os.environ.pop("CELERY_BROKER_URL", None)
        else:
            os.environ["CELERY_BROKER_URL"] = saved_env
        celery_app._pool = None
        celery_app.amqp._producer_pool = None


@pytest.mark.django_db(transaction=True)  # the enqueue runs on commit
def test_with_the_broker_down_the_reregister_api_says_the_job_failed(sim_node, api_call, api_token, openapi):
    sim_node_1774(sim_node)
    token = api_token("act")
    with broker_down():
        response = api_call("post", "/api/v1/nodes/1774/reregister", token)
    job = Job.objects.get()
    assert (response.status_code, job.state) == (503, Job.State.FAILED)
    assert "could not queue the job" in response.json()["detail"] and response.json()["job_id"] == job.pk
    assert response["Retry-After"] == "10"
    jsonschema.validate(response.json(), answer_schema(openapi, "/api/v1/nodes/{node_id}/reregister", "post", 503))


# --- a failed run's waves --------------------------------------------------------------------------


def test_after_its_worker_dies_a_failed_runs_waves_no_longer_read_running(legacy_fleet, api_call, api_token):
    legacy_fleet(3)
    job = job_claim(job_id=bulk_request(parameters={"waves": True, "batch_size": 2}).job.pk)
    WaveRun.objects.filter(job=job).update(
        waves=[
            {"label": "batch 1", "nodes": 2, "done": 2, "failed": 0, "state": "done"},
            {"label": "batch 2", "nodes": 2, "done": 1, "failed": 0, "state": "running"},
            {"label": "batch 3", "nodes": 2, "done": 0, "failed": 0, "state": "pending"},
        ]
    )
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))  # the worker died
    assert jobs_reap() == 1
    waves = api_call("get", f"/api/v1/jobs/{job.pk}/waves", api_token("read")).json()
    assert (waves["job_state"], waves["state"]) == ("failed", "stopped")
    assert [w["state"] for w in waves["waves"]] == ["done", "stopped", "not reached"]


# --- who sees a hold's buyer ------------------------------------------------------------------------


def test_a_support_token_sees_that_slices_are_held_not_for_whom(sim_node, api_call, api_token):
    sim_node_1774(sim_node)
    hold_create(node_id=1774, slice_index=5, ttl_seconds=600, marketplace_id="buyer-1", source="command")
    support, admin = api_token("read", role="support"), api_token("read")
    holds = api_call("get", "/api/v1/holds", support).json()["holds"]
    node = api_call("get", "/api/v1/nodes/1774", support).json()
    assert [(h["slice_index"], h["marketplace_id"]) for h in holds] == [(5, None)]
    assert [c["held_for"] for c in node["catalog"] if c["state"] == "held"] == [None]  # the same rule
    assert api_call("get", "/api/v1/holds", admin).json()["holds"][0]["marketplace_id"] == "buyer-1"


# --- a deployed report where the chain takes no contract of ours -------------------------------------


@pytest.fixture
def rented_by_another_twin(sim_node, settings):
    settings.MARKETPLACE_TWIN_ID = (7,)
    sim_node.grid.deployer_twin = 7
    sim_node.grid.add_node(1774, **node_1774())
    sim_node.grid.rent(1774, 42)
    from dashboard.nodes.services.registration import node_register_from_grid

    return node_register_from_grid(live=sim_node.grid.node(1774), policy_name="zos")


def report(api_call, token, outcome: str, **fields):
    at = timezone.now().isoformat()  # the slice was made just now: a report must not be older
    sent = {"node_id": 1774, "slice_index": 0, "marketplace_id": "m-1", "outcome": outcome, "at": at, **fields}
    return api_call("post", "/api/v1/deployments", token, json=sent)


def test_a_deployed_report_on_a_node_rented_by_another_twin_is_refused_as_a_hold_is(
    rented_by_another_twin, api_call, api_token
):
    token = api_token("report")
    hold = api_call(
        "post",
        "/api/v1/holds",
        token,
        json={"node_id": 1774, "slice_index": 0, "ttl_seconds": 60, "marketplace_id": "h"},
    )
    deployed = report(api_call, token, "deployed")
    assert (hold.status_code, deployed.status_code) == (409, 409)
    assert "is rented by twin 42" in deployed.json()["detail"] and deployed.json()["field"] == "node_id"
    assert Node.objects.get(grid_id=1774).slices.filter(state="deployed").count() == 0


def test_a_failure_reported_there_is_still_recorded(rented_by_another_twin, api_call, api_token):
    failed = report(api_call, api_token("report"), "failed", error="node is rented by another twin")
    assert failed.status_code == 201, failed.json()
