"""`make bench`: the dashboard's figures at fleet scale, measured in one run.

    .venv/bin/python bench/run.py                      # full: 100, 1,000 and 10,000 nodes
    .venv/bin/python bench/run.py --sizes 100,1000 --quick

Creates its own PostgreSQL database (BENCH_DATABASE_URL, default slicedash_bench; dropped at
the end) and uses Redis db 6 (BENCH_BROKER_URL), a simulated grid in a temporary folder and
real Celery workers; everything on loopback. Prints ONE JSON object on stdout (progress goes
to stderr) and, for a full run, rewrites the results in BENCHMARKS.md between its markers.
A full run first waits (up to --max-wait seconds) for the 1-minute load average to fall
below --max-load, since other work on a 2-core machine would be measured too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.env import BenchSetupError, bench_env, database_drop, database_recreate, django_setup  # noqa: E402

DEFAULT_SIZES = (100, 1000, 10000)
BULK_MIN_SIZE = 1000
BULK_TIMEOUT_S = 600.0


# (what the bench was starting, 1-minute load average then): the bench's own worker and
# PostgreSQL count in it too, so about 1 to 2 is the bench alone on 2 cores.
LOAD_SAMPLES: list[tuple[str, float]] = []


def log(message: str) -> None:
    LOAD_SAMPLES.append((message[:60], round(os.getloadavg()[0], 2)))
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default=",".join(str(s) for s in DEFAULT_SIZES),
        help="fleet sizes, comma-separated (default 100,1000,10000)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, no load wait, no BENCHMARKS.md")
    parser.add_argument("--max-load", type=float, default=1.5, help="wait for the 1-minute load average below this")
    parser.add_argument("--max-wait", type=float, default=1800.0, help="seconds to wait for the load (then run anyway)")
    parser.add_argument("--write", dest="write", action="store_true", default=None, help="update BENCHMARKS.md")
    parser.add_argument("--no-write", dest="write", action="store_false", help="leave BENCHMARKS.md alone")
    parser.add_argument(
        "--onboard-nodes",
        type=int,
        default=None,
        help="nodes to onboard in the onboarding case (default 2,000; the smoke test runs a few)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the bench database and work folder afterwards")
    args = parser.parse_args(argv)
    try:
        args.sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--sizes must be whole numbers separated by commas, not {args.sizes!r}")
    if not args.sizes or min(args.sizes) < 10 or max(args.sizes) > 50000:
        parser.error("--sizes must hold fleet sizes between 10 and 50,000")
    if args.write is None:
        args.write = not args.quick
    return args


def load_wait(*, threshold: float, max_wait: float) -> float:
    """The 1-minute load average once it is below threshold, or when max_wait has passed."""
    deadline = time.monotonic() + max_wait
    load = os.getloadavg()[0]
    while load >= threshold and time.monotonic() < deadline:
        log(f"load average {load:.2f} ≥ {threshold}: waiting for other work to finish")
        time.sleep(min(30.0, max(deadline - time.monotonic(), 0.1)))
        load = os.getloadavg()[0]
    return round(load, 2)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    repeat, e2e_requests, pure_seconds, clicks = (5, 50, 0.5, 3) if args.quick else (15, 300, 2.0, 10)
    threshold = args.max_load if not args.quick else float("inf")
    load_before = (
        load_wait(threshold=threshold, max_wait=args.max_wait) if not args.quick else round(os.getloadavg()[0], 2)
    )
    LOAD_SAMPLES.clear()  # the waiting is not the run

    work_dir = Path(tempfile.mkdtemp(prefix="slicedash-bench-"))
    try:
        env = bench_env(work_dir)
    except BenchSetupError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    log(f"database {env.database_name}, broker {env.broker_url}, work folder {work_dir}")
    database_recreate(env)
    workers = []
    try:
        django_setup(env)
        figures = measure(
            args, env, workers, repeat=repeat, e2e_requests=e2e_requests, pure_seconds=pure_seconds, clicks=clicks
        )
    finally:
        for worker in workers:
            worker.stop()
        if not args.keep:
            database_drop(env)
            shutil.rmtree(work_dir, ignore_errors=True)

    from bench.report import benchmarks_write, results_markdown, targets

    figures["load"] = {
        "before": load_before,
        "after": round(os.getloadavg()[0], 2),
        "threshold": None if args.quick else args.max_load,
        "during": [load for _phase, load in LOAD_SAMPLES],
    }
    figures["duration_s"] = round(time.perf_counter() - started, 1)
    figures["finished_at"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    figures["command"] = (
        "make bench"
        if argv is None and len(sys.argv) == 1
        else "bench/run.py " + " ".join(sys.argv[1:] if argv is None else argv)
    )
    figures["targets"] = targets(figures)
    output = json.dumps(figures, indent=2)
    print(output)
    if args.write:
        benchmarks_write(REPO / "BENCHMARKS.md", results_markdown({**figures, "json": output}))
        log("BENCHMARKS.md updated")
    return 0


def code_state() -> dict:
    """The commit measured, and the application files that differ from it (others' work in progress)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()

    changed = git("status", "--porcelain", "--", "dashboard", "templates", "static").splitlines()
    return {"commit": git("rev-parse", "--short", "HEAD"), "uncommitted": sorted(line[3:] for line in changed)}


def measure(args, env, workers: list, *, repeat: int, e2e_requests: int, pure_seconds: float, clicks: int) -> dict:
    import redis
    from django.core.management import call_command

    from bench import precheck, seed
    from bench.report import machine_facts
    from sim.grid import SimulatedGrid

    call_command("migrate", verbosity=0)
    # Db 6 is the bench's own: nothing left from an interrupted run may reach its workers.
    redis.Redis.from_url(env.broker_url).flushdb()
    figures: dict = {
        "sizes": args.sizes,
        "quick": args.quick,
        "machine": machine_facts(env.broker_url),
        "code": code_state(),
    }

    largest = max(args.sizes)
    specs = seed.fleet_specs(largest)
    grid = SimulatedGrid(env.simgrid_path)
    log(f"seeding the simulated grid with {largest:,} nodes")
    workloads, figures["seed_simulator"] = seed.simulator_seed(grid, specs)
    log(f"simulator seeded: {figures['seed_simulator']}")

    log("pure precheck")
    figures["precheck"] = {"pure": precheck.precheck_pure(seconds=pure_seconds)}
    figures["seed_database"], figures["pages"], figures["api"], figures["bulk"], figures["floor"] = {}, {}, {}, {}, {}
    bulk_sizes = [s for s in args.sizes if s >= BULK_MIN_SIZE] or [largest]

    def reseed(size: int) -> dict:
        return seed.database_seed(specs[:size], workloads)

    for size in args.sizes:
        log(f"{size:,} nodes: seeding the database")
        figures["seed_database"][str(size)] = reseed(size)
        size_pages_measure(figures, env, size=size, repeat=repeat)
        if size == largest:
            figures["precheck"] |= precheck_http_measure(env, size=size, requests=e2e_requests)
        if size in bulk_sizes:
            size_bulk_measure(figures, env, workers, size=size, repeat=repeat, grid=grid, reseed=reseed)

    jobs_measure(figures, args, env, workers, specs=specs, clicks=clicks, reseed=reseed)
    return figures


def size_pages_measure(figures: dict, env, *, size: int, repeat: int) -> None:
    """The pages and the API at one fleet size, in the order that keeps each figure clean."""
    from bench import api, pages

    node_id = 20 * max(1, size // 40)  # a node with a deployed VM and failed deploys
    log(f"{size:,} nodes: pages")
    figures["pages"][str(size)] = pages.pages_measure(size=size, node_id=node_id, repeat=repeat, baselines=True)
    # Before the policy edits, which leave every node row rewritten four times (dead tuples).
    log(f"{size:,} nodes: the API's nodes page and a /metrics scrape, with bearer tokens")
    figures["api"][str(size)] = api.api_measure(size=size, repeat=repeat, metrics_token=env.metrics_token)
    log(f"{size:,} nodes: {figures['api'][str(size)]}")
    figures["pages"][str(size)]["policy_edit"] = pages.policy_edit_measure()
    # Last of the pages: each cold read leaves a dead version of every node row.
    figures["pages"][str(size)]["fleet_map_cold"] = pages.map_cold_figures(repeat=max(3, repeat // 3))
    log(f"{size:,} nodes: {figures['pages'][str(size)]}")


def precheck_http_measure(env, *, size: int, requests: int) -> dict:
    """Precheck end to end over HTTP (Nagle's algorithm on, then off as served now), and through the API."""
    from bench import api, precheck

    found = {}
    log(f"{size:,} nodes: end-to-end precheck over HTTP")
    for key, nodelay in (("end_to_end", False), ("end_to_end_nodelay", True)):
        found[key] = precheck.precheck_end_to_end(
            env=env, node_ids=list(range(1, min(size, 400) + 1)), requests=requests, nodelay=nodelay
        )
        found[key]["nodes"] = size
    log(f"{size:,} nodes: precheck through the API with a precheck token")
    found["api"] = {
        **api.precheck_api_measure(node_ids=list(range(1, min(size, 400) + 1)), requests=requests),
        "fleet": size,
    }
    log(f"{size:,} nodes: {found['api']}")
    return found


def size_bulk_measure(figures: dict, env, workers: list, *, size: int, repeat: int, grid, reseed) -> None:
    """The bulk re-register with a real worker, its job page as a person opens it, then the raw SQL floor."""
    from bench import bulk, pages
    from bench.procs import Worker

    worker = Worker(env, f"bulk-{size}")
    workers.append(worker)
    worker.start()
    log(f"{size:,} nodes: bulk re-register with a real worker (pid {worker.pid})")
    figures["bulk"][str(size)] = bulk.bulk_measure(size=size, worker=worker, timeout=BULK_TIMEOUT_S)
    worker.stop()
    # The finished bulk job as a person opens it, and the jobs list that holds it.
    client = pages.admin_client()
    job_id = figures["bulk"][str(size)].pop("job_id")
    figures["bulk"][str(size)]["job_page"] = pages.page_figures(
        client, f"/jobs/{job_id}/", repeat=max(3, repeat // 3), expect=b'data-job-state="succeeded"'
    )
    figures["bulk"][str(size)]["jobs_list"] = pages.page_figures(client, "/jobs/", repeat=max(3, repeat // 3))
    log(f"{size:,} nodes: bulk {figures['bulk'][str(size)]}")
    reseed(size)
    figures["floor"][str(size)] = bulk.floor_measure(grid=grid)
    log(f"{size:,} nodes: SQL floor {figures['floor'][str(size)]}")


def jobs_measure(figures: dict, args, env, workers: list, *, specs: list, clicks: int, reseed) -> None:
    """The jobs at the largest size: click to result, the fleet watch, then onboarding (last)."""
    from bench import bulk, onboard, watch
    from bench.procs import Worker

    largest = max(args.sizes)
    log(f"click to result at {largest:,} nodes")
    reseed(largest)
    worker = Worker(env, "clicks")
    workers.append(worker)
    worker.start()
    up = [s.node_id for s in specs[largest // 2 :] if s.status == "up"][:clicks]
    figures["click_to_result"] = {"nodes": largest, **bulk.clicks_measure(node_ids=up, worker=worker)}
    worker.stop()

    # The fleet watch over the whole seeded fleet, from the simulator's HTTP face 100 ms away.
    log(f"fleet watch of {largest:,} nodes from a loopback Grid Proxy, {watch.LATENCY_MS} ms a request, one worker")
    reseed(largest)
    figures["watch"] = watch.watch_measure(env, workers, log=log)
    log(f"watch: {figures['watch']}")

    # Last, so its 2,000 extra nodes touch no other figure.
    log(
        f"onboarding {args.onboard_nodes or onboard.NODES:,} nodes in {len(onboard.FARMS)} farms from a loopback Grid Proxy, "
        f"{onboard.LATENCY_MS} ms a request, one worker"
    )
    onboard_nodes = args.onboard_nodes or onboard.NODES
    figures["onboard"] = onboard.onboard_measure(env, workers, nodes=onboard_nodes, log=log)
    log(f"onboard: {figures['onboard']}")
    # The same nodes from the command line, beside the worker's first run (every node new in both).
    figures["onboard_cli"] = onboard.onboard_cli_measure(
        env, worker_wall_s=figures["onboard"]["wall_s"], nodes=onboard_nodes, log=log
    )
    log(f"onboard from the command line: {figures['onboard_cli']}")
    # The same 2,000 nodes, every catalog made stale, re-registered in one bulk job reading pages.
    figures["bulk_pages"] = onboard.bulk_pages_measure(env, workers, nodes=onboard_nodes, log=log)
    log(f"bulk by pages: {figures['bulk_pages']}")


if __name__ == "__main__":
    sys.exit(main())
