"""Grid Proxy requests counted for /metrics: by endpoint and outcome, from any process, never lost or doubled."""

import pytest
from django.db import DatabaseError
from prometheus_client.parser import text_string_to_metric_families

from dashboard.grid import telemetry
from dashboard.grid.budget import MemoryWindow, RequestBudget
from dashboard.grid.proxy import GridProxyClient
from dashboard.grid.types import GridUnavailable, NodeNotFound
from dashboard.jobs.services import grid_requests
from dashboard.jobs.services.grid_requests import grid_requests_store
from dashboard.models import GridRequestTally
from tests.gridproxy_canned import Answer, sample, start_canned_proxy

TOKEN = "metrics-token-for-the-grid-tests"


@pytest.fixture(autouse=True)
def empty_tally():
    telemetry.drain()
    yield
    telemetry.drain()


@pytest.fixture
def proxy():
    canned, server = start_canned_proxy()
    yield canned
    server.shutdown()
    server.server_close()


def _client(proxy) -> GridProxyClient:
    return GridProxyClient(proxy.url, connect_timeout=1.0, read_timeout=1.0, retries=1, backoff=0.001)


def _histogram(client) -> dict:
    text = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).content.decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "slicedash_grid_request_duration_seconds"
        for s in family.samples
    }


@pytest.mark.django_db
def test_each_request_is_counted_by_endpoint_and_outcome_and_scraped_as_a_histogram(proxy, client, settings):
    settings.METRICS_TOKEN = TOKEN
    proxy.answer("/nodes/1774", sample("node-1774.json"))
    proxy.answer("/nodes/9", Answer(404, {"error": "node not found"}))
    proxy.answer("/nodes/10", Answer(503, "busy"))
    grid = _client(proxy)
    grid.node(1774)
    grid.node(1774)
    with pytest.raises(NodeNotFound):
        grid.node(9)
    with pytest.raises(GridUnavailable):
        grid.node(10)  # two tries, one request as the caller sees it

    assert grid_requests_store() == 3  # three (endpoint, outcome, bucket) rows
    samples = _histogram(client)
    ok = (("endpoint", "/nodes/{id}"), ("outcome", "ok"))
    assert samples[("slicedash_grid_request_duration_seconds_count", ok)] == 2
    assert samples[("slicedash_grid_request_duration_seconds_bucket", (*ok[:1], ("le", "+Inf"), *ok[1:]))] == 2
    assert samples[("slicedash_grid_request_duration_seconds_sum", ok)] > 0
    assert (
        samples[
            ("slicedash_grid_request_duration_seconds_count", (("endpoint", "/nodes/{id}"), ("outcome", "not_found")))
        ]
        == 1
    )
    assert (
        samples[
            ("slicedash_grid_request_duration_seconds_count", (("endpoint", "/nodes/{id}"), ("outcome", "unavailable")))
        ]
        == 1
    )


@pytest.mark.django_db
def test_two_processes_stores_add_up(proxy):
    proxy.answer("/nodes/1774", sample("node-1774.json"))
    _client(proxy).node(1774)
    grid_requests_store()
    _client(proxy).node(1774)  # as another process would: its own tally, the same rows
    grid_requests_store()
    assert sum(GridRequestTally.objects.values_list("count", flat=True)) == 2


@pytest.mark.django_db
def test_a_store_that_fails_keeps_the_tally_for_the_next(proxy, monkeypatch):
    proxy.answer("/nodes/1774", sample("node-1774.json"))
    _client(proxy).node(1774)

    def broken(*args, **kwargs):
        raise DatabaseError("the database went away")

    with monkeypatch.context() as m:
        m.setattr(grid_requests.transaction, "atomic", broken)
        assert grid_requests_store() == 0
    assert grid_requests_store() == 1
    assert GridRequestTally.objects.get().count == 1


@pytest.mark.django_db
def test_a_web_request_that_read_the_grid_stores_its_tally(client, settings):
    settings.METRICS_TOKEN = TOKEN
    telemetry.record(endpoint="/nodes/{id}", outcome="ok", seconds=0.2)  # as a precheck view's read would
    client.get("/accounts/login/")
    assert GridRequestTally.objects.get(bucket="0.25").count == 1


def test_endpoints_are_labelled_without_ids_and_unknown_paths_grouped():
    assert telemetry.endpoint_of("/nodes/1774/statistics") == "/nodes/{id}/statistics"
    assert telemetry.endpoint_of("/nodes?farm_ids=1&page=2") == "/nodes"
    assert telemetry.endpoint_of("/../../etc/passwd") == "other"


def test_a_duration_falls_in_the_smallest_bucket_that_holds_it():
    assert telemetry.bucket_of(0.05) == "0.05"
    assert telemetry.bucket_of(0.051) == "0.1"
    assert telemetry.bucket_of(31.0) == "+Inf"


@pytest.mark.django_db
def test_a_celery_task_stores_its_tally_when_it_ends():
    from celery.signals import task_postrun

    import dashboard.tasks  # noqa: F401  (connects the handler)

    telemetry.record(endpoint="/nodes", outcome="ok", seconds=1.5)
    task_postrun.send(sender=None, task_id="t", task=None, args=(), kwargs={}, retval=None, state="SUCCESS")
    assert GridRequestTally.objects.get(endpoint="/nodes").bucket == "2.5"


@pytest.mark.slow
@pytest.mark.django_db
def test_429s_and_budget_waits_are_scraped_beside_the_requests(proxy, client, settings):
    settings.METRICS_TOKEN = TOKEN
    proxy.answer(
        "/nodes/1774", Answer(429, {"error": "slow down"}, headers={"Retry-After": "0"}), sample("node-1774.json")
    )
    budget = RequestBudget(window=MemoryWindow(), limit=1, reserve=0)
    grid = GridProxyClient(proxy.url, retries=0, budget=budget)
    grid.node(1774)  # one 429 (waited and retried), then the answer; the retry waited for the budget
    grid_requests_store()

    text = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).content.decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }

    assert samples[("slicedash_grid_rate_limited_total", (("endpoint", "/nodes/{id}"),))] == 1
    assert samples[("slicedash_grid_budget_wait_seconds_count", (("priority", "interactive"),))] == 1
    assert (
        samples[("slicedash_grid_request_duration_seconds_count", (("endpoint", "/nodes/{id}"), ("outcome", "ok")))]
        == 1
    )
