"""/api/v1/openapi.json is a valid OpenAPI document listing every endpoint; /api/v1/docs shows it."""

import json

import pytest

pytestmark = pytest.mark.django_db

ENDPOINTS = {
    ("get", "/api/v1/fleet"),
    ("get", "/api/v1/nodes"),
    ("get", "/api/v1/nodes/{node_id}"),
    ("get", "/api/v1/placement"),
    ("get", "/api/v1/probes"),
    ("post", "/api/v1/probes"),
    ("post", "/api/v1/nodes/{node_id}/precheck"),
    ("post", "/api/v1/nodes/{node_id}/reregister"),
    ("get", "/api/v1/jobs"),
    ("get", "/api/v1/jobs/{job_id}/waves"),
    ("post", "/api/v1/jobs/{job_id}/waves/approve"),
    ("post", "/api/v1/jobs/{job_id}/waves/resume"),
    ("post", "/api/v1/jobs/{job_id}/waves/stop"),
    ("post", "/api/v1/jobs/{job_id}/rollback"),
    ("post", "/api/v1/jobs/{job_id}/rollback/{node_id}"),
    ("get", "/api/v1/deployments"),
    ("post", "/api/v1/deployments"),
    ("get", "/api/v1/policies"),
    ("post", "/api/v1/explain"),
    ("put", "/api/v1/nodes/{node_id}/pools"),
    ("get", "/api/v1/nodes/{node_id}/withhold"),
    ("post", "/api/v1/nodes/{node_id}/withhold"),
    ("delete", "/api/v1/nodes/{node_id}/withhold"),
    ("post", "/api/v1/holds"),
    ("get", "/api/v1/holds"),
    ("delete", "/api/v1/holds/{hold_id}"),
}


@pytest.fixture
def schema(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_it_validates_as_openapi(schema):
    from openapi_spec_validator import validate

    validate(schema)  # raises on an invalid document


def test_it_lists_every_endpoint(schema):
    listed = {(method, path) for path, operations in schema["paths"].items() for method in operations}
    assert listed == ENDPOINTS


def test_it_asks_for_a_bearer_token_on_every_operation(schema):
    schemes = schema["components"]["securitySchemes"]
    assert {s["scheme"] for s in schemes.values()} == {"bearer"}
    assert all(op.get("security") for ops in schema["paths"].values() for op in ops.values())


def test_it_serves_the_docs_from_its_own_static_files(client):
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    assert b"/static/ninja/swagger-ui-bundle.js" in response.content


@pytest.mark.django_db
def test_the_api_docs_link_back_to_the_dashboard_and_the_tokens_page(client):
    info = client.get("/api/v1/openapi.json").json()["info"]["description"]
    assert "[← Back to the dashboard](/)" in info and "(/api-tokens/)" in info


@pytest.mark.parametrize("path", ["/api/v1/jobs?state=null", "/api/v1/jobs/null%2Cnull/waves"])
def test_a_refused_filter_is_a_documented_400(client, api_call, api_token, path):
    """Issue 35: these were 400s the schema did not list (an undocumented status to schemathesis)."""
    response = api_call("get", path, api_token("read"))
    assert response.status_code == 400
    operation = "/api/v1/jobs" if "waves" not in path else "/api/v1/jobs/{job_id}/waves"
    assert "400" in client.get("/api/v1/openapi.json").json()["paths"][operation]["get"]["responses"]


def test_the_document_is_made_once_and_no_caller_changes_what_the_next_reads(client):
    from dashboard.api.main import api

    first = api.get_openapi_schema(path_prefix="/api/v1/")
    first["paths"].clear()
    first["info"]["title"] = "changed by a caller"
    again = api.get_openapi_schema(path_prefix="/api/v1/")
    assert again["info"]["title"] == "Slice catalog dashboard API"
    assert ("get", "/api/v1/fleet") in {(m, p) for p, item in again["paths"].items() for m in item}
    served = client.get("/api/v1/openapi.json").json()
    assert served == json.loads(json.dumps(api.get_openapi_schema(path_prefix="/api/v1/")))
