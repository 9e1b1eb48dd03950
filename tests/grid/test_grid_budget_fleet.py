"""Finding 8 of issue 35, end to end: one request budget for a web process and three worker processes.

A loopback Grid Proxy stand-in in its own process (tests/gridproxy_counting.py) enforcing the real
limiter (20 requests in any 1 s window per client, then 429 with Retry-After: 1; every process here
is the same client, 127.0.0.1), three
real Celery worker processes (one running the beat with a 10 s fleet watch) working through a
precheck job per node, and 16 API clients asking this process's live server for prechecks. Every
process keeps the budget in the one Redis (GRID_RATE_LIMIT 15 of the proxy's 20). What is asserted
is what the proxy counted, never how fast anything was: no 429, and no 1 s window with more than
20 requests in it. The proxy counts arrivals, the budget admissions, and on a loaded machine the two
can be far apart: a request keeps its budget place until its answer is in (budget.sending), so late
arrivals stay within the limit (once, before that, a loaded run saw 22 in a second).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings as django_settings
from django.db import connection

from dashboard.grid.proxy import GridProxyClient
from dashboard.jobs.services.jobs import job_request
from dashboard.models import Job, Node
from dashboard.nodes.services.onboarding import OnboardRequest, grid_onboard
from tests.support import busiest_window, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

PROXY_LIMIT = 20  # the real proxy's: requests per client in any 1 s window (mw/ratelimiter.go)
NODES = 40
CLIENTS = 16
PRECHECKS_PER_CLIENT = 8
RUN_TIMEOUT = 180.0  # seconds for the whole run; the test fails, never hangs, past it


def test_busiest_window_counts_a_sliding_second():
    assert busiest_window([0.0, 0.5, 0.99, 1.0, 1.2]) == 4
    assert busiest_window([0.0, 1.0, 2.0]) == 1
    assert busiest_window([]) == 0


def _die_with_parent() -> None:  # in the child, before exec: a killed test leaves no worker behind
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Workers:
    """Celery worker processes on the test's database and broker, ended by their own pid."""

    def __init__(self, tmp_path: Path, proxy_url: str) -> None:
        db = connection.settings_dict
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("DB_CONN_MAX_AGE",)},
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
            "GRID_BACKEND": "gridproxy",
            "GRID_PROXY_URL": proxy_url,
            "FLEET_WATCH_EVERY": "10",
            "VAR_DIR": str(tmp_path),
            "LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PYTHONPATH": str(django_settings.BASE_DIR),
        }
        self.tmp_path = tmp_path
        self.processes: list[tuple[subprocess.Popen, Path]] = []

    def start(self, name: str, *, beat: bool = False) -> None:
        log = self.tmp_path / f"worker-{name}.log"
        log.write_text("")
        command = [
            str(Path(sys.executable).with_name("celery")),
            "-A",
            "config",
            "worker",
            "--pool=solo",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-n",
            f"budget-{name}-{os.getpid()}@%h",
            f"--logfile={log}",
            *(["--beat", f"--schedule={self.tmp_path / 'beat-schedule'}"] if beat else []),
        ]
        process = subprocess.Popen(
            command,
            cwd=django_settings.BASE_DIR,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp_path / f"worker-{name}.stderr", "w"),  # the child keeps it
            preexec_fn=_die_with_parent,
        )
        self.processes.append((process, log))

    def wait_ready(self, timeout: float = 90.0) -> None:
        def ready(process, log) -> bool:
            assert process.poll() is None, f"a worker exited with {process.returncode}; see {log}"
            return " ready." in log.read_text(errors="replace")

        for process, log in self.processes:
            wait_until(
                lambda p=process, f=log: ready(p, f),
                timeout=timeout,
                what=f"a worker to be ready; see {log}",
                every=0.2,
            )

    def stop(self) -> None:
        for process, _ in self.processes:
            if process.poll() is None:
                process.terminate()
        for process, _ in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


