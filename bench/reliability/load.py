"""50 signed-in clients against the dashboard under gunicorn for 60 s: errors, p50 and p99.

    .venv/bin/python bench/reliability/load.py [--clients 50] [--seconds 60] [--nodes 1000]

Production-like: DEBUG=false, a SECRET_KEY generated for the run, ALLOWED_HOSTS=127.0.0.1,
collected static files served by WhiteNoise, DB_CONN_MAX_AGE=600, gunicorn (gthread) on a
loopback port. SECURE_SSL_REDIRECT=false because the clients speak plain HTTP on loopback where
a TLS proxy would sit in front; the session and CSRF cookies stay Secure, so the clients send
them back by hand (an HTTP client's cookie jar would rightly keep Secure cookies off http://).

The fleet is the bench's (bench/seed.py: legacy carves, deployments, failed deploys, a farm
policy) at --nodes nodes, in the database named by DATABASE_URL (default slicedash_rel, which
is emptied). A real worker runs 40 jobs first so job cards have real results; 10 more stay
queued (what a page polls while waiting for a worker). Then each client logs in through the
login form (a fifth as admins, the rest as support) and, until the time is up, requests with
no think time: the fleet overview (random filters, sorts, pages, half as htmx partials), node
pages, and job progress polling (the htmx partial). Prints one JSON object; exit status 1 if
any request failed (a non-200 answer, a time-out or a refused connection).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

from bench.reliability.kill_loop import (  # noqa: E402
    DEFAULT_DATABASE_URL,
    RedisServer,
    Worker,
    database_ensure,
    die_with_parent,
    free_port,
    wait_until,
)

GUNICORN = BASE_DIR / ".venv" / "bin" / "gunicorn"
SORTS = ["node_id", "-node_id", "farm", "status", "-gap", "-phantom", "-free", "seen"]
REQUEST_TIMEOUT = 30.0


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Browser:
    """One signed-in person: a requests session whose (Secure) cookies are sent back by hand."""

    def __init__(self, base_url: str):
        import requests

        self.base_url = base_url
        self.http = requests.Session()
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, *, htmx: bool = False, data=None, headers: dict | None = None):
        headers = {
            **(headers or {}),
            **({"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())} if self.cookies else {}),
        }
        if htmx:
            headers["HX-Request"] = "true"
        response = self.http.request(
            method, self.base_url + path, headers=headers, data=data, allow_redirects=False, timeout=REQUEST_TIMEOUT
        )
        for cookie in response.cookies:
            self.cookies[cookie.name] = cookie.value
        return response

    def login(self, username: str, password: str) -> None:
        form = self.request("GET", "/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        answer = self.request(
            "POST", "/login/", data={"username": username, "password": password, "csrfmiddlewaretoken": token}
        )
        if answer.status_code != 302 or "sessionid" not in self.cookies:
            raise RuntimeError(f"login of {username} failed: {answer.status_code} {answer.text[:200]}")


def next_request(rng: random.Random, node_ids: list[int], job_ids: list[int]) -> tuple[str, str, bool]:
    """(kind, path, htmx) with the mix: 40% overview, 35% node page, 25% job polling."""
    roll = rng.random()
    if roll < 0.40:
        params = {"sort": rng.choice(SORTS)}
        if rng.random() < 0.3:
            params["status"] = rng.choice(["up", "down", "standby"])
        if rng.random() < 0.3:
            params["stale"] = rng.choice(["yes", "no"])
        if rng.random() < 0.2:
            params["q"] = str(rng.choice(node_ids))[: rng.randint(1, 3)]
        params["page"] = str(rng.randint(1, 5))
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return "overview", f"/?{query}", rng.random() < 0.5
    if roll < 0.75:
        return "node page", f"/nodes/{rng.choice(node_ids)}/", False
    return "job polling", f"/jobs/{rng.choice(job_ids)}/progress/", True


def run_clients(
    *, base_url: str, logins: list[tuple[str, str]], node_ids: list[int], job_ids: list[int], seconds: float, seed: int
) -> dict:
    browsers = []
    login_began = time.monotonic()
    for username, password in logins:
        browser = Browser(base_url)
        browser.login(username, password)
        browsers.append(browser)
    login_s = time.monotonic() - login_began

    samples: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    error_examples: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(browsers) + 1)
    deadline_box: list[float] = []

    def client(n: int, browser: Browser) -> None:
        rng = random.Random(seed * 1000 + n)
        start.wait()
        deadline = deadline_box[0]
        while time.monotonic() < deadline:
            kind, path, htmx = next_request(rng, node_ids, job_ids)
            began = time.perf_counter()
            try:
                response = browser.request("GET", path, htmx=htmx)
                elapsed = time.perf_counter() - began
                ok = response.status_code == 200
                problem = f"{response.status_code} for {path}"
            except Exception as exc:  # time-outs and refused connections are what we count
                elapsed, ok, problem = time.perf_counter() - began, False, f"{type(exc).__name__} for {path}: {exc}"
            with lock:
                samples[kind].append(elapsed)
                if not ok:
                    errors[kind] += 1
                    if len(error_examples) < 10:
                        error_examples.append(problem)

    threads = [threading.Thread(target=client, args=(n, b), daemon=True) for n, b in enumerate(browsers)]
    for t in threads:
        t.start()
    deadline_box.append(time.monotonic() + seconds)
    began = time.monotonic()
    start.wait()
    for t in threads:
        t.join(seconds + REQUEST_TIMEOUT + 10)
    wall = time.monotonic() - began

    def figures(values: list[float], failed: int) -> dict:
        return {
            "requests": len(values),
            "errors": failed,
            "p50_ms": round(percentile(values, 50) * 1000, 1),
            "p99_ms": round(percentile(values, 99) * 1000, 1),
            "max_ms": round(max(values, default=0) * 1000, 1),
        }

    everything = [v for values in samples.values() for v in values]
    return {
        "clients": len(browsers),
        "seconds": round(wall, 1),
        "login_s": round(login_s, 1),
        "total": {**figures(everything, sum(errors.values())), "per_second": round(len(everything) / wall, 1)},
        "by_kind": {kind: figures(values, errors[kind]) for kind, values in sorted(samples.items())},
        "error_examples": error_examples,
    }


def served_env(*, workdir: Path, broker_url: str, **extra: str) -> dict[str, str]:
    """The production-like settings of a load run (this module's docstring), plus `extra`."""
    return {
        **{k: v for k, v in os.environ.items() if k not in ("JOB_TEST_PAUSE", "DJANGO_SETTINGS_MODULE")},
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL),
        "CELERY_BROKER_URL": broker_url,
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "false",
        "DB_CONN_MAX_AGE": "600",
        "GRID_BACKEND": "simulator",
        "SIMGRID_PATH": str(workdir / "simgrid.sqlite3"),
        "VAR_DIR": str(workdir / "var"),
        "STATIC_ROOT": str(workdir / "static"),
        "LOG_LEVEL": "WARNING",
        "CELERY_SKIP_CHECKS": "1",
        "PYTHONPATH": str(BASE_DIR),
        **extra,
    }


