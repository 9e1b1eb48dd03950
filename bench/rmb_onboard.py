"""Onboarding 2,000 nodes in 4 farms with every node answering its pools over RMB after 100 ms (issue 33).

    .venv/bin/python bench/rmb_onboard.py [--nodes 2000] [--rate 20] [--delay 0.1]

The world of `make bench`'s onboarding case (bench/onboard.py: the simulator's HTTP face as the Grid
Proxy, 100 ms a request, one real worker) plus the stand-in rmb-peer (`manage.py simgrid rmb-peer
--delay 0.1`) in a process of its own, over Redis db 6, and the worker with RMB_REDIS_URL set. Every
up node is asked its pools before its page is registered, paced by the RMB budget: the floor is the
up nodes over the budget background work may use (RMB_RATE_LIMIT - RMB_RATE_RESERVE a second), and
the run should take at most twice the floor plus the proxy's own floor (the pages' reads). Prints one
JSON object: the wall time, the floor, how many nodes' pools were heard, the worker's memory before
and after. Its own database (slicedash_bench), dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.env import bench_env, database_drop, database_recreate, django_setup  # noqa: E402

RESERVE = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/rmb_onboard.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--rate", type=int, default=20, help="RMB_RATE_LIMIT for the run")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds each node takes to answer")
    args = parser.parse_args(argv)
    work_dir = Path(tempfile.mkdtemp(prefix="slicedash-rmb-bench-"))
    env = bench_env(work_dir)
    database_recreate(env)
    peer = None
    try:
        django_setup(env)
        import redis
        from django.core.management import call_command

        from bench import onboard
        from bench.procs import SimulatorServer
        from dashboard.models import Job

        call_command("migrate", verbosity=0)
        redis.Redis.from_url(env.broker_url).flushdb()
        path = work_dir / "onboard-simgrid.sqlite3"
        onboard.grid_seed(path, nodes=args.nodes)
        server = SimulatorServer(env, path=path, latency_ms=onboard.LATENCY_MS, nodelay=True)
        url = server.start()
        peer = rmb_peer_start(env, path=path, delay=args.delay)
        peer.stdout.readline()  # its first line: it listens
        run = onboard_run(env, args, grid_proxy_url=url, onboard=onboard)
        server.stop()
        if run.job.state != Job.State.SUCCEEDED:
            raise RuntimeError(f"the onboarding job failed: {run.job.error}")
        print(json.dumps(onboard_figures(args, run, onboard=onboard), indent=2))
        return 0
    finally:
        if peer is not None:
            peer.terminate()
            peer.wait(10)
        database_drop(env)
        shutil.rmtree(work_dir, ignore_errors=True)


def rmb_peer_start(env, *, path: Path, delay: float) -> subprocess.Popen:
    """The stand-in rmb-peer in a process of its own (its first line says when it listens)."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "simgrid", "rmb-peer", "--redis", env.broker_url, "--delay", str(delay)],
        cwd=REPO,
        env={**env.child_env(), "SIMGRID_PATH": str(path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@dataclass
class OnboardRun:
    job: object  # the finished Job
    wall_s: float
    memory_before: dict
    memory_after: dict


def onboard_run(env, args, *, grid_proxy_url: str, onboard) -> OnboardRun:
    """One onboarding job on a real worker that asks every up node its pools over RMB, timed (the
    caller judges its outcome once the proxy has stopped)."""
    from bench.bulk import job_wait
    from bench.procs import Worker

    rmb_env = {
        "GRID_BACKEND": "gridproxy",
        "GRID_PROXY_URL": grid_proxy_url,
        "RMB_REDIS_URL": env.broker_url,
        "RMB_RATE_LIMIT": str(args.rate),
        "RMB_RATE_RESERVE": str(RESERVE),
        "RMB_MAX_IN_FLIGHT": "50",
    }
    worker = Worker(env, "rmb-onboard", extra_env=rmb_env)
    worker.start()
    before = worker.memory()
    started = time.perf_counter()
    requested = job_request_onboard(onboard, args.nodes)
    job = job_wait(requested.job.pk, worker=worker, timeout=3600)
    wall = time.perf_counter() - started
    after = worker.memory()
    worker.stop()
    return OnboardRun(job=job, wall_s=wall, memory_before=before, memory_after=after)


def onboard_figures(args, run: OnboardRun, *, onboard) -> dict:
    """The run against its floor: the up nodes over the background RMB budget, plus the proxy's pages."""
    from dashboard.models import Node

    nodes = Node.objects.filter(farm_id__in=onboard.FARMS)
    up = nodes.filter(status="up").count()
    heard = nodes.filter(pools_source="rmb").count()
    allowed = args.rate - RESERVE
    rmb_floor = up / allowed
    proxy_floor = -(-args.nodes // 100) * onboard.LATENCY_MS / 1000
    wall = run.wall_s
    return {
        "nodes": args.nodes,
        "up": up,
        "pools_heard": heard,
        "registered": run.job.result["registered"],
        "rmb_rate_limit": args.rate,
        "background_rate": allowed,
        "answer_delay_s": args.delay,
        "wall_s": round(wall, 1),
        "rmb_floor_s": round(rmb_floor, 1),
        "proxy_floor_s": round(proxy_floor, 1),
        "target_s": round(2 * rmb_floor + proxy_floor, 1),
        "met": wall <= 2 * rmb_floor + proxy_floor and heard == up,
        "worker_memory_mib": {"before": run.memory_before, "after": run.memory_after},
    }


def job_request_onboard(onboard, nodes: int):
    from dashboard.jobs.services.jobs import job_request
    from dashboard.models import Job

    return job_request(
        kind=Job.Kind.ONBOARD,
        source=Job.Source.COMMAND,
        parameters={
            "farm_ids": list(onboard.FARMS),
            "node_ids": [],
            "status": None,
            "policy": None,
            "max_new_nodes": nodes,
        },
    )


if __name__ == "__main__":
    sys.exit(main())
