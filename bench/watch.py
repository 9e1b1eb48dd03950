"""The fleet watch at grid scale: 10,000 registered nodes read again from a Grid Proxy 100 ms away.

The proxy is the simulator's HTTP face (the Grid Proxy's own paths and JSON shapes, `node_ids`
included) in its own process on loopback, adding 100 ms to every answer; one real worker
(`--pool=solo`, so the job runs in its pid) runs the fleet-watch job through the real Grid Proxy
client and the shared request budget. The network floor is the pages times the latency: 10,000
nodes in pages of 100 are 100 requests, 10 s; the target is twice that. Measured with it: the
worker's CPU time per node (from /proc, user + system, during the job) and its peak memory.

Run inside `make bench` (after the other cases, on the seeded fleet), or alone:

    .venv/bin/python -m bench.watch [--nodes 10000] [--onboard]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.bulk import job_wait
from bench.procs import SimulatorServer, Worker

LATENCY_MS = 100
PAGE_SIZE = 100
TARGET_FACTOR = 2  # at most twice the network floor
TIMEOUT_S = 300.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def watch_measure(env, workers: list, *, log=print, runs: int = 2) -> dict:
    """Run the fleet watch `runs` times over every registered node (the bench's seeded fleet) and time it."""
    from dashboard.models import Job, Node
    from dashboard.nodes.services.watch import fleet_watch_request

    nodes = Node.objects.count()
    pages = -(-nodes // PAGE_SIZE)
    floor_s = pages * LATENCY_MS / 1000
    server = SimulatorServer(env, latency_ms=LATENCY_MS, nodelay=True)
    url = server.start()
    try:
        worker = Worker(
            env,
            "watch",
            extra_env={"GRID_BACKEND": "gridproxy", "GRID_PROXY_URL": url, "GRID_PAGE_SIZE": str(PAGE_SIZE)},
        )
        workers.append(worker)
        worker.start()
        before = worker.memory()
        measured = []
        for run in range(1, runs + 1):
            log(f"fleet watch of {nodes:,} nodes, {LATENCY_MS} ms a request: run {run}")
            cpu_before = cpu_seconds(worker.pid)
            started = time.perf_counter()
            job = fleet_watch_request(source=Job.Source.COMMAND)
            job = job_wait(job.pk, worker=worker, timeout=TIMEOUT_S)
            wall = time.perf_counter() - started
            cpu = cpu_seconds(worker.pid) - cpu_before
            if job.state != Job.State.SUCCEEDED:
                raise RuntimeError(f"the watch job failed: {job.error}")
            result = job.result
            measured.append(
                {
                    "run": run,
                    "wall_s": round(wall, 2),
                    "worker_s": round((job.finished_at - job.started_at).total_seconds(), 2),
                    "cpu_s": round(cpu, 2),
                    "cpu_ms_per_node": round(cpu * 1000 / max(nodes, 1), 3),
                    "read": result["read"],
                    "missed": result["missed_total"],
                    "pages": result["pages"],
                    "requests": result["requests"],
                    "events": result["events"],
                }
            )
        after = worker.memory()
        worker.stop()
    finally:
        server.stop()
    best = min(measured, key=lambda r: r["wall_s"])
    return {
        "nodes": nodes,
        "latency_ms": LATENCY_MS,
        "page_size": PAGE_SIZE,
        "floor_s": floor_s,
        "target_s": TARGET_FACTOR * floor_s,
        "runs": measured,
        "wall_s": best["wall_s"],
        "cpu_ms_per_node": best["cpu_ms_per_node"],
        "met": all(r["wall_s"] <= TARGET_FACTOR * floor_s for r in measured),
        "worker_memory_mib": {"before": before, "after": after, "peak_rss_mib": after["peak_rss_mib"]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000, help="registered nodes to watch (default 10,000)")
    parser.add_argument("--runs", type=int, default=2, help="watch runs (default 2)")
    parser.add_argument(
        "--onboard", action="store_true", help="also onboard 2,000 nodes in 4 farms (bench/onboard.py), after the watch"
    )
    args = parser.parse_args(argv)

    from bench.env import BenchSetupError, bench_env, database_drop, database_recreate, django_setup

    work_dir = Path(tempfile.mkdtemp(prefix="slicedash-bench-watch-"))
    try:
        env = bench_env(work_dir)
    except BenchSetupError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    database_recreate(env)
    workers: list = []
    try:
        django_setup(env)
        import redis
        from django.core.management import call_command

        from bench import seed
        from sim.grid import SimulatedGrid

        call_command("migrate", verbosity=0)
        redis.Redis.from_url(env.broker_url).flushdb()
        specs = seed.fleet_specs(args.nodes)
        workloads, _ = seed.simulator_seed(SimulatedGrid(env.simgrid_path), specs)
        seed.database_seed(specs, workloads)
        say = lambda m: print(m, file=sys.stderr)  # noqa: E731
        figures = {"watch": watch_measure(env, workers, log=say, runs=args.runs)}
        if args.onboard:
            from bench.onboard import onboard_cli_measure, onboard_measure

            figures["onboard"] = onboard_measure(env, workers, log=say)
            figures["onboard_cli"] = onboard_cli_measure(env, worker_wall_s=figures["onboard"]["wall_s"], log=say)
    finally:
        for worker in workers:
            worker.stop()
        database_drop(env)
        shutil.rmtree(work_dir, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
