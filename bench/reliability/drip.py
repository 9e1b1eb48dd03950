"""A Grid Proxy that drips its answer one byte a second: the command and a web re-register give up on their budgets.

    .venv/bin/python bench/reliability/drip.py [--rounds 5] [--budget 3] [--step-budget 10]

The proxy is a loopback HTTP server (127.0.0.1 only) that answers every /nodes/<id> with a 200,
its headers at once and then the body (the Grid Proxy's node answer, ~1 KB) one byte every
--drip seconds: never idle long enough for a read time-out, so only a wall-clock budget ends it.
It notes when each client hangs up; a connection no client closes is dropped after --max-drip s.

Each round:
1. `manage.py node_register 1775` in its own process, as an operator runs it, with
   GRID_DEADLINE=--budget (GRID_READ_TIMEOUT=10, GRID_RETRIES=2, LOG_LEVEL=INFO): its exit status,
   wall time (interpreter start-up included; a prompt "not on the grid" run gives that cost), and
   stderr, which must be exactly one line naming the deadline. Nothing may be stored.
2. An admin signed in to gunicorn clicks Re-register on node 1774's page (a real POST with its
   CSRF token); a real Celery worker (prefork, its own redis-server) reads the node through the
   Grid Proxy client with GRID_STEP_DEADLINE=--step-budget. While the job is active this process
   runs the reaper every 0.25 s with JOB_HEARTBEAT_TIMEOUT=5 (shorter than the read, so a read
   without a heartbeat would be called a lost worker) and clicks Re-register again every 0.5 s
   (each click must land on the same job). The job must fail with "the grid proxy did not finish
   answering within N s (...)" (not "worker lost"), the reaper must fail nothing, no second job may
   be created or started, and the node's catalog must be unchanged.

Prints one JSON object; exit status 1 when any round broke one of those. Bounded: each command
round has a 60 s time-out, each job round --step-budget + 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

from bench.reliability.kill_loop import RedisServer, Worker  # noqa: E402
from bench.reliability.web import Gunicorn, csrf_token, django_fresh, production_env  # noqa: E402

PYTHON = BASE_DIR / ".venv" / "bin" / "python"
NODE_ANSWER = BASE_DIR / "tests" / "data" / "gridproxy" / "node-1774.json"
JOB_NODE = 1774  # registered, re-registered from the web
COMMAND_NODE = 1775  # not registered: node_register would register it
MISSING_NODE = 4040  # answered 404 at once: the command's start-up cost
HEARTBEAT_TIMEOUT = 5  # the setting's minimum (production: 120 s)


# --- the dripping proxy -------------------------------------------------------------------------


class DripProxy:
    """GET /nodes/<id>: 200, then the node answer a byte every `drip` s; /nodes/4040: a prompt 404."""

    def __init__(self, *, drip: float, max_seconds: float):
        self.drip = drip
        self.max_seconds = max_seconds
        self.connections: list[dict] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def _handler(self):
        proxy = self
        template = json.loads(NODE_ANSWER.read_text())

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # http.server's naming
                found = re.fullmatch(r"/nodes/(\d+)", self.path.split("?", 1)[0])
                if not found or int(found.group(1)) == MISSING_NODE:
                    body = b'{"error": "node not found"}'
                    self.send_response(404)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                body = json.dumps({**template, "nodeId": int(found.group(1))}).encode()
                record = {"path": self.path, "bytes_sent": 0, "held_s": None, "ended": "dripping"}
                with proxy.lock:
                    proxy.connections.append(record)
                began = time.monotonic()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    record["ended"] = _drip(self, body, proxy=proxy, record=record, began=began)
                except OSError:
                    record["ended"] = "client hung up"
                record["held_s"] = round(time.monotonic() - began, 2)
                self.close_connection = True

            def _hung_up(self, wait: float) -> bool:
                """Wait `wait` s, or less if the client closes its end (its socket turns readable, at EOF)."""
                readable, _, _ = select.select([self.connection], [], [], wait)
                if not readable:
                    return False
                try:
                    return self.connection.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    return True

            def log_message(self, format, *args) -> None:
                pass

        return Handler

    def since(self, n: int) -> list[dict]:
        with self.lock:
            return list(self.connections[n:])

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


# --- 1. the command -----------------------------------------------------------------------------


def _drip(handler, body: bytes, *, proxy: DripProxy, record: dict, began: float) -> str:
    """Send the answer's body a byte at a time, `proxy.drip` seconds apart; how the answer ended."""
    handler.wfile.flush()
    for i in range(len(body)):
        handler.wfile.write(body[i : i + 1])
        handler.wfile.flush()
        record["bytes_sent"] = i + 1
        if handler._hung_up(proxy.drip):
            return "client hung up"
        if proxy.stopping.is_set() or time.monotonic() - began > proxy.max_seconds:
            return "dropped by the proxy (--max-drip)"
    return "answer complete"


