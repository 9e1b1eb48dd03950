"""Property-based tests of the API from its own OpenAPI schema (schemathesis): every operation, generated
inputs (valid ones, and invalid ones that must be refused), a token holding every scope; no server
error, and every response (of valid and of invalid input) a documented status matching its schema. Path
parameters also name things that exist (node 1774 and two more, a run in waves, a live hold), so each
operation's success answer is checked against its schema too, not only its 404.

The suite runs a bounded number of examples per operation and mode; `make reliability` runs the same
test with many more (SCHEMATHESIS_EXAMPLES) and keeps its figures (SCHEMATHESIS_REPORT, a JSON path).

schemathesis' pytest loader (`from_fixture`) needs pytest internals that pytest 9 no longer has, so
the operations are driven here through its Python API: one Hypothesis run per operation and mode.
"""

import json
import os
import time
from collections import Counter

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dashboard.catalogs.services.reregister.waves import bulk_request
from dashboard.deployments.services.holds import hold_create
from dashboard.jobs.services.job_run import job_execute
from dashboard.jobs.services.jobs import job_claim
from dashboard.models import Hold, Job, Node, Slice, WaveRun

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "10"))
CHECKS = {
    # Valid input: answered as documented, with the documented shape.
    GenerationMode.POSITIVE: [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ],
    # Invalid input: refused, never a crash; the refusal is a documented status, in documented JSON.
    GenerationMode.NEGATIVE: [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ],
}


@pytest.fixture
def api_schema(settings, legacy_node_1774):
    # One throttle count would turn the later examples into 429s; the throttle has its own tests.
    settings.API_THROTTLE_RATE = "1000000/s"
    # Django's own test client does the same: a request that ends must not close the connection
    # that holds the test's transaction (schemathesis calls the WSGI app directly).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def known_ids(legacy_node_1774, legacy_fleet) -> dict[str, list[int]]:
    """Ids that name something, for the path parameters: node 1774 with a live hold, and a re-register run
    in waves over three more nodes, finished with their old catalogs kept (its waves, its rollbacks)."""
    hold = hold_create(node_id=1774, slice_index=5, ttl_seconds=1800, marketplace_id="buyer-1", source="command")
    legacy_fleet(3, first=2301)  # 2303 is left out of the path parameters: the explicit hold's, open
    run = bulk_request(parameters={"waves": True}).job
    job_execute(job=job_claim(job_id=run.pk), grid=legacy_fleet.grid)
    return {"node_id": [1774, 2301, 2302], "job_id": [run.pk], "hold_id": [hold.pk]}


def with_known_ids(strategy, known: dict[str, list[int]]):
    """The operation's generated cases, and as many again whose path parameters name things that exist
    (a random id is a 404 nearly always, so the answers' schemas would go unchecked)."""

    @st.composite
    def named(draw):
        case = draw(strategy)
        for name in list(case.path_parameters or {}):
            if name in known:
                case.path_parameters[name] = draw(st.sampled_from(known[name]))
        return case

    return st.one_of(strategy, named())


def steered_run(state: str) -> int:
    """A run in waves in `state` (the one kind of run each steering operation takes), its job's id."""
    Job.objects.filter(state__in=Job.ACTIVE_STATES).update(state=Job.State.FAILED, error="cleared for the test")
    job = bulk_request(parameters={"waves": True, "budget": 1}).job
    job_state = Job.State.QUEUED if state == WaveRun.State.AWAITING_APPROVAL else Job.State.RUNNING
    Job.objects.filter(pk=job.pk).update(state=job_state)
    WaveRun.objects.filter(job=job).update(state=state)
    return job.pk


def free_slice(grid_id: int) -> int:
    held = Hold.objects.live(timezone.now()).values_list("slice_id", flat=True)
    return Slice.objects.filter(node__grid_id=grid_id, state="free").exclude(pk__in=held).order_by("index")[0].index


