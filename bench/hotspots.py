"""Where the time goes: cProfile of the overview page or of the bulk re-register, in-process.

    .venv/bin/python bench/hotspots.py overview --nodes 10000
    .venv/bin/python bench/hotspots.py bulk --nodes 1000

Same database, seeding and settings as `make bench` (its own database, dropped afterwards).
Prints the timing, the queries by kind and the top functions by cumulative and own time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.env import bench_env, database_drop, database_recreate, django_setup  # noqa: E402


def query_kinds(captured: list[dict]) -> list[tuple[str, int, float]]:
    """('UPDATE dashboard_job', count, total ms) and so on: the statement and its first table."""
    kinds, seconds = Counter(), Counter()
    for query in captured:
        words = query["sql"].split()
        table = next((w.strip('"').split('"')[0] for w in words if w.startswith('"dashboard_')), "")
        kind = f"{words[0]} {table}{' FOR UPDATE' if 'FOR UPDATE' in query['sql'] else ''}".strip()
        kinds[kind] += 1
        seconds[kind] += float(query.get("time") or 0)
    return [(kind, n, round(seconds[kind] * 1000)) for kind, n in kinds.most_common(14)]


def profile_overview(nodes: int, top: int) -> None:
    from collections import defaultdict

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from bench import pages, seed

    seed.database_seed(seed.fleet_specs(nodes), defaultdict(lambda: "0-0-bench"))
    client = pages.admin_client()
    for _ in range(2):
        client.get("/")
    times = []
    for _ in range(5):
        started = time.perf_counter()
        client.get("/")
        times.append(time.perf_counter() - started)
    with CaptureQueriesContext(connection) as queries:
        profiler = cProfile.Profile()
        profiler.enable()
        client.get("/")
        profiler.disable()
    print(f"overview at {nodes:,} nodes: median {statistics.median(times) * 1000:.1f} ms; queries {query_kinds(queries.captured_queries)}")
    _print(profiler, top)


def profile_bulk(nodes: int, top: int, env) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from bench import seed
    from dashboard.grid.simulator import SimulatedGrid
    from dashboard.models import Job
    from dashboard.services import jobs

    specs = seed.fleet_specs(nodes)
    workloads, _ = seed.simulator_seed(SimulatedGrid(env.simgrid_path), specs)
    seed.database_seed(specs, workloads)
    job = jobs.job_claim(job_id=Job.objects.create(kind=Job.Kind.BULK_REREGISTER, source=Job.Source.COMMAND).pk)
    profiler = cProfile.Profile()
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        profiler.enable()
        jobs.bulk_reregister(job=job)
        profiler.disable()
        elapsed = time.perf_counter() - started
    count = len(queries.captured_queries)
    print(
        f"bulk re-register of {nodes:,} nodes in-process: {elapsed:.2f} s, {elapsed * 1000 / nodes:.2f} ms/node, "
        f"{count / nodes:.1f} queries/node; {query_kinds(queries.captured_queries)}"
    )
    _print(profiler, top)


def _print(profiler: cProfile.Profile, top: int) -> None:
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/hotspots.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("overview", "bulk"))
    parser.add_argument("--nodes", type=int, default=None, help="fleet size (overview 10000, bulk 1000)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    nodes = args.nodes or (10000 if args.what == "overview" else 1000)
    work_dir = Path(tempfile.mkdtemp(prefix="slicedash-profile-"))
    env = bench_env(work_dir)
    database_recreate(env)
    try:
        django_setup(env)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        if args.what == "overview":
            profile_overview(nodes, args.top)
        else:
            profile_bulk(nodes, args.top, env)
    finally:
        database_drop(env)
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
