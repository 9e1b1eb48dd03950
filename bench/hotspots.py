"""Where the time goes: cProfile of the overview page, the bulk re-register or the onboarding's writes, in-process.

    .venv/bin/python bench/hotspots.py overview --nodes 10000
    .venv/bin/python bench/hotspots.py placement --nodes 10000
    .venv/bin/python bench/hotspots.py bulk --nodes 1000
    .venv/bin/python bench/hotspots.py onboard --nodes 2000

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


class QueryKinds:
    """Counts every query by statement and first table, with its time (no 9,000-query log limit)."""

    def __init__(self) -> None:
        self.count: Counter = Counter()
        self.seconds: Counter = Counter()

    def __call__(self, execute, sql, params, many, context):
        words = sql.split()
        table = next((w.strip('"').split('"')[0] for w in words if w.startswith('"dashboard_')), "")
        kind = f"{words[0]} {table}{' FOR UPDATE' if 'FOR UPDATE' in sql else ''}".strip()
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.count[kind] += 1
            self.seconds[kind] += time.perf_counter() - started

    @property
    def total(self) -> int:
        return sum(self.count.values())

    def __str__(self) -> str:
        return ", ".join(f"{kind} ×{n} ({self.seconds[kind] * 1000:.0f} ms)" for kind, n in self.count.most_common(14))


def profile_overview(nodes: int, top: int, url: str = "/", name: str = "overview") -> None:
    from collections import defaultdict

    from django.db import connection

    from bench import pages, seed

    seed.database_seed(seed.fleet_specs(nodes), defaultdict(lambda: "0-0-bench"))
    client = pages.admin_client()
    for _ in range(2):
        client.get(url)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        client.get(url)
        times.append(time.perf_counter() - started)
    queries = QueryKinds()
    with connection.execute_wrapper(queries):
        profiler = cProfile.Profile()
        profiler.enable()
        client.get(url)
        profiler.disable()
    print(f"{name} at {nodes:,} nodes: median {statistics.median(times) * 1000:.1f} ms; queries: {queries}")
    _print(profiler, top)


def profile_bulk(nodes: int, top: int, env, *, cprofile: bool = True) -> None:
    from django.db import connection

    from bench import seed
    from dashboard.catalogs.services import reregister
    from dashboard.jobs.services import jobs
    from dashboard.models import Job
    from sim.grid import SimulatedGrid

    specs = seed.fleet_specs(nodes)
    workloads, _ = seed.simulator_seed(SimulatedGrid(env.simgrid_path), specs)
    seed.database_seed(specs, workloads)
    job = jobs.job_claim(job_id=Job.objects.create(kind=Job.Kind.BULK_REREGISTER, source=Job.Source.COMMAND).pk)
    profiler = cProfile.Profile()
    queries = QueryKinds()
    with connection.execute_wrapper(queries):
        started = time.perf_counter()
        if cprofile:
            profiler.enable()
        reregister.bulk_reregister(job=job)
        profiler.disable()
        elapsed = time.perf_counter() - started
    sql = sum(queries.seconds.values())
    print(
        f"bulk re-register of {nodes:,} nodes in-process{' (under cProfile)' if cprofile else ''}: {elapsed:.2f} s, "
        f"{elapsed * 1000 / nodes:.2f} ms/node, of which SQL statements {sql * 1000 / nodes:.2f} ms/node "
        f"(BEGIN/COMMIT not counted); {queries.total / nodes:.1f} statements/node: {queries}"
    )
    if cprofile:
        _print(profiler, top)


def profile_onboard(nodes: int, top: int, *, cprofile: bool = True) -> None:
    """The onboarding's database side without the network: pages of 100 new nodes (bench.onboard's
    shapes) through page_apply, each page its own transaction, as the job writes them."""
    from django.db import connection

    from bench.onboard import FARMS, FIRST_NODE_ID
    from dashboard.capacity import GiB, Resources
    from dashboard.grid.types import NodeCapacity
    from dashboard.jobs.results import OnboardResult
    from dashboard.nodes.services.onboarding.apply import page_apply
    from dashboard.nodes.services.onboarding.request import OnboardRequest

    shapes = ((8, 31 * GiB, int(931.5 * GiB)), (16, 62 * GiB, 2 * int(931.5 * GiB)), (4, 15 * GiB, 476 * GiB))
    lives = []
    for i in range(nodes):
        cru, mru, sru = shapes[i % len(shapes)]
        farm = FARMS[i % len(FARMS)]
        lives.append(
            NodeCapacity(
                node_id=FIRST_NODE_ID + i,
                farm_id=farm,
                farm_name=f"bench farm {farm}",
                twin_id=10_000 + i,
                status="up",
                dedicated=False,
                rented_by_twin_id=None,
                total=Resources(cru=cru, mru=mru, sru=sru, hru=0),
                used=Resources(cru=0, mru=max(mru // 10, 2 * GiB), sru=20 * GiB, hru=0),
            )
        )
    request = OnboardRequest(farm_ids=tuple(FARMS), max_new_nodes=nodes)
    result = OnboardResult()
    profiler = cProfile.Profile()
    queries = QueryKinds()
    with connection.execute_wrapper(queries):
        started = time.perf_counter()
        if cprofile:
            profiler.enable()
        for start in range(0, nodes, 100):
            page_apply(lives[start : start + 100], request=request, result=result)
        profiler.disable()
        elapsed = time.perf_counter() - started
    sql = sum(queries.seconds.values())
    print(
        f"onboarding's writes for {nodes:,} new nodes in-process{' (under cProfile)' if cprofile else ''}: "
        f"{elapsed:.2f} s, {elapsed * 1000 / nodes:.2f} ms/node, of which SQL statements {sql * 1000 / nodes:.2f} "
        f"ms/node; {queries.total / nodes:.2f} statements/node: {queries}"
    )
    if cprofile:
        _print(profiler, top)


def profile_policy(nodes: int, top: int, *, cprofile: bool = True) -> None:
    """An edit of the fleet default's slice memory (4 -> 8 GiB and back), as bench/pages.py times it."""
    from collections import defaultdict

    from django.db import connection

    from bench import pages, seed

    seed.database_seed(seed.fleet_specs(nodes), defaultdict(lambda: "0-0-bench"))
    pages.policy_edit_measure(repeat=2)  # warm: the policy book, the carve memo
    profiler = cProfile.Profile()
    queries = QueryKinds()
    with connection.execute_wrapper(queries):
        started = time.perf_counter()
        if cprofile:
            profiler.enable()
        figures = pages.policy_edit_measure(repeat=2)
        profiler.disable()
        elapsed = time.perf_counter() - started
    print(f"2 fleet-default edits at {nodes:,} nodes: {elapsed:.2f} s ({figures}); queries: {queries}")
    if cprofile:
        _print(profiler, top)


def _print(profiler: cProfile.Profile, top: int) -> None:
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/hotspots.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("overview", "placement", "bulk", "onboard", "policy"))
    parser.add_argument("--nodes", type=int, default=None, help="fleet size (overview 10000, bulk 1000)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--no-cprofile", action="store_true", help="bulk, onboard: time and queries only, without cProfile's overhead"
    )
    args = parser.parse_args()
    nodes = args.nodes or (10000 if args.what in ("overview", "placement") else 1000)
    work_dir = Path(tempfile.mkdtemp(prefix="slicedash-profile-"))
    env = bench_env(work_dir)
    database_recreate(env)
    try:
        django_setup(env)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        if args.what == "overview":
            profile_overview(nodes, args.top)
        elif args.what == "placement":
            from bench.pages import PLACEMENT_URL

            profile_overview(nodes, args.top, url=PLACEMENT_URL, name="placement")
        elif args.what == "policy":
            profile_policy(nodes, args.top, cprofile=not args.no_cprofile)
        elif args.what == "onboard":
            profile_onboard(nodes, args.top, cprofile=not args.no_cprofile)
        else:
            profile_bulk(nodes, args.top, env, cprofile=not args.no_cprofile)
    finally:
        database_drop(env)
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