# For an operation no generated request got a success answer from (its inputs must name things that fit
# together: a free slice, a run in the right state), one valid request, prepared just before it is sent.
VALID = {
    "GET /api/v1/placement": lambda: {"query": {"cru": 1, "mru": 2 * 1024**3, "sru": 20 * 1024**3}},
    "POST /api/v1/holds": lambda: {
        "body": {"node_id": 2303, "slice_index": free_slice(2303), "ttl_seconds": 60, "marketplace_id": "buyer-2"}
    },
    "POST /api/v1/deployments": lambda: {
        "body": {
            "node_id": 2302,
            "slice_index": free_slice(2302),
            "marketplace_id": "m-explicit",
            "outcome": "deployed",
            "at": timezone.now().isoformat(),
        }
    },
    "PUT /api/v1/nodes/{node_id}/pools": lambda: {
        "path_parameters": {"node_id": 1774},
        "body": {"pools": [{"name": "a", "type": "ssd", "size": Node.objects.get(grid_id=1774).total_sru, "used": 0}]},
    },
    "POST /api/v1/jobs/{job_id}/waves/approve": lambda: {
        "path_parameters": {"job_id": steered_run(WaveRun.State.AWAITING_APPROVAL)}
    },
    "POST /api/v1/jobs/{job_id}/waves/resume": lambda: {
        "path_parameters": {"job_id": steered_run(WaveRun.State.PAUSED)}
    },
    "POST /api/v1/jobs/{job_id}/waves/stop": lambda: {
        "path_parameters": {"job_id": steered_run(WaveRun.State.RUNNING)}
    },
}


def test_the_api_answers_every_generated_request_as_documented(api_schema, api_token, known_ids):
    headers = {"Authorization": f"Bearer {api_token('read,precheck,report,act', role='admins')}"}
    statuses: Counter = Counter()
    by_mode: Counter = Counter()
    answered: Counter = Counter()  # operations' 2xx answers in the positive mode: their schemas were checked
    failures: dict[str, str] = {}
    operations = []
    began = time.monotonic()
    for result in api_schema.get_all_operations():
        operation = result.ok()
        operations.append(operation.label)
        for mode, checks in CHECKS.items():

            @given(case=with_known_ids(operation.as_strategy(generation_mode=mode), known_ids))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            def check(case):
                # mode and checks are this iteration's: check() runs before the loop moves on.
                response = case.call(headers=headers)
                statuses[response.status_code] += 1
                by_mode[(mode.value, response.status_code)] += 1  # noqa: B023
                if mode == GenerationMode.POSITIVE and response.status_code < 300:  # noqa: B023
                    answered[operation.label] += 1  # noqa: B023
                case.validate_response(response, checks=checks)  # noqa: B023

            try:
                check()
            except Exception as exc:  # every operation is tried; all failures are reported together
                failures[f"{mode.value} {operation.label}"] = str(exc)[:2000]
    for result in api_schema.get_all_operations():
        operation = result.ok()
        if operation.label in answered or operation.label not in VALID:
            continue
        case = operation.Case(**VALID[operation.label]())
        response = case.call(headers=headers)
        statuses[response.status_code] += 1
        by_mode[("explicit", response.status_code)] += 1
        answered[operation.label] += response.status_code < 300
        try:
            case.validate_response(response, checks=CHECKS[GenerationMode.POSITIVE])
        except Exception as exc:
            failures[f"explicit {operation.label}"] = str(exc)[:2000]
    figures = {
        "operations": len(operations),
        "examples_per_operation_and_mode": EXAMPLES,
        "calls": sum(statuses.values()),
        "statuses": {str(code): n for code, n in sorted(statuses.items())},
        "statuses_by_mode": {
            mode: {str(c): n for (m, c), n in sorted(by_mode.items()) if m == mode}
            for mode in ("positive", "negative", "explicit")
        },
        "server_errors": sum(n for code, n in statuses.items() if code >= 500),
        "violations": len(failures),
        "failures": failures,
        "operations_never_answered_2xx": sorted(set(operations) - {k for k, n in answered.items() if n}),
        "wall_s": round(time.monotonic() - began, 1),
    }
    if os.environ.get("SCHEMATHESIS_REPORT"):
        with open(os.environ["SCHEMATHESIS_REPORT"], "w") as out:
            json.dump(figures, out, indent=2)
    assert len(operations) == 26  # tests/api/test_api_openapi.py lists them
    assert failures == {}, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
    # Every operation's success answer was checked against its schema at least once.
    assert figures["operations_never_answered_2xx"] == []
