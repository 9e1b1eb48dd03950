"""What the API takes at its door: bounded whole numbers, clean text, times in a window; every error as JSON.

A refusal is a 4xx in the {"detail", "field"} shape, whoever made it (the API's views, django-ninja's
parser, Django's URL resolver, the upload limit), and writes nothing.
"""

import datetime as dt
import json

import pytest
from django.utils import timezone

from dashboard.capacity import GiB
from dashboard.models import INTEGER_MAX, Deployment, Slice

pytestmark = pytest.mark.django_db


@pytest.fixture
def node_1774(sim_node):
    node = sim_node(1774, policy_name="legacy", cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242)
    Slice.objects.filter(node=node).update(created_at=timezone.now() - dt.timedelta(days=1))
    return node


@pytest.fixture
def raw_call(client, api_token):
    """raw_call(method, path, body=b"", content_type=...) with a token holding every scope."""
    token = api_token("read,precheck,report,act", role="admins")

    def call(method: str, path: str, body: bytes | str = b"", content_type: str = "application/json"):
        return getattr(client, method)(
            path, body, content_type=content_type, headers={"Authorization": f"Bearer {token}"}
        )

    return call


def assert_error_shape(response, status: int, field=...):
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert {"detail", "field"} <= set(body) and isinstance(body["detail"], str) and body["detail"]
    if field is not ...:
        assert body["field"] == field


def report(**fields) -> str:
    body = {
        "node_id": 1774,
        "slice_index": 6,
        "marketplace_id": "c-1",
        "outcome": "failed",
        "error": "",
        "at": (timezone.now() - dt.timedelta(minutes=1)).isoformat(),
        **fields,
    }
    return json.dumps(body)


@pytest.mark.parametrize(
    ("path", "status"),
    [("/api/v1/no-such-thing", 404), ("/api/v1/nodes/1774/nope", 404), ("/api/v2/fleet", 404)],
)
def test_an_unknown_path_is_a_json_404(raw_call, path, status):
    assert_error_shape(raw_call("get", path), status, field=None)


def test_a_method_a_path_does_not_take_is_a_json_405_saying_which_it_takes(raw_call):
    response = raw_call("delete", "/api/v1/fleet")
    assert_error_shape(response, 405, field=None)
    assert "GET" in response["Allow"] and "GET" in response.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [b"{", b"\xff\xfe not utf-8", b"[]", b'"text"', b"null", json.dumps({"a": [[[[[[1]]]]]]}).encode()],
)
def test_a_body_that_is_not_the_object_asked_for_is_a_json_400(raw_call, node_1774, body):
    assert_error_shape(raw_call("post", "/api/v1/deployments", body), 400)
    assert Deployment.objects.count() == 0


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"node_id": 2**64}, "node_id"),
        ({"node_id": INTEGER_MAX + 1}, "node_id"),
        ({"slice_index": 2**64}, "slice_index"),
        ({"slice_index": 2**31}, "slice_index"),
        ({"marketplace_id": "a\ud800b"}, "marketplace_id"),
        ({"marketplace_id": "a\nb"}, "marketplace_id"),
        ({"marketplace_id": "\u202e"}, None),  # a bidi control is stored, and shown escaped: not refused
        ({"error": "x\x00"}, "error"),
        ({"error": "x\x1b[31m"}, "error"),
        ({"workload_id": "w\x7f"}, "workload_id"),
        ({"at": "0001-01-01T00:00:00+01:00"}, "at"),
        ({"at": "9999-12-31T23:59:59-14:00"}, "at"),
        ({"at": "2026-05-01T12:00:00"}, "at"),
        ({"at": 2**64}, "at"),
    ],
)
def test_a_report_field_out_of_bounds_is_a_400_naming_it(raw_call, node_1774, fields, field):
    response = raw_call("post", "/api/v1/deployments", report(**fields))
    if field is None:
        assert response.status_code == 201
        return
    assert_error_shape(response, 400, field=field)
    assert Deployment.objects.count() == 0


def test_a_report_time_is_stored_in_utc(raw_call, node_1774):
    local = (timezone.now() - dt.timedelta(minutes=5)).astimezone(dt.timezone(dt.timedelta(hours=-9, minutes=-30)))
    response = raw_call("post", "/api/v1/deployments", report(at=local.isoformat()))
    assert response.status_code == 201
    assert (
        response.json()["deployment"]["started_at"].endswith("Z")
        or "+00:00" in response.json()["deployment"]["started_at"]
    )
    assert Deployment.objects.get().started_at == local


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/nodes?page=18446744073709551616", "page"),
        ("/api/v1/nodes?farm_id=18446744073709551616", "farm_id"),
        ("/api/v1/nodes?search=%00", "search"),
        ("/api/v1/nodes?sort=%1b", "sort"),
        ("/api/v1/jobs?node_id=18446744073709551616", "node_id"),
        ("/api/v1/deployments?node_id=-1", "node_id"),
        ("/api/v1/deployments?page=0", "page"),
        ("/api/v1/nodes/18446744073709551616", "node_id"),
        ("/api/v1/placement?cru=1&mru=18446744073709551616&sru=0", "mru"),
    ],
)
def test_a_query_out_of_bounds_is_a_json_400(raw_call, node_1774, path, field):
    response = raw_call("get", path)
    assert_error_shape(response, 400, **({"field": field} if field else {}))


def test_a_query_that_is_not_utf_8_is_read_with_replacement_characters(raw_call, node_1774):
    # Django decodes a query string with U+FFFD for what is not UTF-8 (an encoded lone surrogate here).
    response = raw_call("get", "/api/v1/nodes?search=%ED%A0%80")
    assert (response.status_code, response.json()["count"]) == (200, 0)


def test_a_precheck_age_out_of_bounds_is_a_400(raw_call, node_1774):
    for age in (2**64, INTEGER_MAX + 1, -1):
        response = raw_call("post", "/api/v1/nodes/1774/precheck", json.dumps({"max_age_seconds": age}))
        assert_error_shape(response, 400, field="max_age_seconds")


def test_a_body_past_the_upload_limit_is_a_json_413_and_writes_nothing(raw_call, node_1774, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = raw_call("post", "/api/v1/deployments", report(error="x" * 20_000))
    assert_error_shape(response, 413, field=None)
    assert Deployment.objects.count() == 0
