"""Jobs with a real worker: bulk re-register of the whole fleet, its SQL floor, and click to result."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from bench.procs import Worker


class JobTimeout(RuntimeError):
    pass


def job_wait(job_id: int, *, worker: Worker, timeout: float, poll: float = 0.05):
    """The job once it has ended; JobTimeout (worker stopped) if it does not end in time."""
    from dashboard.models import Job

    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        state = Job.objects.filter(pk=job_id).values_list("state", flat=True).first()
        if state not in Job.ACTIVE_STATES:
            return Job.objects.get(pk=job_id)
        if not worker.alive():
            raise JobTimeout(f"the worker died while job {job_id} was {state}; see {worker.log_path}")
        time.sleep(poll)
    worker.stop()
    raise JobTimeout(f"job {job_id} did not end within {timeout:.0f} s; the worker was stopped")


def bulk_measure(*, size: int, worker: Worker, timeout: float) -> dict:
    """Bulk re-register of every (stale) node: wall time, nodes per second, the worker's memory."""
    from dashboard.figures.selectors.fleet import fleet_overview
    from dashboard.jobs.services.jobs import job_request
    from dashboard.models import Job

    before = worker.memory()
    started = time.perf_counter()
    requested = job_request(kind=Job.Kind.BULK_REREGISTER, source=Job.Source.COMMAND)
    job = job_wait(requested.job.pk, worker=worker, timeout=timeout)
    wall = time.perf_counter() - started
    after = worker.memory()
    result = job.result or {}
    if job.state != Job.State.SUCCEEDED:
        raise RuntimeError(f"the bulk job failed: {job.error}")
    slices = result.get("slices", {})
    stale_after = fleet_overview().totals.stale
    worker_s = (job.finished_at - job.started_at).total_seconds()
    return {
        "nodes": size,
        "job_id": job.pk,
        "stale_before": result.get("stale"),
        "reregistered": result.get("reregistered"),
        "failures": len(result.get("failures", [])),
        "stale_after": stale_after,
        "wall_s": round(wall, 2),
        "worker_s": round(worker_s, 2),
        "queue_s": round((job.started_at - job.created_at).total_seconds(), 3),
        "nodes_per_s": round(size / wall, 1),
        "slices_removed": slices.get("removed", 0),
        "slices_added": slices.get("added", 0),
        "result_json_kib": round(len(_json(result)) / 1024, 1),
        "worker_rss_before_mib": before["rss_mib"],
        "worker_peak_rss_mib": after["peak_rss_mib"],
        "worker_rss_after_mib": after["rss_mib"],
        "worker_growth_mib": round(after["peak_rss_mib"] - before["rss_mib"], 1),
    }


def _json(value) -> str:
    import json

    from django.core.serializers.json import DjangoJSONEncoder

    return json.dumps(value, cls=DjangoJSONEncoder)


@dataclass
class FloorPlan:
    """The catalog change the bulk job makes, planned ahead so that only the SQL is timed."""

    removed: list[int]  # slice pks
    added: list  # unsaved Slice rows
    updates: list[tuple]  # per node, in the order of the UPDATE's unnest() columns


def floor_measure(*, grid) -> dict:
    """The same catalog change in raw SQL, set-based in one transaction: the floor for the bulk job.

    Planned with the job's own reregister_plan on the grid's live capacity (not timed); timed:
    detach the removed slices from their deployments, delete them, COPY the new slices, and
    update the nodes' carve figures.
    """
    from dashboard.models import Node

    planning = time.perf_counter()
    nodes = list(Node.objects.order_by("grid_id"))
    seen = _grid_seen(grid, len(nodes))
    now = timezone.now()
    plan = _floor_plan(nodes, seen, now=now)
    planning = time.perf_counter() - planning

    started = time.perf_counter()
    deleted, updated = _floor_sql(plan, now=now)
    seconds = time.perf_counter() - started
    return {
        "nodes": len(nodes),
        "slices_removed": deleted,
        "slices_added": len(plan.added),
        "nodes_updated": updated,
        "sql_s": round(seconds, 3),
        "planning_s": round(planning, 2),
    }


def _grid_seen(grid, count: int) -> dict:
    """The grid's live view of the nodes, read a page of 1,000 at a time until `count` are seen."""
    seen = {}
    page = 1
    while len(seen) < count:
        found = grid.nodes(page=page, size=1000).nodes
        if not found:
            break
        seen.update({n.node_id: n for n in found})
        page += 1
    return seen


