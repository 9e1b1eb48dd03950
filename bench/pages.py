"""Server time and query count of the pages, through django.test.Client as a signed-in admin.

Time is the median wall time of `repeat` requests after `warmup` ones (templates compiled,
carves remembered, as in a running server); the query count comes from one more request
under CaptureQueriesContext. Every response must be a 200 with the expected content.
"""

from __future__ import annotations

import gc
import statistics
import time

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext


class PageError(RuntimeError):
    pass


# A slice of the demo's common size (1 core, 4 GiB, 50 GiB), asked of the whole fleet.
PLACEMENT_URL = "/placement/?cru=1&mru=4GiB&sru=50GiB"


def admin_client() -> Client:
    from django.contrib.auth import get_user_model

    from bench.seed import ADMIN_USERNAME

    client = Client()
    client.force_login(get_user_model().objects.get(username=ADMIN_USERNAME))
    return client


def page_figures(
    client: Client,
    url: str,
    *,
    repeat: int,
    warmup: int = 2,
    expect: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> dict:
    """{"median_ms", "min_ms", "max_ms", "queries", "bytes"} for GET url (with `headers`, e.g. a bearer token)."""
    for _ in range(warmup):
        _get(client, url, expect, headers)
    times = []
    # A collection in the middle of one request would only add noise to a median of few.
    gc.collect()
    for _ in range(repeat):
        started = time.perf_counter()
        response = _get(client, url, expect, headers)
        times.append(time.perf_counter() - started)
    with CaptureQueriesContext(connection) as queries:
        _get(client, url, expect, headers)
    return {
        "median_ms": round(statistics.median(times) * 1000, 1),
        "min_ms": round(min(times) * 1000, 1),
        "max_ms": round(max(times) * 1000, 1),
        "queries": len(queries.captured_queries),
        "bytes": len(response.content),
        "requests": repeat,
    }


def _get(client: Client, url: str, expect: bytes | None, headers: dict[str, str] | None = None):
    response = client.get(url, headers=headers)
    if response.status_code != 200:
        raise PageError(f"GET {url} answered {response.status_code}, not 200")
    if expect is not None and expect not in response.content:
        raise PageError(f"GET {url} did not contain {expect!r}")
    return response


def pages_interleaved(
    client: Client, pages: dict[str, tuple[str, bytes | None]], *, repeat: int, warmup: int = 2
) -> dict:
    """page_figures for several pages whose times are compared (key -> (url, expected content)), their
    requests taken in turn: a slow spell of the machine (seen here: whole seconds at twice the time)
    then falls on every page alike instead of on the one measured during it."""
    for _ in range(warmup):
        for url, expect in pages.values():
            _get(client, url, expect)
    times: dict[str, list[float]] = {key: [] for key in pages}
    responses = {}
    gc.collect()
    for _ in range(repeat):
        for key, (url, expect) in pages.items():
            started = time.perf_counter()
            responses[key] = _get(client, url, expect)
            times[key].append(time.perf_counter() - started)
    figures = {}
    for key, (url, expect) in pages.items():
        with CaptureQueriesContext(connection) as queries:
            _get(client, url, expect)
        figures[key] = {
            "median_ms": round(statistics.median(times[key]) * 1000, 1),
            "min_ms": round(min(times[key]) * 1000, 1),
            "max_ms": round(max(times[key]) * 1000, 1),
            "queries": len(queries.captured_queries),
            "bytes": len(responses[key].content),
            "requests": repeat,
        }
    return figures


def pages_measure(*, size: int, node_id: int, repeat: int, baselines: bool) -> dict:
    """The overview and one node's page at this fleet size; with `baselines`, the admin lists too."""
    client = admin_client()
    # The fleet map (every node one cell) and the fleet-wide placement answer for one slice size are
    # judged against the overview: measured in turn with it.
    figures = pages_interleaved(
        client,
        {
            "overview": ("/", f"<dd>{size:,}<".encode()),
            "fleet_map": ("/map/", b'class="map-farm"'),
            "placement": (PLACEMENT_URL, b"Where can a slice go?"),
        },
        repeat=repeat,
    )
    # One farm's cells as a collapsed map loads them when the farm is opened (htmx), and the whole map's size.
    from dashboard.models import Node

    farm = Node.objects.order_by("farm_id").values_list("farm_id", flat=True).first()
    figures["fleet_map_farm"] = page_figures(
        client, f"/map/?farm={farm}", repeat=repeat, headers={"HX-Request": "true"}, expect=b'class="cell s-'
    )
    figures["fleet_map"]["kib"] = round(figures["fleet_map"]["bytes"] / 1024, 1)
    figures["node_page"] = page_figures(client, f"/nodes/{node_id}/", repeat=repeat, expect=str(node_id).encode())
    figures["node_page_node_id"] = node_id
    if baselines:
        # Same columns, 100 rows a page (the admin's default), first page.
        figures["admin_changelist"] = page_figures(client, "/admin/dashboard/node/", repeat=repeat)
        figures["naive_admin_changelist"] = page_figures(
            client, "/bench-naive-admin/dashboard/node/", repeat=max(3, repeat // 3)
        )
    return figures


def map_cold_figures(*, repeat: int) -> dict:
    """The first /map/ after a write to every node row: each farm's totals summed and its cells made again
    (figures.selectors.fleet_map), as after a bulk job. A figure, not a target: the target is the map read again.
    Measured after the other pages and the API: each write leaves a dead version of every node row."""
    client = admin_client()
    from django.db.models import F

    from dashboard.models import Node

    times, queries = [], []
    for _ in range(repeat):
        Node.objects.update(seen_at=F("seen_at"))  # changes nothing, yet marks every farm changed
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = _get(client, "/map/", b'class="map-farm"', None)
            times.append(time.perf_counter() - started)
        queries.append(len(captured.captured_queries))
    return {
        "median_ms": round(statistics.median(times) * 1000, 1),
        "min_ms": round(min(times) * 1000, 1),
        "max_ms": round(max(times) * 1000, 1),
        "queries": max(queries),
        "bytes": len(response.content),
        "requests": repeat,
    }


def policy_edit_measure(*, repeat: int = 4) -> dict:
    """An edit of the fleet default through policy_update, then the rewrite of every node's figures.

    The price of an overview that reads stored figures: each edit changes the slice memory
    (4 GiB and 8 GiB in turn, ending where it began). `median_ms` is the edit as the admin's request
    pays it; over POLICY_FIGURES_INLINE_NODES nodes that is the policy's save and the job's queueing,
    and `rewrite_ms` the job's rewrite of every node's figures, run here as a worker runs it.
    """
    from dashboard.capacity import GiB
    from dashboard.models import Node, Policy

    fleet = Policy.objects.get(scope=Policy.Scope.FLEET)
    start = fleet.slice_mru
    times, rewrites = [], []
    for i in range(repeat + repeat % 2):  # an even number of edits puts the slice memory back
        fleet.refresh_from_db()
        slice_mru = start if i % 2 else (8 * GiB if start != 8 * GiB else 4 * GiB)
        edit_s, rewrite_s = policy_edit(fleet, {"slice_mru": slice_mru})
        times.append(edit_s)
        if rewrite_s is not None:
            rewrites.append(rewrite_s)
    return {
        "median_ms": round(statistics.median(times) * 1000, 1),
        "max_ms": round(max(times) * 1000, 1),
        "rewrite_ms": round(statistics.median(rewrites) * 1000, 1) if rewrites else None,
        "as_job": bool(rewrites),
        "nodes": Node.objects.count(),
        "edits": len(times),
    }


def policy_edit(policy, parameters: dict) -> tuple[float, float | None]:
    """policy_update as the request calls it, then the figures rewrite it queued (if it queued one),
    claimed and run in this process as a worker would: (edit seconds, rewrite seconds or None)."""
    from dashboard.jobs.services.job_run import job_execute
    from dashboard.jobs.services.jobs import job_claim
    from dashboard.models import Job
    from dashboard.policies.services.policy import policy_update

    started = time.perf_counter()
    policy_update(policy=policy, parameters=parameters)
    edit_s = time.perf_counter() - started
    queued = Job.objects.filter(kind=Job.Kind.POLICY_FIGURES, state=Job.State.QUEUED, parameters__policy_id=policy.pk)
    job = queued.order_by("-pk").first()
    if job is None:
        return edit_s, None
    started = time.perf_counter()
    job_execute(job=job_claim(job_id=job.pk))
    rewrite_s = time.perf_counter() - started
    job.refresh_from_db()
    if job.state != Job.State.SUCCEEDED:
        raise PageError(f"the figures rewrite after the policy edit ended {job.state}: {job.error}")
    return edit_s, rewrite_s
