"""50 API clients, each with its own bearer token, against the dashboard under gunicorn for 60 s.

    .venv/bin/python bench/reliability/api_load.py [--clients 50] [--seconds 60] [--nodes 1000]

The server is the load stage's (bench/reliability/load.py: gunicorn -c gunicorn.conf.py, gthread,
DEBUG=false, DB_CONN_MAX_AGE=600, the bench's fleet at --nodes nodes in DATABASE_URL, which is
emptied, on a simulated grid) with API_THROTTLE_RATE raised far above what the clients can send:
the throttle still runs on every call, but a 429 here would be the run's own doing, not an answer
to judge. (A 429 is counted apart from the errors; with the rate as set there should be none.)

Tokens are real, made by access.services.tokens.api_token_create, one per client: four fifths are the
marketplace's (an admin user; scopes read and precheck), one fifth support's (read only). Each
client, with no think time, keeps one HTTP connection and calls:
  marketplace: 15% GET /api/v1/fleet, 35% GET /api/v1/nodes (random filters, sorts, pages of 20,
               50 or 100), 30% GET /api/v1/nodes/{id}, 20% POST /api/v1/nodes/{id}/precheck (an up
               node: a live read of the simulated grid, the verdicts, the node's UPDATE)
  support:     20% fleet, 45% nodes, 35% one node.
An error is any answer other than 2xx or 429, a time-out or a refused connection. One client
alone runs first (--baseline-seconds) for what a call costs when nobody waits in line.
Prints one JSON object; exit status 1 on any error, any 429 or any traceback in gunicorn's log.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

BASE_DIR = Path(__file__).resolve().parents[2]
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

from bench.reliability.kill_loop import RedisServer, free_port  # noqa: E402
from bench.reliability.load import (  # noqa: E402
    django_served,
    fleet_seed,
    gunicorn_start,
    gunicorn_stop,
    percentile,
    served_env,
    server_tracebacks,
)

REQUEST_TIMEOUT = 30.0
THROTTLE_RATE = "1000000/m"
SORTS = ("node_id", "farm", "status", "gap", "phantom", "free", "seen", "deployable", "nominal")


def next_call(
    rng: random.Random, *, precheck: bool, node_ids: list[int], up_ids: list[int], farm_ids: list[int]
) -> tuple[str, str, str]:
    """(kind, method, path) of the next call."""
    roll = rng.random()
    fleet, nodes, node = (0.15, 0.50, 0.80) if precheck else (0.20, 0.65, 1.0)
    if roll < fleet:
        return "fleet", "GET", "/api/v1/fleet"
    if roll < nodes:
        params = {
            "sort": ("-" if rng.random() < 0.5 else "") + rng.choice(SORTS),
            "page": str(rng.randint(1, 5)),
            "per_page": str(rng.choice((20, 50, 100))),
        }
        if rng.random() < 0.2:
            params["farm_id"] = str(rng.choice(farm_ids))
        if rng.random() < 0.3:
            params["status"] = rng.choice(["up", "down", "standby"])
        if rng.random() < 0.3:
            params["stale"] = rng.choice(["true", "false"])
        if rng.random() < 0.2:
            params["has_phantoms"] = rng.choice(["true", "false"])
        if rng.random() < 0.1:
            params["search"] = str(rng.choice(node_ids))[: rng.randint(1, 3)]
        return "nodes", "GET", "/api/v1/nodes?" + "&".join(f"{k}={v}" for k, v in params.items())
    if roll < node:
        return "node", "GET", f"/api/v1/nodes/{rng.choice(node_ids)}"
    return "precheck", "POST", f"/api/v1/nodes/{rng.choice(up_ids)}/precheck"


class Call(NamedTuple):
    """One call's answer as the run counts it: its time, whether it counts as answered, its status
    (or the exception's name), and what to show when it did not."""

    elapsed: float
    ok: bool
    status: str
    problem: str


def api_call(http, *, base_url: str, headers: dict, method: str, path: str) -> Call:
    """One call; a time-out or a refused connection is a failed call, not a crash of the run."""
    began = time.perf_counter()
    try:
        if method == "POST":
            response = http.post(
                base_url + path, headers=headers, json={}, timeout=REQUEST_TIMEOUT, allow_redirects=False
            )
        else:
            response = http.get(base_url + path, headers=headers, timeout=REQUEST_TIMEOUT, allow_redirects=False)
        elapsed = time.perf_counter() - began
        # A 2xx that is not JSON (a login page, an HTML error) is not an API answer.
        ok = 200 <= response.status_code < 300 and response.headers.get("Content-Type", "").startswith(
            "application/json"
        )
        return Call(
            elapsed, ok, str(response.status_code), f"{method} {path}: {response.status_code} {response.text[:200]}"
        )
    except Exception as exc:  # time-outs and refused connections are what we count
        return Call(
            time.perf_counter() - began, False, type(exc).__name__, f"{method} {path}: {type(exc).__name__}: {exc}"
        )


class CallTally:
    """Every client's calls, by kind, added under one lock: times, errors, 429s (counted apart from the
    errors: with the rate as set they would be the run's own doing), statuses, the first ten problems."""

    def __init__(self):
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.throttled: dict[str, int] = defaultdict(int)
        self.statuses: dict[str, int] = defaultdict(int)
        self.error_examples: list[str] = []
        self.lock = threading.Lock()

    def add(self, kind: str, call: Call) -> None:
        with self.lock:
            self.samples[kind].append(call.elapsed)
            self.statuses[call.status] += 1
            if call.status == "429":
                self.throttled[kind] += 1
            elif not call.ok:
                self.errors[kind] += 1
                if len(self.error_examples) < 10:
                    self.error_examples.append(call.problem)

    def figures(self, *, clients: int, wall: float) -> dict:
        def figures(values: list[float], failed: int, refused: int) -> dict:
            return {
                "requests": len(values),
                "errors": failed,
                "throttled_429": refused,
                "p50_ms": round(percentile(values, 50) * 1000, 1),
                "p99_ms": round(percentile(values, 99) * 1000, 1),
                "max_ms": round(max(values, default=0) * 1000, 1),
            }

        everything = [v for values in self.samples.values() for v in values]
        return {
            "clients": clients,
            "seconds": round(wall, 1),
            "total": {
                **figures(everything, sum(self.errors.values()), sum(self.throttled.values())),
                "per_second": round(len(everything) / wall, 1),
            },
            "by_kind": {
                kind: figures(values, self.errors[kind], self.throttled[kind])
                for kind, values in sorted(self.samples.items())
            },
            "statuses": dict(sorted(self.statuses.items())),
            "error_examples": self.error_examples,
        }


def run_clients(
    *,
    base_url: str,
    tokens: list[tuple[str, bool]],
    node_ids: list[int],
    up_ids: list[int],
    farm_ids: list[int],
    seconds: float,
    seed: int,
) -> dict:
    """`tokens`: (secret, may precheck) per client; every client starts at once and stops at the deadline."""
    import requests

    tally = CallTally()
    start = threading.Barrier(len(tokens) + 1)
    deadline_box: list[float] = []

    def client(n: int, secret: str, precheck: bool) -> None:
        rng = random.Random(seed * 1000 + n)
        http = requests.Session()
        headers = {"Authorization": f"Bearer {secret}", "Accept": "application/json"}
        start.wait()
        deadline = deadline_box[0]
        while time.monotonic() < deadline:
            kind, method, path = next_call(rng, precheck=precheck, node_ids=node_ids, up_ids=up_ids, farm_ids=farm_ids)
            tally.add(kind, api_call(http, base_url=base_url, headers=headers, method=method, path=path))
        http.close()

    threads = [
        threading.Thread(target=client, args=(n, secret, pre), daemon=True) for n, (secret, pre) in enumerate(tokens)
    ]
    for t in threads:
        t.start()
    deadline_box.append(time.monotonic() + seconds)
    began = time.monotonic()
    start.wait()
    for t in threads:
        t.join(seconds + REQUEST_TIMEOUT + 10)
    return tally.figures(clients=len(tokens), wall=time.monotonic() - began)


def tokens_create(clients: int) -> list[tuple[str, bool]]:
    """(secret, may precheck) per client: four fifths the marketplace's (an admin; read and precheck),
    one fifth (at least one) support's (read only). Real tokens, made as the API's users get theirs."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from dashboard.access.services.tokens import api_token_create
    from dashboard.models import ApiToken

    users = get_user_model()
    ApiToken.objects.filter(user__username__startswith="apiload-").delete()
    users.objects.filter(username__startswith="apiload-").delete()
    support_clients = max(1, clients // 5)
    tokens: list[tuple[str, bool]] = []
    for role, count, scopes in (
        ("admins", clients - support_clients, ["read", "precheck"]),
        ("support", support_clients, ["read"]),
    ):
        user = users.objects.create_user(f"apiload-{role}", password=None)
        user.groups.add(Group.objects.get(name=role))
        user = users.objects.get(pk=user.pk)  # a fresh object: no cached permissions from before the group
        tokens += [
            (
                api_token_create(user=user, name=f"client-{n}", scopes=scopes, source="command").secret,
                "precheck" in scopes,
            )
            for n in range(count)
        ]
    return tokens


def fleet_ids() -> dict[str, list[int]]:
    """The ids the clients draw from: every node, the up ones (precheck reads the grid), the farms."""
    from dashboard.models import Node

    return {
        "node_ids": list(Node.objects.values_list("grid_id", flat=True)),
        "up_ids": list(Node.objects.filter(status=Node.Status.UP).values_list("grid_id", flat=True)),
        "farm_ids": sorted(set(Node.objects.values_list("farm_id", flat=True))),
    }


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

    workdir = Path(tempfile.mkdtemp(prefix="slicedash-apiload-"))
    redis_server = RedisServer(workdir)
    redis_server.start()
    port = free_port()
    env = served_env(workdir=workdir, broker_url=redis_server.url, API_THROTTLE_RATE=THROTTLE_RATE)
    django_served(env)

    gunicorn = None
    support_clients = max(1, args.clients // 5)
    try:
        log("migrating, collecting static files, seeding the fleet")
        fleet_seed(nodes=args.nodes, simgrid_path=env["SIMGRID_PATH"])
        tokens = tokens_create(args.clients)
        ids = fleet_ids()
        from django.db import connections

        connections.close_all()

        log(f"starting gunicorn ({args.workers} workers x {args.threads} threads) on 127.0.0.1:{port}")
        gunicorn, gunicorn_log = gunicorn_start(
            env=env, port=port, workers=args.workers, threads=args.threads, log_path=workdir / "gunicorn.log"
        )
        base_url = f"http://127.0.0.1:{port}"
        log(f"1 client alone for {args.baseline_seconds:g} s")
        baseline = run_clients(
            base_url=base_url, tokens=tokens[:1], **ids, seconds=args.baseline_seconds, seed=args.seed + 1
        )
        load_before = os.getloadavg()
        log(f"{len(tokens)} API clients, {args.seconds:g} s")
        figures = run_clients(base_url=base_url, tokens=tokens, **ids, seconds=args.seconds, seed=args.seed)
        server_log, server_errors = server_tracebacks(gunicorn_log, workdir / "gunicorn.log")
    finally:
        gunicorn_stop(gunicorn)
        redis_server.stop()
    report = {
        "database": env["DATABASE_URL"].rsplit("/", 1)[-1],
        "nodes": args.nodes,
        "gunicorn": {"workers": args.workers, "worker_class": "gthread", "threads": args.threads},
        "settings": {"DEBUG": False, "DB_CONN_MAX_AGE": 600, "API_THROTTLE_RATE": THROTTLE_RATE},
        "tokens": {"marketplace (read, precheck)": args.clients - support_clients, "support (read)": support_clients},
        "one_client_alone": {k: baseline[k] for k in ("seconds", "total", "by_kind")},
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        **figures,
        "server_tracebacks": server_errors,
    }
    failed = report["total"]["errors"] or report["total"]["throttled_429"] or server_errors
    if failed:
        report["server_log_tail"] = server_log[-4000:]
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def log(message: str) -> None:
    print(f"[api-load {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
