"""Property-based tests of the API from its own OpenAPI schema (schemathesis): every operation, generated
inputs (valid ones, and invalid ones that must be refused), a token holding every scope; no server
error, and every response documented and matching its schema.

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
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

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
    # Invalid input: refused, never a crash; the refusal itself is documented JSON.
    GenerationMode.NEGATIVE: [not_a_server_error, content_type_conformance, response_schema_conformance],
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


def test_the_api_answers_every_generated_request_as_documented(api_schema, api_token):
    headers = {"Authorization": f"Bearer {api_token('read,precheck,report,act', role='admins')}"}
    statuses: Counter = Counter()
    by_mode: Counter = Counter()
    failures: dict[str, str] = {}
    operations = 0
    began = time.monotonic()
    for result in api_schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode, checks in CHECKS.items():

            @given(case=operation.as_strategy(generation_mode=mode))
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
                case.validate_response(response, checks=checks)  # noqa: B023

            try:
                check()
            except Exception as exc:  # every operation is tried; all failures are reported together
                failures[f"{mode.value} {operation.label}"] = str(exc)[:2000]
    figures = {
        "operations": operations,
        "examples_per_operation_and_mode": EXAMPLES,
        "calls": sum(statuses.values()),
        "statuses": {str(code): n for code, n in sorted(statuses.items())},
        "statuses_by_mode": {
            mode: {str(c): n for (m, c), n in sorted(by_mode.items()) if m == mode} for mode in ("positive", "negative")
        },
        "server_errors": sum(n for code, n in statuses.items() if code >= 500),
        "failures": failures,
        "wall_s": round(time.monotonic() - began, 1),
    }
    if os.environ.get("SCHEMATHESIS_REPORT"):
        with open(os.environ["SCHEMATHESIS_REPORT"], "w") as out:
            json.dump(figures, out, indent=2)
    assert operations == 25  # tests/test_api_openapi.py lists them
    assert failures == {}, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
