"""Credentials in GRID_PROXY_URL go to the proxy as basic auth and never appear in a message (issue 22, finding 6).

Not in an error, a job's result, a log line or an API answer: the client takes user:password out
of the URL in one place (dashboard.grid.text.url_credentials_split) before any message is built.
"""

import base64
import logging
import socket

import pytest

from dashboard.grid.proxy import GridProxyClient
from dashboard.grid.text import text_credentials_redacted, url_credentials_split, url_redacted
from dashboard.grid.types import GridError
from tests.gridproxy_canned import Answer, sample, start_canned_proxy

PASSWORD = "s3cret-Pa55"


@pytest.fixture
def canned():
    proxy, server = start_canned_proxy()
    yield proxy
    server.shutdown()
    server.server_close()


def with_credentials(url: str) -> str:
    return url.replace("http://", f"http://ops:{PASSWORD}@")


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://ops:{PASSWORD}@127.0.0.1:{probe.getsockname()[1]}"


def test_the_url_is_split_in_one_place():
    assert url_credentials_split("https://ops:p%40ss@proxy.example:8443/v1") == (
        "https://proxy.example:8443/v1",
        ("ops", "p@ss"),
    )
    assert url_credentials_split("https://proxy.example") == ("https://proxy.example", None)
    assert url_redacted("https://ops:p%40ss@proxy.example/") == "https://***@proxy.example/"
    text = "GET https://ops:p%40ss@proxy.example/nodes failed (p@ss)"
    assert (
        text_credentials_redacted(text, "https://ops:p%40ss@proxy.example")
        == "GET https://***@proxy.example/nodes failed (***)"
    )


def test_the_client_sends_them_as_basic_auth(canned):
    canned.answer("/nodes/1774", sample("node-1774.json"))
    GridProxyClient(with_credentials(canned.url), retries=0).node(1774)
    assert canned.authorizations == ["Basic " + base64.b64encode(f"ops:{PASSWORD}".encode()).decode()]


@pytest.mark.parametrize(
    ("answer", "read"),
    [
        (Answer(404, {"error": "node not found"}), "node"),
        (Answer(500, "oops"), "node"),
        (Answer(200, "not json"), "node"),
        (Answer(302, "", headers={"Location": "https://elsewhere.example/nodes/1774"}), "node"),
        (Answer(200, {"not": "a list"}), "nodes"),
    ],
)
def test_no_error_from_the_proxy_names_them(canned, caplog, answer, read):
    canned.answer("/nodes/1774", answer)
    canned.answer("/nodes", answer)
    client = GridProxyClient(with_credentials(canned.url), retries=1, backoff=0)
    with caplog.at_level(logging.DEBUG), pytest.raises(GridError) as failed:
        client.node(1774) if read == "node" else client.nodes(farm_ids=[1])
    assert PASSWORD not in str(failed.value) and "ops:" not in str(failed.value)
    assert canned.url.removeprefix("http://") in str(failed.value)  # the host is still named
    assert PASSWORD not in caplog.text


def test_an_unreachable_proxy_is_named_without_them(caplog):
    client = GridProxyClient(closed_port_url(), retries=0, deadline=2)
    with caplog.at_level(logging.DEBUG), pytest.raises(GridError) as failed:
        client.node(1)
    assert PASSWORD not in str(failed.value) and PASSWORD not in caplog.text and PASSWORD not in repr(client)


def test_a_malformed_url_is_refused_without_them():
    with pytest.raises(ValueError) as refused:
        GridProxyClient(f"ftp://ops:{PASSWORD}@proxy.example")
    assert PASSWORD not in str(refused.value) and "***@proxy.example" in str(refused.value)


@pytest.mark.django_db
def test_the_api_and_the_command_line_never_show_them(settings, api_call, api_token, sim_node):
    from django.core.management import CommandError, call_command

    from dashboard.capacity import GiB

    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=1)
    settings.GRID_BACKEND, settings.GRID_PROXY_URL, settings.GRID_RETRIES = "gridproxy", closed_port_url(), 0
    settings.GRID_DEADLINE = 2
    response = api_call("post", "/api/v1/nodes/1774/precheck", api_token("precheck"))
    assert response.status_code == 503 and PASSWORD not in response.content.decode()
    with pytest.raises(CommandError) as failed:
        call_command("node_register", "2601")
    assert PASSWORD not in str(failed.value)
