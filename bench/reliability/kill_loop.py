"""SIGKILL a real Celery worker at random moments during re-registers, then check every invariant.

    .venv/bin/python bench/reliability/kill_loop.py [--kills 100] [--nodes 12] [--seed N]

A seeded fleet on the simulated grid (legacy carves, some slices deployed through the
simulator, some rented), each node with its own policy override. Each round: flip one idle
node's policy (so re-registering it changes every free slice), request its re-register as the
web does (job_request, message on commit), sleep a random fraction of a job's duration, and
SIGKILL either the whole worker (main process and pool child; restarted at once) or only its
pool child (the main process forks a new one). Kills land before the claim, mid-job, inside the
final transaction, or after the end.

After every round, in one consistent read: no rented/deployed slice lost or resized (against the
snapshot taken before the first round) and no half catalog (each node's free slices: one
generation, one size, as many as its recorded policy carves). At the end the worker runs once
more after the visibility timeout (so the killed workers' messages come back) and the reaper
runs until nothing is queued or running; then every job must have ended, succeeded or failed
with a reason. Prints one JSON object with the counts. Exit status 1 when an invariant broke.

The run is self-contained: its own redis-server on a free loopback port (stopped at the end),
its own simulated grid file, the database named by DATABASE_URL (default slicedash_rel, which
it flushes: never point it at a database you care about).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

BASE_DIR = Path(__file__).resolve().parents[2]
CELERY = BASE_DIR / ".venv" / "bin" / "celery"
GiB = 1024**3
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/slicedash_rel"
# Production defaults are 120 s (heartbeat) and 3600 s (visibility); the loop shortens both to the
# settings' minimums so that it ends in minutes. The logic is the same.
HEARTBEAT_TIMEOUT = 5
VISIBILITY_TIMEOUT = 60


# --- processes -------------------------------------------------------------------------------


def database_ensure(url: str) -> None:
    """Create the run's PostgreSQL database if it does not exist yet (a fresh machine has none)."""
    from urllib.parse import urlsplit

    import psycopg
    from psycopg import sql

    name = urlsplit(url).path.lstrip("/")
    maintenance = urlsplit(url)._replace(scheme="postgresql", path="/postgres").geturl()
    with psycopg.connect(maintenance, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def wait_until(condition, *, timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def die_with_parent() -> None:
    """Runs in a child between fork and exec: SIGTERM it when this process dies (PR_SET_PDEATHSIG),
    so a crashed or interrupted run leaves no worker, server or redis-server behind."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """Our own redis-server on a loopback port (never the machine's shared one)."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )

        def answers() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    return s.recv(16).startswith(b"+PONG")
            except OSError:
                return False

        wait_until(answers, timeout=10, what="redis-server")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Worker:
    """`celery -A config worker` (prefork, one child) in its own session, so it can be killed whole."""

    def __init__(self, *, env: dict, logdir: Path, name: str = "killloop"):
        self.env = env
        self.logdir = logdir
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log = None

    def start(self, *, timeout: float = 120) -> float:
        began = time.monotonic()
        path = self.logdir / f"worker-{self.starts}.log"
        self.log = open(path, "w")
        self.proc = subprocess.Popen(
            [
                str(CELERY),
                "-A",
                "config",
                "worker",
                "--pool=prefork",
                "--concurrency=1",
                "--loglevel=INFO",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
                "-n",
                f"{self.name}{self.starts}@%h",
            ],
            cwd=BASE_DIR,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self.starts += 1
        wait_until(
            lambda: " ready." in path.read_text() or self.proc.poll() is not None,
            timeout=timeout,
            what="the worker to be ready",
            every=0.1,
        )
        if self.proc.poll() is not None:
            raise RuntimeError(f"the worker exited at start-up:\n{path.read_text()[-3000:]}")
        return time.monotonic() - began

    def children(self) -> list[int]:
        try:
            return [int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()]
        except (FileNotFoundError, ValueError):
            return []

    def kill(self, mode: str) -> None:
        """mode "worker": SIGKILL the main process and its child; "child": only the pool child."""
        if mode == "child" and self.children():
            for pid in self.children():
                os.kill(pid, signal.SIGKILL)
            return
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.log.close()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.log:
            self.log.close()


class SlowGrid:
    """The simulated grid answering after `delay` seconds, as the public Grid Proxy takes a while.

    Served over HTTP (sim.grid) so the worker reads it with the real GridProxyClient;
    the delay spreads a re-register over time, so random kills land in every step of it.
    """

    def __init__(self, grid, delay: float):
        self._grid = grid
        self.delay = delay

    def __getattr__(self, name):
        value = getattr(self._grid, name)
        if name not in ("node", "nodes", "statistics"):
            return value

        def slow(*args, **kwargs):
            time.sleep(self.delay)
            return value(*args, **kwargs)

        return slow


def serve_slow_grid(grid, delay: float):
    """(server, url): the simulator behind a loopback Grid Proxy that takes `delay` s per answer."""
    import threading

    from sim.grid import serve_simulator

    server = serve_simulator(SlowGrid(grid, delay))
    # A killed worker leaves its request half-read; that is the point here, not an error to print.
    server.handle_error = lambda request, client_address: None
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


# --- the fleet and its policies (Django set up from here on) ---------------------------------


def seed_fleet(*, grid, nodes: int, rng: random.Random, first_node_id: int = 5000) -> dict:
    """Register `nodes` nodes with the legacy carve, each with its own policy override (the zos profile).

    Every third node gets slice 0 deployed through the simulator (a real VM); every other node
    gets slice 1 rented. Returns {(policy name, version): capacity.Policy} for the half-catalog check.
    """
    from dashboard import capacity
    from dashboard.deployments.services.deploy import slice_deploy
    from dashboard.models import Policy, Slice
    from dashboard.nodes.services.registration import node_register
    from dashboard.policies.services.policy import policy_create

    policies = {("legacy", 1): capacity.PROFILES["legacy"]}
    for n in range(nodes):
        node_id = first_node_id + n
        mru = rng.choice([16, 24, 31, 32, 48, 64]) * GiB
        sru = rng.choice([465, 500, 931, 1000, 1863]) * GiB
        live = grid.add_node(node_id, cru=rng.choice([4, 8, 16]), mru=mru, sru=sru, farm_id=1 + n % 3)
        # One SSD, and said so (as its pool report would): the loop kills workers, it does not test the
        # prudent carve of a node whose pools nobody reported.
        node = node_register(
            node_id=node_id,
            total=live.total,
            farm_id=live.farm_id,
            status="up",
            used=live.used,
            policy_name="legacy",
            pools=(live.total.sru,),
        )
        if n % 3 == 0:
            deployment = slice_deploy(node=node, slice_index=0, grid=grid, source="command")
            assert deployment.state == "deployed", deployment.raw_error
        if n % 2 == 0:
            Slice.objects.filter(node=node, index=1).update(state=Slice.State.RENTED, rented_by_twin_id=70000 + node_id)
        row = policy_create(
            name=f"kill-{node_id}",
            scope=Policy.Scope.NODE,
            node=node,
            parameters=Policy.parameters_from(capacity.PROFILES["zos"]),
            source="command",
        )
        policies[(row.name, row.version)] = row.to_capacity()
    return policies


def flip_policy(node, policies: dict) -> None:
    """Toggle the node's override between 4 GiB and 2 GiB slices (a new version): every free slice changes."""
    from dashboard.models import Policy
    from dashboard.policies.services.policy import policy_update

    row = Policy.objects.get(node=node)
    slice_mru = 2 * GiB if row.slice_mru == 4 * GiB else 4 * GiB
    row, _ = policy_update(policy=row, parameters={"slice_mru": slice_mru}, source="command")
    policies[(row.name, row.version)] = row.to_capacity()


# --- the loop ------------------------------------------------------------------------------


def idle_nodes(nodes: list) -> list:
    from dashboard.models import Job

    busy = set(Job.objects.filter(state__in=Job.ACTIVE_STATES, node__isnull=False).values_list("node_id", flat=True))
    return [node for node in nodes if node.pk not in busy]


@dataclass
class KillWindows:
    """How long one re-register takes on this machine now, from the click and from the claim (the
    warm-up jobs' times): the kills are spread over 1.3 × the median of each."""

    click_to_end_s: list[float]
    claim_to_end_s: list[float]

    @property
    def from_click(self) -> float:
        return 1.3 * sorted(self.click_to_end_s)[len(self.click_to_end_s) // 2]

    @property
    def from_claim(self) -> float:
        return 1.3 * sorted(self.claim_to_end_s)[len(self.claim_to_end_s) // 2]


def kill_windows_measure(nodes: list, rng: random.Random, policies: dict) -> KillWindows:
    """Three warm-up re-registers on random nodes, timed from the click and from the claim."""
    from dashboard.jobs.services.jobs import job_request
    from dashboard.models import Job

    durations, runs = [], []
    for node in rng.sample(nodes, 3):
        flip_policy(node, policies)
        job = job_request(kind=Job.Kind.REREGISTER, node=node, source="command").job
        began = time.monotonic()
        wait_until(lambda job=job: not Job.objects.get(pk=job.pk).is_active, timeout=60, what="a warm-up job")
        durations.append(time.monotonic() - began)
        job.refresh_from_db()
        runs.append((job.finished_at - job.started_at).total_seconds())
    return KillWindows(click_to_end_s=durations, claim_to_end_s=runs)


def idle_node_wait(nodes: list) -> list:
    """The nodes with no active job, waiting for one when every node's job is waiting for its message
    to come back or for the reaper."""
    from dashboard.jobs.services.job_reaper import jobs_reap

    jobs_reap()
    idle = idle_nodes(nodes)
    if not idle:
        wait_until(
            lambda: jobs_reap() >= 0 and bool(idle_nodes(nodes)),
            timeout=VISIBILITY_TIMEOUT + 60,
            what="a node with no active job",
            every=0.5,
        )
        idle = idle_nodes(nodes)
    return idle


@dataclass
class KillAim:
    """Where a round's kill lands: whole worker or pool child, and how long after the click or the claim."""

    mode: str
    anchor: str
    delay: float


def kill_aim(rng: random.Random, windows: KillWindows, grid_delay: float) -> KillAim:
    mode = rng.choice(["worker", "child"])
    # A quarter of the kills are timed from the click (they land in the queue as often as in the
    # job); the rest from the moment the worker claims the job, half of those past the grid read.
    anchor = rng.choice(["click", "claim", "claim", "claim"])
    delay = rng.uniform(0, windows.from_click if anchor == "click" else windows.from_claim)
    if anchor == "claim" and grid_delay and rng.random() < 0.5:
        delay = rng.uniform(grid_delay, max(grid_delay, windows.from_claim))
    return KillAim(mode=mode, anchor=anchor, delay=delay)


def claim_wait(job) -> bool:
    """Wait (30 s at most) for the worker to claim the job; False when it did not."""
    from dashboard.models import Job

    try:
        wait_until(
            lambda job=job: Job.objects.filter(pk=job.pk, state=Job.State.QUEUED).exists() is False,
            timeout=30,
            what="the claim",
            every=0.002,
        )
    except TimeoutError:
        return False
    return True


def catalog_violations(occupied_before, policies: dict) -> list[str]:
    """The invariants that must hold after every kill; the caller reads them in one_moment()."""
    from tests.invariants import figures_violations, half_catalog_violations, occupied_slices, occupied_violations

    return (
        occupied_violations(occupied_before, occupied_slices())
        + half_catalog_violations(policies)
        + figures_violations()
    )


class KillRound(NamedTuple):
    row: dict  # the round's line in the report
    violations: list[str]
    whole_kill_at: float | None  # when the whole worker died: its messages wait for the visibility timeout


def kill_round(n: int, *, node, worker: Worker, aim: KillAim, occupied_before, policies: dict) -> KillRound:
    """Request the node's re-register, kill as aimed, restart the worker if it died, check the invariants."""
    from dashboard.jobs.services.jobs import job_request
    from dashboard.models import Job
    from tests.invariants import one_moment

    flip_policy(node, policies)
    anchor = aim.anchor
    job = job_request(kind=Job.Kind.REREGISTER, node=node, source="command").job
    if anchor == "claim" and not claim_wait(job):
        anchor = "claim (not claimed within 30 s)"
    time.sleep(aim.delay)
    worker.kill(aim.mode)
    at_kill = Job.objects.filter(pk=job.pk).values_list("state", "step").get()
    restart = 0.0
    whole_kill_at = None
    if aim.mode == "worker" or worker.proc.poll() is not None:
        whole_kill_at = time.monotonic()
        restart = worker.start()
    with one_moment():
        found = catalog_violations(occupied_before, policies)
    row = {
        "round": n + 1,
        "node": node.grid_id,
        "job": job.pk,
        "mode": aim.mode,
        "anchor": anchor,
        "delay": round(aim.delay, 3),
        "state_at_kill": at_kill[0],
        "step_at_kill": at_kill[1],
        "restart_s": round(restart, 2),
    }
    return KillRound(row=row, violations=found, whole_kill_at=whole_kill_at)


def messages_redeliver(worker: Worker, *, last_whole_kill: float, redeliver, log) -> None:
    """Let the killed workers' messages come back (visibility timeout) to a live worker."""
    if redeliver is None:
        wait_for = max(0.0, VISIBILITY_TIMEOUT + 5 - (time.monotonic() - last_whole_kill))
        log(f"waiting {wait_for:.0f} s for the visibility timeout, then restarting the worker once more")
        time.sleep(wait_for)
        worker.kill("worker")
        worker.start()
    else:
        redeliver()


def jobs_settle(settle_timeout: float) -> list[str]:
    """Reap until no job is queued or running; a timeout is a violation, not a crash."""
    from dashboard.jobs.services.job_reaper import jobs_reap
    from dashboard.models import Job

    def settled() -> bool:
        jobs_reap()
        return not Job.objects.filter(state__in=Job.ACTIVE_STATES).exists()

    try:
        wait_until(settled, timeout=settle_timeout, what="every job to end", every=1.0)
    except TimeoutError as exc:
        return [str(exc)]
    return []


def killed_during(rounds: list[dict]) -> dict:
    """How many kills landed before the claim, in each step of the job, or after its end."""
    counts = Counter()
    for r in rounds:
        if r["state_at_kill"] == "queued":
            counts["before the claim (queued)"] += 1
        elif r["state_at_kill"] == "running":
            counts[f"running: {r['step_at_kill'].split(' ', 1)[0]}"] += 1
        else:
            counts[f"after the end ({r['state_at_kill']})"] += 1
    return dict(sorted(counts.items()))


def kill_loop(
    *,
    worker: Worker,
    kills: int,
    rng: random.Random,
    policies: dict,
    log=print,
    redeliver=None,
    settle_timeout: float = 180,
    grid_delay: float = 0.0,
) -> dict:
    """Run the rounds on the registered nodes with `worker` (started); returns the report.

    At the end the killed workers' unacknowledged messages must come back: by default the loop
    waits for the visibility timeout and restarts the worker (which restores them as it starts);
    `redeliver` (a callable) replaces that wait, for the short version in the suite.
    `grid_delay` (how long the grid takes to answer) lets a share of the kills aim past the read,
    at the carve and the final transaction, which take a few milliseconds each.
    """
    from dashboard.models import Job, Node
    from tests.invariants import (
        half_catalog_violations,
        job_outcomes,
        job_violations,
        occupied_slices,
        one_moment,
    )

    with one_moment():
        occupied_before = occupied_slices()
        problems = half_catalog_violations(policies)
    assert not problems, problems
    nodes = list(Node.objects.order_by("grid_id"))
    windows = kill_windows_measure(nodes, rng, policies)

    rounds = []
    violations: list[str] = []
    last_whole_kill = 0.0
    began = time.monotonic()
    for n in range(kills):
        node = rng.choice(idle_node_wait(nodes))
        aim = kill_aim(rng, windows, grid_delay)
        done = kill_round(n, node=node, worker=worker, aim=aim, occupied_before=occupied_before, policies=policies)
        if done.whole_kill_at is not None:
            last_whole_kill = done.whole_kill_at
        violations += [f"round {n + 1}: {p}" for p in done.violations]
        row = done.row
        rounds.append(row)
        log(
            f"round {n + 1}/{kills}: node {node.grid_id}, killed {aim.mode} {aim.delay:.3f} s after the {row['anchor']} "
            f"(job #{row['job']} {row['state_at_kill']}: {row['step_at_kill']!r}){' VIOLATION' if done.violations else ''}"
        )

    messages_redeliver(worker, last_whole_kill=last_whole_kill, redeliver=redeliver, log=log)
    violations += jobs_settle(settle_timeout)
    with one_moment():
        violations += catalog_violations(occupied_before, policies)
        violations += job_violations()
        outcomes = job_outcomes()

    return {
        "kills": kills,
        "kill_modes": dict(Counter(r["mode"] for r in rounds)),
        "killed_during": killed_during(rounds),
        "kill_window_s": {
            "from the click": round(windows.from_click, 3),
            "from the claim": round(windows.from_claim, 3),
        },
        "warmup_click_to_end_s": [round(d, 3) for d in windows.click_to_end_s],
        "warmup_claim_to_end_s": [round(d, 3) for d in windows.claim_to_end_s],
        "jobs": Job.objects.count(),
        "job_outcomes": outcomes,
        "occupied_slices_checked": len(occupied_before),
        "nodes": len(nodes),
        "worker_starts": worker.starts,
        "loop_s": round(time.monotonic() - began, 1),
        "violations": violations,
        "rounds": rounds,
    }


# --- the command ----------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=12)
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    parser.add_argument(
        "--grid-delay", type=float, default=0.05, help="seconds the loopback Grid Proxy takes per answer"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**32)
    rng = random.Random(seed)

    sys.path.insert(0, str(BASE_DIR))
    workdir = Path(tempfile.mkdtemp(prefix="slicedash-kill-loop-"))
    redis_server = RedisServer(workdir)
    redis_server.start()
    from sim.grid import SimulatedGrid

    grid = SimulatedGrid(workdir / "simgrid.sqlite3")
    server, grid_url = serve_slow_grid(grid, args.grid_delay)
    env = {
        **os.environ,
        "DATABASE_URL": os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL),
        "CELERY_BROKER_URL": redis_server.url,
        # The worker reads the grid through the real Grid Proxy client, over loopback HTTP.
        "GRID_BACKEND": "gridproxy",
        "GRID_PROXY_URL": grid_url,
        "SIMGRID_PATH": str(workdir / "simgrid.sqlite3"),
        "VAR_DIR": str(workdir / "var"),
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "JOB_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
        "CELERY_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
        "CELERY_SKIP_CHECKS": "1",
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    database_ensure(env["DATABASE_URL"])
    import django

    django.setup()
    from django.core.management import call_command

    worker = Worker(env=env, logdir=workdir)
    try:
        call_command("migrate", verbosity=0, interactive=False)
        call_command("flush", verbosity=0, interactive=False)
        policies = seed_fleet(grid=grid, nodes=args.nodes, rng=rng)
        worker.start()
        report = kill_loop(
            worker=worker,
            kills=args.kills,
            rng=rng,
            policies=policies,
            grid_delay=args.grid_delay,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    finally:
        worker.stop()
        redis_server.stop()
        server.shutdown()
        server.server_close()
    report = {
        "seed": seed,
        "grid_delay_s": args.grid_delay,
        "database": env["DATABASE_URL"].rsplit("/", 1)[-1],
        **report,
    }
    summary = {k: v for k, v in report.items() if k != "rounds"}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
