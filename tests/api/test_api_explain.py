"""POST /api/v1/explain: the classifier's cause, numbers and words for a ZOS error text."""

import pytest

pytestmark = pytest.mark.django_db
MEMORY_ERROR = "cannot fulfil required memory size 4294967296 bytes out of usable 4187593113 bytes"


def test_it_explains_a_memory_refusal(api_call, api_token):
    body = api_call("post", "/api/v1/explain", api_token("read"), json={"error": MEMORY_ERROR}).json()
    assert (body["cause"], body["needed_bytes"], body["usable_bytes"]) == ("memory", 4294967296, 4187593113)
    assert body["words"].startswith("ZOS refused the VM for memory")


def test_it_calls_an_unknown_text_unknown(api_call, api_token):
    assert (
        api_call("post", "/api/v1/explain", api_token("read"), json={"error": "the cat sat"}).json()["cause"]
        == "unknown"
    )


def test_it_refuses_an_empty_error_naming_the_field(api_call, api_token):
    response = api_call("post", "/api/v1/explain", api_token("read"), json={"error": ""})
    assert (response.status_code, response.json()["field"]) == (400, "error")


def test_it_refuses_a_body_that_is_not_json(client, api_token):
    response = client.post(
        "/api/v1/explain",
        "not json",
        content_type="application/json",
        headers={"Authorization": f"Bearer {api_token('read')}"},
    )
    assert response.status_code == 400


def test_it_refuses_a_get(api_call, api_token):
    assert api_call("get", "/api/v1/explain", api_token("read")).status_code == 405