def _floor_plan(nodes: list, seen: dict, *, now) -> FloorPlan:
    """Each node's re-register planned with the job's own reregister_plan, under the policies it resolves."""
    from dashboard.catalogs.services.reregister import reregister_plan
    from dashboard.models import Slice
    from dashboard.policies.selectors.policy_book import policies_for_nodes

    policies = policies_for_nodes(nodes)
    slices_by_node: dict[int, list] = {}
    for s in Slice.objects.order_by("node_id", "index"):
        slices_by_node.setdefault(s.node_id, []).append(s)
    removed, added, updates = [], [], []
    for node in nodes:
        plan = reregister_plan(
            node=node, slices=slices_by_node.get(node.pk, []), policy=policies[node.pk], seen=seen[node.grid_id]
        )
        generation = plan.generation + (1 if plan.changes_slices else 0)
        removed.extend(s.pk for s in plan.removed)
        for s in plan.added:
            s.generation, s.created_at, s.updated_at = generation, now, now
        added.extend(plan.added)
        updates.append(
            (
                node.pk,
                plan.policy.name,
                plan.policy.version,
                plan.carved_slice_sru,
                plan.carve.slices,
                generation,
                plan.placeable_after,
                plan.phantom_after,
                plan.seen.used.mru,
                plan.seen.used.sru,
            )
        )
    return FloorPlan(removed=removed, added=added, updates=updates)


def _floor_sql(plan: FloorPlan, *, now) -> tuple[int, int]:
    """The change in one transaction; returns the slices deleted and the nodes updated."""
    from bench.seed import copy_rows
    from dashboard.models import Deployment, Node, Slice

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Deployment._meta.db_table} SET slice_id = NULL WHERE slice_id = ANY(%s)", [plan.removed]
        )
        cursor.execute(f"DELETE FROM {Slice._meta.db_table} WHERE id = ANY(%s)", [plan.removed])
        deleted = cursor.rowcount
        copy_rows(Slice, plan.added, with_pk=False)
        columns = list(zip(*plan.updates, strict=True))
        cursor.execute(
            f"""
            UPDATE {Node._meta.db_table} AS n SET
                carved_policy_name = u.name, carved_policy_version = u.version, carved_slice_sru = u.sru,
                carved_deployable = u.deployable, catalog_generation = u.generation, placeable_now = u.placeable,
                phantom_slices = u.phantom, used_mru = u.used_mru, used_sru = u.used_sru,
                seen_at = %s, prechecked_at = %s, updated_at = %s
            FROM unnest(%s::bigint[], %s::text[], %s::int[], %s::bigint[], %s::int[], %s::int[], %s::int[],
                        %s::int[], %s::bigint[], %s::bigint[])
                AS u(id, name, version, sru, deployable, generation, placeable, phantom, used_mru, used_sru)
            WHERE n.id = u.id
            """,
            [now, now, now, *[list(c) for c in columns]],
        )
        return deleted, cursor.rowcount


def clicks_measure(*, node_ids: list[int], worker: Worker, timeout: float = 60.0) -> dict:
    """POST Re-register on each node, then its job page until it shows the result.

    The job row is polled every 5 ms (a query of well under a millisecond) and the page is
    fetched as soon as the job has ended, so the figure is what a page asking at the right
    moment would get. The page itself polls every second (hx-trigger="every 1s"), which a
    person sees on top of this.
    """
    from bench.pages import admin_client
    from dashboard.models import Job

    client = admin_client()
    totals, posts, queues, runs, pages = [], [], [], [], []
    for node_id in node_ids:
        started = time.perf_counter()
        response = client.post(f"/nodes/{node_id}/reregister/")
        posted = time.perf_counter()
        if response.status_code != 302 or "/jobs/" not in response["Location"]:
            raise RuntimeError(f"POST re-register of node {node_id} answered {response.status_code}")
        url = response["Location"]
        job_id = int(url.rstrip("/").rsplit("/", 1)[1])
        job = job_wait(job_id, worker=worker, timeout=timeout, poll=0.005)
        asked = time.perf_counter()
        page = client.get(url)
        ended = time.perf_counter()
        if job.state != Job.State.SUCCEEDED or b'data-job-state="succeeded"' not in page.content:
            raise RuntimeError(f"re-register of node {node_id} did not succeed: {job.state} {job.error}")
        if b"The catalog now has" not in page.content:
            raise RuntimeError(f"the job page of node {node_id} does not show the result")
        totals.append(ended - started)
        posts.append(posted - started)
        queues.append((job.started_at - job.created_at).total_seconds())
        runs.append((job.finished_at - job.started_at).total_seconds())
        pages.append(ended - asked)

    def ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 1)

    return {
        "clicks": len(node_ids),
        "median_ms": ms(totals),
        "max_ms": round(max(totals) * 1000, 1),
        "post_median_ms": ms(posts),
        "queue_median_ms": ms(queues),
        "run_median_ms": ms(runs),
        "page_median_ms": ms(pages),
    }
