"""Every field of every API operation, read from the OpenAPI schema, fed the values that broke it once.

Each string field (path, query or body) gets a NUL, a lone surrogate, bidi controls and 10 MB; each
date-time year 1 and 9999 at the extreme offsets (+14:00, -14:00), each date the calendar's ends;
each integer 2**64 (and its negative). The other fields of the call are valid, so each call tests
one field. Expected: never a 5xx, every refusal in the {"detail", "field"} shape, and a refusal
writes nothing (every table's rows compared before and after).

Issue 22 ("0 500s and 0 rows written on refusal"). The figures of a run are kept in
API_FUZZ_REPORT (a JSON path) when it is set; RELIABILITY.md quotes them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter
from urllib.parse import quote

import pytest
from django.apps import apps
from django.utils import timezone

from dashboard.capacity import GiB
from dashboard.models import ApiToken, Slice

# Long (10 MB bodies, every table compared around each call): `make test` and `make reliability`, not `make check`.
pytestmark = [pytest.mark.django_db, pytest.mark.slow]

TEN_MB = "x" * (10 * 1024 * 1024)
STRINGS = {
    "nul": "a\x00b",
    "surrogate": "a\ud800b",
    "bidi": "\u202egnp.exe\u202c\u2066x\u2069",
    "escape": "\x1b[31m",
    "10 MB": TEN_MB,
}
DATETIMES = {
    "year 1 +14:00": "0001-01-01T00:00:00+14:00",
    "year 1 +01:00": "0001-01-01T00:00:00+01:00",
    "year 1 -14:00": "0001-01-01T00:00:00-14:00",
    "year 9999 -14:00": "9999-12-31T23:59:59-14:00",
    "year 9999 +14:00": "9999-12-31T23:59:59+14:00",
}
DATES = {"year 1": "0001-01-01", "year 9999": "9999-12-31"}
INTEGERS = {"2**64": 2**64, "-2**64": -(2**64), "2**63": 2**63}

# Valid values by field name, so that a call differs from a good one in one field only.
VALID = {
    "node_id": 1774,
    "slice_index": 6,
    "marketplace_id": "fuzz-1",
    "outcome": "failed",
    "error": "cannot fulfil required memory size 4294967296 bytes out of usable 4187593113 bytes",
    "workload_id": "w-1",
    "cru": 1,
    "mru": 4 * GiB,
    "sru": 10 * GiB,
    "best": 3,
    "max_age_seconds": 3600,
    "dry_run": True,
}


@pytest.fixture
def node_1774(sim_node):
    node = sim_node(1774, policy_name="legacy", cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242)
    Slice.objects.filter(node=node).update(created_at=timezone.now() - dt.timedelta(days=1))
    return node


def _resolve(schema: dict, spec: dict) -> dict:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    if "anyOf" in schema:  # "X or null": the X
        schema = next(_resolve(s, spec) for s in schema["anyOf"] if s.get("type") != "null")
    return schema


def _kind(schema: dict) -> str:
    if schema.get("type") == "integer":
        return "integer"
    if schema.get("type") == "string":
        return {"date-time": "date-time", "date": "date"}.get(schema.get("format", ""), "string")
    return schema.get("type", "other")


def _valid(name: str, schema: dict):
    if name in VALID:
        return VALID[name]
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    return {
        "integer": schema.get("minimum", 1),
        "string": "x",
        "date-time": (timezone.now() - dt.timedelta(minutes=1)).isoformat(),
        "date": timezone.now().date().isoformat(),
        "boolean": False,
    }.get(_kind(schema), None)


def _hostile(kind: str) -> dict:
    return {"string": STRINGS, "date-time": DATETIMES, "date": DATES, "integer": INTEGERS}.get(kind, {})


def fields(spec: dict):
    """(method, path template, where, name, kind, valid call parts) for every field of every operation."""
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            parts = {"path": {}, "query": {}, "body": {}}
            found = []
            for parameter in operation.get("parameters", []):
                schema = _resolve(parameter["schema"], spec)
                parts[parameter["in"]][parameter["name"]] = _valid(parameter["name"], schema)
                found.append((parameter["in"], parameter["name"], _kind(schema)))
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body is not None:
                body = _resolve(body, spec)
                for name, schema in body.get("properties", {}).items():
                    schema = _resolve(schema, spec)
                    parts["body"][name] = _valid(name, schema)
                    found.append(("body", name, _kind(schema)))
            for where, name, kind in found:
                yield method, path, where, name, kind, parts


def rows() -> dict:
    """Every table of ours, row by row (ApiToken without its last-used stamp, written on every call)."""
    snapshot = {}
    for model in apps.get_app_config("dashboard").get_models():
        values = model.objects.order_by("pk").values()
        if model is ApiToken:
            values = [{k: v for k, v in row.items() if k != "last_used_at"} for row in values]
        snapshot[model.__name__] = list(values)
    return snapshot


def call(client, token, method, path, parts):
    url = "/api/v1" + path.removeprefix("/api/v1")
    for name, value in parts["path"].items():
        url = url.replace("{" + name + "}", quote(str(value), safe="", errors="surrogatepass"))
    query = "&".join(
        f"{name}={quote(str(value), safe='', errors='surrogatepass')}"
        for name, value in parts["query"].items()
        if value is not None
    )
    headers = {"Authorization": f"Bearer {token}"}
    if method == "get":
        return client.get(f"{url}?{query}" if query else url, headers=headers)
    body = json.dumps(parts["body"]) if parts["body"] else ""
    return getattr(client, method)(url, body, content_type="application/json", headers=headers)


def test_no_field_of_any_operation_gives_a_500_or_writes_on_refusal(client, api_token, node_1774, settings):
    settings.API_THROTTLE_RATE = "1000000/s"
    token = api_token("read,precheck,report,act", role="admins")
    spec = client.get("/api/v1/openapi.json").json()
    statuses: Counter = Counter()
    problems = []
    cases = 0
    for method, path, where, name, kind, parts in fields(spec):
        for label, value in _hostile(kind).items():
            cases += 1
            hostile = {part: dict(values) for part, values in parts.items()}
            hostile[where][name] = value
            before = rows()
            response = call(client, token, method, path, hostile)
            statuses[response.status_code] += 1
            what = f"{method.upper()} {path} {where} {name} = {label}: {response.status_code}"
            if response.status_code >= 500:
                problems.append(f"{what} {response.content[:200]!r}")
                continue
            if response.status_code >= 400:
                shaped = response["Content-Type"].startswith("application/json") and {"detail", "field"} <= set(
                    response.json()
                )
                if not shaped:
                    problems.append(f"{what}: not the error shape {response.content[:200]!r}")
                if rows() != before:
                    problems.append(f"{what}: a refusal wrote rows")
    figures = {
        "cases": cases,
        "statuses": {str(code): n for code, n in sorted(statuses.items())},
        "server_errors": sum(n for code, n in statuses.items() if code >= 500),
        "problems": problems,
    }
    if os.environ.get("API_FUZZ_REPORT"):
        with open(os.environ["API_FUZZ_REPORT"], "w") as out:
            json.dump(figures, out, indent=2)
    assert cases > 100
    assert problems == [], "\n".join(problems)
