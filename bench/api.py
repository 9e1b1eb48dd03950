"""The API and /metrics at fleet scale, as another program calls them: with real bearer tokens.

- `GET /api/v1/nodes?per_page=100` (the first page of 100, default sort) with a `read` token made
  by `access.services.tokens.api_token_create`, and a `/metrics` scrape with the METRICS_TOKEN of the
  bench's settings: timed as bench/pages.py times pages (median of `repeat` after 2 warm-up
  requests, the query count of one more under CaptureQueriesContext). The client holds no session:
  an API client sends its token and nothing else.
- `POST /api/v1/nodes/{id}/precheck` with a `precheck` token, one client calling in sequence
  through the whole Django stack (middleware, token look-up, throttle, the live read of the
  simulated grid the bench seeded, the verdicts and the node's UPDATE): calls per second, median
  and p99.

A fresh token per size: `api_token_use` stamps last_used_at at most once a minute, so the first
warm-up request pays that UPDATE and the counted request does not, at every size.
"""

from __future__ import annotations

import gc
import json
import statistics
import time

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench.pages import PageError, page_figures

NODES_PAGE = "/api/v1/nodes?per_page=100"


def bench_token(*, scope: str, name: str) -> str:
    """A real token of the bench's superuser, made by the service (stored hashed, audited); its secret."""
    from django.contrib.auth import get_user_model

    from bench.seed import ADMIN_USERNAME
    from dashboard.access.services.tokens import api_token_create

    admin = get_user_model().objects.get(username=ADMIN_USERNAME)
    return api_token_create(user=admin, name=name, scopes=[scope], source="command").secret


def api_measure(*, size: int, repeat: int, metrics_token: str) -> dict:
    """The nodes page of the API and a /metrics scrape at this fleet size."""
    client = Client()
    read = bench_token(scope="read", name=f"bench-read-{size}")
    nodes_page = page_figures(
        client,
        NODES_PAGE,
        repeat=repeat,
        headers={"Authorization": f"Bearer {read}"},
        expect=f'"count": {size},'.encode(),
    )
    nodes_page["rows"] = len(
        json.loads(client.get(NODES_PAGE, headers={"Authorization": f"Bearer {read}"}).content)["nodes"]
    )
    metrics = page_figures(
        client,
        "/metrics",
        repeat=repeat,
        headers={"Authorization": f"Bearer {metrics_token}"},
        expect=f"\nslicedash_fleet_nodes {float(size)}\n".encode(),
    )
    metrics["samples"] = _samples(client, "/metrics", metrics_token)
    # Per farm: its answer grows with the farms (12 series a farm), its query count must not.
    farms = page_figures(
        client,
        "/metrics/farms",
        repeat=repeat,
        headers={"Authorization": f"Bearer {metrics_token}"},
        expect=b"slicedash_farm_nodes{",
    )
    farms["samples"] = _samples(client, "/metrics/farms", metrics_token)
    farms["farms"] = farms["samples"] // 12
    return {"nodes_page": nodes_page, "metrics": metrics, "metrics_farms": farms}


def _samples(client: Client, path: str, token: str) -> int:
    text = client.get(path, headers={"Authorization": f"Bearer {token}"}).content.decode()
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def precheck_api_measure(*, node_ids: list[int], requests: int, warmup: int = 5) -> dict:
    """POST /api/v1/nodes/{id}/precheck over the up nodes among node_ids, in turn: calls/s, median, p99."""
    from dashboard.models import Node

    up = list(
        Node.objects.filter(grid_id__in=node_ids, status=Node.Status.UP)
        .order_by("grid_id")
        .values_list("grid_id", flat=True)
    )
    if not up:
        raise PageError("no up node to precheck through the API")
    client = Client()
    headers = {"Authorization": f"Bearer {bench_token(scope='precheck', name=f'bench-precheck-{len(node_ids)}')}"}

    def call(node_id: int):
        response = client.post(
            f"/api/v1/nodes/{node_id}/precheck", data="{}", content_type="application/json", headers=headers
        )
        if response.status_code != 200 or b'"verdicts"' not in response.content:
            raise PageError(
                f"POST precheck of node {node_id} answered {response.status_code}: {response.content[:300]!r}"
            )
        return response

    for node_id in up[:warmup]:
        call(node_id)
    gc.collect()
    times = []
    began = time.perf_counter()
    for i in range(requests):
        started = time.perf_counter()
        call(up[i % len(up)])
        times.append(time.perf_counter() - started)
    elapsed = time.perf_counter() - began
    with CaptureQueriesContext(connection) as queries:
        call(up[0])
    return {
        "requests": requests,
        "nodes": len(up),
        "calls_per_s": round(requests / elapsed, 1),
        "median_ms": round(statistics.median(times) * 1000, 2),
        "p99_ms": round(statistics.quantiles(times, n=100, method="inclusive")[98] * 1000, 2),
        "queries": len(queries.captured_queries),
    }