def command_round(*, env: dict, node_id: int, timeout: float = 60) -> dict:
    began = time.monotonic()
    done = subprocess.run(
        [str(PYTHON), "manage.py", "node_register", str(node_id)],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return {
        "exit_status": done.returncode,
        "wall_s": round(time.monotonic() - began, 2),
        "stderr_lines": len(done.stderr.strip().splitlines()),
        "stderr": done.stderr.strip()[-1000:],
        "stdout": done.stdout.strip()[-300:],
    }


# --- 2. the web re-register ---------------------------------------------------------------------


def job_round(*, admin, node, step_budget: float, proxy: DripProxy) -> dict:
    from django.utils import timezone

    from dashboard.jobs.services.job_reaper import jobs_reap
    from dashboard.models import Job, Slice

    slices_before = list(
        Slice.objects.filter(node=node).order_by("pk").values_list("pk", "index", "mru", "sru", "state")
    )
    jobs_before = set(Job.objects.values_list("pk", flat=True))
    connections_before = len(proxy.since(0))
    page = admin.request("GET", f"/nodes/{node.grid_id}/")
    token = csrf_token(page.text)

    def click():
        answer = admin.request("POST", f"/nodes/{node.grid_id}/reregister/", data={"csrfmiddlewaretoken": token})
        found = re.fullmatch(r"/jobs/(\d+)/", answer.headers.get("Location", ""))
        return answer.status_code, int(found.group(1)) if found else None

    clicked = time.monotonic()
    status, job_pk = click()
    if status != 302 or job_pk is None:
        return {"problem": f"the click answered {status} without a job page"}
    reaped = clicks = same_job = other_answers = ticks = 0
    oldest_beat = 0.0
    timed_out = False
    while True:
        ticks += 1
        job = Job.objects.get(pk=job_pk)
        if not job.is_active:
            break
        if time.monotonic() - clicked > step_budget + 30:
            timed_out = True
            break
        if job.state == Job.State.RUNNING and job.heartbeat_at:
            oldest_beat = max(oldest_beat, (timezone.now() - job.heartbeat_at).total_seconds())
        reaped += jobs_reap()
        # Clicks stop 2 s before the budget ends: a click after the job failed rightly starts a new job.
        running_for = (timezone.now() - job.started_at).total_seconds() if job.started_at else 0.0
        if ticks % 2 == 0 and running_for < step_budget - 2:
            status, again = click()
            clicks += 1
            same_job += status == 302 and again == job_pk
            other_answers += not (status == 302 and again == job_pk)
        time.sleep(0.25)
    job.refresh_from_db()
    new_jobs = Job.objects.exclude(pk__in=jobs_before)
    others = new_jobs.exclude(pk=job_pk)
    drips = proxy.since(connections_before)
    return {
        "job": job_pk,
        "state": job.state,
        "error": job.error,
        "attempts": job.attempts,
        "click_to_end_s": round((job.finished_at - job.created_at).total_seconds(), 2) if job.finished_at else None,
        "claim_to_end_s": round((job.finished_at - job.started_at).total_seconds(), 2)
        if job.finished_at and job.started_at
        else None,
        "outlived_budget": timed_out,
        "reaped": reaped,
        "oldest_heartbeat_seen_s": round(oldest_beat, 2),
        "clicks_meanwhile": clicks,
        "clicks_on_the_same_job": same_job,
        "clicks_answered_otherwise": other_answers,
        "jobs_created": new_jobs.count(),
        "other_jobs_started": others.filter(started_at__isnull=False).count(),
        "catalog_unchanged": slices_before
        == list(Slice.objects.filter(node=node).order_by("pk").values_list("pk", "index", "mru", "sru", "state")),
        "proxy_connections": [{k: c[k] for k in ("bytes_sent", "held_s", "ended")} for c in drips],
    }


# --- the run ----------------------------------------------------------------------------------


def register_job_node():
    """Node 1774 as the marketplace has it (legacy carve), from the same answer the proxy drips."""
    from dashboard.capacity import GiB, Resources
    from dashboard.nodes.services.registration import node_register

    return node_register(
        node_id=JOB_NODE,
        total=Resources(cru=8, mru=31 * GiB, sru=int(931.5 * GiB)),
        farm_id=4242,
        farm_name="mitana",
        status="up",
        policy_name="legacy",
    )


def drip_env(args, *, workdir: Path, broker_url: str, proxy_url: str) -> tuple[dict, dict]:
    """The environment of gunicorn and the worker, and the command's (its own GRID_DEADLINE, INFO logs)."""
    env = production_env(
        workdir=workdir,
        broker_url=broker_url,
        GRID_BACKEND="gridproxy",
        GRID_PROXY_URL=proxy_url,
        GRID_READ_TIMEOUT="10",
        GRID_RETRIES="2",
        GRID_DEADLINE="30",
        GRID_STEP_DEADLINE=f"{args.step_budget:g}",
        JOB_HEARTBEAT_TIMEOUT=str(HEARTBEAT_TIMEOUT),
    )
    return env, {**env, "GRID_DEADLINE": f"{args.budget:g}", "LOG_LEVEL": "INFO"}


def admin_create() -> str:
    """An admin user made for the run (in the admins group); returns its password."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    password = "drip-" + os.urandom(8).hex()
    user = get_user_model().objects.create_user("drip-admin", password=password)
    user.groups.add(Group.objects.get(name="admins"))
    return password


def stored_counts() -> tuple[int, int]:
    from dashboard.models import AuditEvent, Node

    return (Node.objects.count(), AuditEvent.objects.count())


def command_round_checked(*, env: dict, proxy: DripProxy) -> dict:
    """node_register against the dripping proxy, with whether it stored anything and what the proxy saw."""
    stored_before = stored_counts()
    seen = len(proxy.since(0))
    result = command_round(env=env, node_id=COMMAND_NODE)
    result["stored"] = stored_counts() != stored_before
    result["proxy_connections"] = [{k: c[k] for k in ("bytes_sent", "held_s", "ended")} for c in proxy.since(seen)]
    return result


def drip_rounds(args, *, command_env: dict, admin, node, proxy: DripProxy) -> tuple[list[dict], list[dict]]:
    """Each round: the command, then a web re-register; returns the command rounds and the job rounds."""
    commands, jobs = [], []
    for n in range(args.rounds):
        result = command_round_checked(env=command_env, proxy=proxy)
        commands.append(result)
        log(
            f"round {n + 1}/{args.rounds}: node_register exit {result['exit_status']} in {result['wall_s']} s, "
            f"{result['stderr_lines']} stderr line(s)"
        )
        outcome = job_round(admin=admin, node=node, step_budget=args.step_budget, proxy=proxy)
        jobs.append(outcome)
        log(
            f"round {n + 1}/{args.rounds}: job #{outcome.get('job')} {outcome.get('state')} after "
            f"{outcome.get('claim_to_end_s')} s: {outcome.get('error') or outcome.get('problem')}"
        )
    return commands, jobs


def command_violations(commands: list[dict], *, expected: str, budget: float, startup_s: float) -> list[str]:
    """Each command must fail in one line naming the deadline, store nothing, and end within its budget."""
    violations = []
    for n, c in enumerate(commands, 1):
        if c["exit_status"] != 1 or c["stderr"] != expected or c["stored"]:
            violations.append(
                f"round {n}: node_register exit {c['exit_status']}, stored {c['stored']}: {c['stderr'][:300]!r}"
            )
        if c["wall_s"] > budget + startup_s + 5:
            violations.append(f"round {n}: node_register took {c['wall_s']} s (budget {budget:g} s + start-up)")
    return violations


def job_round_violations(jobs: list[dict], *, expected: str) -> list[str]:
    """Each job must fail on its step deadline (not "worker lost"), with no reaping, no second job,
    every click on the same job, and the catalog unchanged."""
    from dashboard.models import Job

    violations = []
    for n, j in enumerate(jobs, 1):
        if j.get("problem") or j["state"] != Job.State.FAILED or j["error"] != expected or j["outlived_budget"]:
            violations.append(f"round {n}: job {j.get('job')} {j.get('state')}: {j.get('error') or j.get('problem')}")
        elif (
            j["reaped"]
            or j["jobs_created"] != 1
            or j["other_jobs_started"]
            or j["clicks_answered_otherwise"]
            or not j["catalog_unchanged"]
        ):
            violations.append(
                f"round {n}: reaped {j['reaped']}, jobs created {j['jobs_created']}, others started "
                f"{j['other_jobs_started']}, catalog unchanged {j['catalog_unchanged']}"
            )
    return violations


def command_summary(commands: list[dict], *, budget: float, startup_s: float) -> dict:
    return {
        "what": f"manage.py node_register {COMMAND_NODE}",
        "grid_deadline_s": budget,
        "exit_statuses": dict(Counter(c["exit_status"] for c in commands)),
        "wall_s": [c["wall_s"] for c in commands],
        "startup_s": startup_s,
        "stderr_lines": [c["stderr_lines"] for c in commands],
        "stderr_example": commands[0]["stderr"] if commands else "",
        "stored_anything": sum(c["stored"] for c in commands),
        "proxy_saw_hang_up_after_s": [
            c["proxy_connections"][0]["held_s"] if c["proxy_connections"] else None for c in commands
        ],
    }


def job_summary(jobs: list[dict], *, step_budget: float) -> dict:
    """The job rounds added up; the figures of a round that broke before its job ended are left out."""
    finished = [j for j in jobs if not j.get("problem")]
    return {
        "what": f"POST /nodes/{JOB_NODE}/reregister/ through gunicorn, a prefork Celery worker",
        "grid_step_deadline_s": step_budget,
        "job_heartbeat_timeout_s": HEARTBEAT_TIMEOUT,
        "states": dict(Counter(j.get("state") for j in jobs)),
        "errors": sorted({j.get("error") or j.get("problem") for j in jobs}),
        "claim_to_end_s": [j["claim_to_end_s"] for j in finished],
        "click_to_end_s": [j["click_to_end_s"] for j in finished],
        "oldest_heartbeat_seen_s": max((j["oldest_heartbeat_seen_s"] for j in finished), default=None),
        "reaped": sum(j["reaped"] for j in finished),
        "clicks_meanwhile": sum(j["clicks_meanwhile"] for j in finished),
        "clicks_on_the_same_job": sum(j["clicks_on_the_same_job"] for j in finished),
        "clicks_answered_otherwise": sum(j["clicks_answered_otherwise"] for j in finished),
        "jobs_created": sum(j["jobs_created"] for j in finished),
        "second_jobs_started": sum(j["other_jobs_started"] for j in finished),
        "catalog_unchanged": sum(j["catalog_unchanged"] for j in finished),
        "attempts": [j["attempts"] for j in finished],
        "proxy_saw_hang_up_after_s": [
            j["proxy_connections"][0]["held_s"] if j["proxy_connections"] else None for j in finished
        ],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=3.0, help="GRID_DEADLINE for node_register (s)")
    parser.add_argument("--step-budget", type=float, default=10.0, help="GRID_STEP_DEADLINE for the worker (s)")
    parser.add_argument("--drip", type=float, default=1.0, help="seconds between the answer's bytes")
    parser.add_argument("--max-drip", type=float, default=120.0, help="the proxy drops a connection after this (s)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.step_budget <= HEARTBEAT_TIMEOUT:
        parser.error(f"--step-budget must be longer than the heartbeat limit ({HEARTBEAT_TIMEOUT} s) to test it")

    workdir = Path(tempfile.mkdtemp(prefix="slicedash-drip-"))
    redis_server = RedisServer(workdir)
    redis_server.start()
    proxy = DripProxy(drip=args.drip, max_seconds=args.max_drip)
    env, command_env = drip_env(args, workdir=workdir, broker_url=redis_server.url, proxy_url=proxy.url)
    gunicorn = Gunicorn(env=env, workdir=workdir, workers=1, threads=4)
    worker = Worker(env=env, logdir=workdir, name="drip")
    try:
        log("migrating, emptying the database, collecting static files")
        django_fresh(env)
        from bench.reliability.load import Browser
        from dashboard.models import Job

        node = register_job_node()
        password = admin_create()
        gunicorn.start()
        worker.start()
        admin = Browser(gunicorn.url)
        admin.login("drip-admin", password)

        log("the command's start-up cost: node_register against a prompt 404")
        baseline = command_round(env=command_env, node_id=MISSING_NODE)
        commands, jobs = drip_rounds(args, command_env=command_env, admin=admin, node=node, proxy=proxy)
        server_errors = gunicorn.server_errors()
        total_jobs = Job.objects.count()
    finally:
        worker.stop()
        gunicorn.stop()
        proxy.stop()
        redis_server.stop()

    expected_command = f"CommandError: grid: the grid proxy did not finish answering within {args.budget:g} s ({proxy.url}/nodes/{COMMAND_NODE})"
    expected_job = (
        f"the grid proxy did not finish answering within {args.step_budget:g} s ({proxy.url}/nodes/{JOB_NODE})"
    )
    violations = command_violations(
        commands, expected=expected_command, budget=args.budget, startup_s=baseline["wall_s"]
    )
    violations += job_round_violations(jobs, expected=expected_job)
    if server_errors:
        violations.append(f"gunicorn logged {server_errors} server error(s): {gunicorn.log_tail(2000)}")

    report = {
        "rounds_run": args.rounds,
        "drip_s_per_byte": args.drip,
        "proxy": "127.0.0.1 (loopback only)",
        "command": command_summary(commands, budget=args.budget, startup_s=baseline["wall_s"]),
        "job": job_summary(jobs, step_budget=args.step_budget),
        "jobs_in_database": total_jobs,
        "server_errors": server_errors,
        "violations": violations,
        "rounds": {"command": commands, "job": jobs},
    }
    summary = {k: v for k, v in report.items() if k != "rounds"}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if violations else 0


def log(message: str) -> None:
    print(f"[drip {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