class Proxy:
    """tests.gridproxy_counting in its own process, ended by its own pid."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.gridproxy_counting", str(NODES), str(PROXY_LIMIT)],
            cwd=django_settings.BASE_DIR,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=_die_with_parent,
        )
        port = self.process.stdout.readline().strip()
        assert port.isdigit(), f"the proxy stand-in did not start (said {port!r})"
        self.url = f"http://127.0.0.1:{port}"

    def counted(self) -> tuple[list[float], int]:
        answer = requests.get(f"{self.url}/_test/arrivals", timeout=30).json()
        return answer["arrivals"], answer["refused"]

    def reset(self) -> None:
        requests.get(f"{self.url}/_test/reset", timeout=30).raise_for_status()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


@pytest.fixture
def proxy():
    stand_in = Proxy()
    yield stand_in
    stand_in.stop()


@pytest.mark.timeout(RUN_TIMEOUT + 120)
def test_finding_8_three_workers_and_16_api_clients_never_pass_the_proxys_limit(
    proxy, live_server, settings, api_token, broker_purged, tmp_path
):
    grid_onboard(request=OnboardRequest(farm_ids=(4242,)), grid=GridProxyClient(proxy.url, retries=0, deadline=30.0))
    assert Node.objects.count() == NODES
    settings.GRID_BACKEND = "gridproxy"
    settings.GRID_PROXY_URL = proxy.url
    token = api_token("precheck")
    workers = Workers(tmp_path, proxy.url)
    try:
        for name, beat in (("beat", True), ("two", False), ("three", False)):
            workers.start(name, beat=beat)
        workers.wait_ready()
        proxy.reset()
        ends = time.monotonic() + RUN_TIMEOUT

        jobs = [job_request(kind=Job.Kind.PRECHECK, node=node, source="command").job for node in Node.objects.all()]

        def watched() -> bool:
            return Job.objects.filter(kind=Job.Kind.FLEET_WATCH, state=Job.State.SUCCEEDED).exists()

        answers: list[int] = []
        answers_lock = threading.Lock()

        def client(n: int) -> None:
            with requests.Session() as session:
                for i in range(PRECHECKS_PER_CLIENT):
                    grid_id = 1 + (n * PRECHECKS_PER_CLIENT + i) % NODES
                    left = max(ends - time.monotonic(), 1.0)
                    response = session.post(
                        f"{live_server.url}/api/v1/nodes/{grid_id}/precheck",
                        headers={"Authorization": f"Bearer {token}"},
                        timeout=left,
                    )
                    with answers_lock:
                        answers.append(response.status_code)

        clients = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(CLIENTS)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(timeout=max(ends - time.monotonic(), 0.1))
        assert not any(t.is_alive() for t in clients), "the API clients did not finish within the run's timeout"

        # The beat's watch has run at least once (10 s) while the jobs finish.
        while time.monotonic() < ends:
            finished = Job.objects.filter(pk__in=[j.pk for j in jobs], finished_at__isnull=False).count()
            if finished == len(jobs) and watched():
                break
            time.sleep(0.5)
        watch_ran = watched()
        states = list(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True))
    finally:
        workers.stop()

    arrivals, refused = proxy.counted()
    sent = len(arrivals)
    print(f"the proxy saw {sent} requests, {refused} refused with 429, at most {busiest_window(arrivals)} in 1 s")
    assert len(answers) == CLIENTS * PRECHECKS_PER_CLIENT
    assert answers.count(200) == len(answers), sorted(set(answers))
    assert states.count(Job.State.SUCCEEDED) == NODES, sorted(set(states))
    assert watch_ran, "the beat's fleet watch never ran"
    # Every precheck (the API's and the jobs') was one request at least: the proxy was really read hard.
    assert sent >= CLIENTS * PRECHECKS_PER_CLIENT + NODES
    assert refused == 0, f"the proxy refused {refused} of {sent} requests with 429"
    assert busiest_window(arrivals) <= PROXY_LIMIT, f"the proxy saw {busiest_window(arrivals)} requests in 1 s"