def gunicorn_start(*, env: dict, port: int, workers: int, threads: int, log_path: Path):
    """`gunicorn -c gunicorn.conf.py config.wsgi` (gthread) on 127.0.0.1:port, once /login/ answers 200.

    Returns (the process, its open log file); it dies with this process (PR_SET_PDEATHSIG).
    """
    import requests

    gunicorn_log = open(log_path, "w")
    gunicorn = subprocess.Popen(
        [
            str(GUNICORN),
            "-c",
            "gunicorn.conf.py",
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--worker-class",
            "gthread",
            "--threads",
            str(threads),
            "--timeout",
            "30",
            "--graceful-timeout",
            "10",
        ],
        cwd=BASE_DIR,
        env=env,
        stdout=gunicorn_log,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent,
    )

    def up() -> bool:
        if gunicorn.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {gunicorn.returncode}; see {log_path}")
        try:
            return requests.get(f"http://127.0.0.1:{port}/login/", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_until(up, timeout=60, what="gunicorn", every=0.2)
    except BaseException:
        gunicorn_stop(gunicorn)
        raise
    return gunicorn, gunicorn_log


def gunicorn_stop(gunicorn: subprocess.Popen | None) -> None:
    """SIGTERM (graceful), then SIGKILL after 20 s; by its own pid."""
    if gunicorn is not None and gunicorn.poll() is None:
        gunicorn.terminate()
        try:
            gunicorn.wait(20)
        except subprocess.TimeoutExpired:
            gunicorn.kill()
            gunicorn.wait(10)


def django_served(env: dict) -> None:
    """Set Django up in this process on the run's settings, creating its database if it has none yet."""
    os.environ.update(env)
    database_ensure(env["DATABASE_URL"])
    import django

    django.setup()


def fleet_seed(*, nodes: int, simgrid_path: str) -> None:
    """Migrate, collect the static files gunicorn serves, seed the bench's fleet (bench/seed.py) on the
    simulated grid and in the database, and give the groups their roles if they have none."""
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    from bench.seed import database_seed, fleet_specs, simulator_seed
    from sim.grid import SimulatedGrid

    call_command("migrate", verbosity=0, interactive=False)
    call_command("collectstatic", verbosity=0, interactive=False)
    specs = fleet_specs(nodes)
    workloads, _ = simulator_seed(SimulatedGrid(simgrid_path), specs)
    database_seed(specs, workloads)
    if not Group.objects.filter(name="admins").exists():
        from django.apps import apps

        from dashboard.access.roles import roles_restore

        roles_restore(apps)


def logins_create(clients: int) -> list[tuple[str, str]]:
    """(username, password) per client: a fifth (at least one) sign in as admins, the rest as support."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    users = get_user_model()
    users.objects.filter(username__startswith="load-").delete()
    logins = []
    for role, count in (
        ("admins", max(1, clients // 5)),
        ("support", clients - max(1, clients // 5)),
    ):
        password = secrets.token_urlsafe(16)
        user = users.objects.create_user(f"load-{role}", password=password)
        user.groups.add(Group.objects.get(name=role))
        logins += [(user.username, password)] * count
    return logins


def jobs_to_poll(worker: Worker, rng: random.Random) -> tuple[list[int], dict[str, int]]:
    """40 jobs run by a real worker (so job cards have real results), then 10 left queued (what a page
    polls while waiting for a worker); returns their ids and how many are in each state."""
    from django.db.models import Count

    from dashboard.jobs.services.jobs import job_request
    from dashboard.models import Job, Node

    worker.start()
    done = [
        job_request(kind=rng.choice([Job.Kind.REREGISTER, Job.Kind.PRECHECK]), node=node, source="command").job.pk
        for node in Node.objects.order_by("?")[:40]
    ]
    wait_until(
        lambda: not Job.objects.filter(pk__in=done, state__in=Job.ACTIVE_STATES).exists(),
        timeout=300,
        what="the 40 jobs",
        every=0.5,
    )
    worker.stop()
    busy = set(Job.objects.filter(state__in=Job.ACTIVE_STATES).values_list("node_id", flat=True))
    waiting = [
        job_request(kind=Job.Kind.PRECHECK, node=node, source="command").job.pk
        for node in Node.objects.exclude(pk__in=busy).order_by("?")[:10]
    ]
    job_ids = done + waiting
    job_states = dict(
        Job.objects.filter(pk__in=job_ids).order_by().values("state").annotate(n=Count("pk")).values_list("state", "n")
    )
    return job_ids, job_states


def server_tracebacks(gunicorn_log, path: Path) -> tuple[str, int]:
    """gunicorn's log so far and the tracebacks in it (each one a request that raised)."""
    gunicorn_log.flush()
    server_log = path.read_text()
    return server_log, server_log.count("Traceback")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=3, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker")
    parser.add_argument("--baseline-seconds", type=float, default=10.0, help="one client alone, before the load")
    parser.add_argument("--seed", type=int, default=1774)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="slicedash-load-"))
    redis_server = RedisServer(workdir)
    redis_server.start()
    port = free_port()
    env = served_env(workdir=workdir, broker_url=redis_server.url)
    django_served(env)
    from dashboard.models import Node

    gunicorn = None
    worker = Worker(env=env, logdir=workdir, name="load")
    rng = random.Random(args.seed)
    try:
        log("migrating, collecting static files, seeding the fleet")
        fleet_seed(nodes=args.nodes, simgrid_path=env["SIMGRID_PATH"])
        logins = logins_create(args.clients)
        node_ids = list(Node.objects.values_list("grid_id", flat=True))
        log("running 40 jobs with a real worker so the job cards have real results")
        job_ids, job_states = jobs_to_poll(worker, rng)
        from django.db import connections

        connections.close_all()

        log(f"starting gunicorn ({args.workers} workers x {args.threads} threads) on 127.0.0.1:{port}")
        gunicorn, gunicorn_log = gunicorn_start(
            env=env, port=port, workers=args.workers, threads=args.threads, log_path=workdir / "gunicorn.log"
        )
        clients = {"base_url": f"http://127.0.0.1:{port}", "node_ids": node_ids, "job_ids": job_ids}
        # One client alone first: what a request costs when nobody waits in line, to read the 50-client
        # figures against (with no think time, 50 clients on 2 cores mostly measure the queue).
        log(f"1 client alone for {args.baseline_seconds:g} s")
        baseline = run_clients(**clients, logins=logins[:1], seconds=args.baseline_seconds, seed=args.seed + 1)
        load_before = os.getloadavg()
        log(f"{len(logins)} clients log in, then {args.seconds:g} s of requests")
        figures = run_clients(**clients, logins=logins, seconds=args.seconds, seed=args.seed)
        server_log, server_errors = server_tracebacks(gunicorn_log, workdir / "gunicorn.log")
    finally:
        gunicorn_stop(gunicorn)
        worker.stop()
        redis_server.stop()
    report = {
        "database": env["DATABASE_URL"].rsplit("/", 1)[-1],
        "nodes": args.nodes,
        "gunicorn": {"workers": args.workers, "worker_class": "gthread", "threads": args.threads},
        "settings": {"DEBUG": False, "DB_CONN_MAX_AGE": 600, "SECURE_SSL_REDIRECT": False},
        "jobs_polled": job_states,
        "one_client_alone": {k: baseline[k] for k in ("seconds", "total", "by_kind")},
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        **figures,
        "server_tracebacks": server_errors,
    }
    if report["total"]["errors"] or server_errors:
        report["server_log_tail"] = server_log[-4000:]
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if report["total"]["errors"] or server_errors else 0


def log(message: str) -> None:
    print(f"[load {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
