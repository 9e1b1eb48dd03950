"""Onboarding 2,000 nodes in 4 farms from the command line, against the simulated grid's Grid Proxy face
answering every request after 100 ms (20 pages of GRID_PAGE_SIZE 100: a floor of 2 s), issue 43.

The issue's target is twice the floor, 4 s for the whole command with its start-up. On this machine
(2 cores shared with other sessions, load average 5 to 9) the wall time is mostly other processes' and
varies from run to run, so it is printed, not asserted (BENCHMARKS.md has the measured figures and the
command that repeats them). What is asserted cannot depend on the machine's load:
- the pages after the first are on the wire two at a time: the stand-in holds page 2's answer until
  page 3 has been asked for (a read one page at a time would never release it, and fails);
- never more requests in any second than the shared budget admits to background work (GRID_RATE_LIMIT
  less GRID_RATE_RESERVE, as the onboarding job), counted where the proxy counts them, at their arrival;
- every node registered, in 20 requests.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from urllib.parse import parse_qsl, quote, urlsplit

import pytest

from dashboard.capacity import GiB
from dashboard.models import Node
from sim.grid import SimulatedGrid, serve_simulator

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NODES = 2000
FARMS = (9001, 9002, 9003, 9004)
LATENCY = 0.1
SHAPES = ((8, 31 * GiB, int(931.5 * GiB)), (16, 62 * GiB, 2 * int(931.5 * GiB)), (4, 15 * GiB, 476 * GiB))


class Watched:
    """What the stand-in saw: each request's arrival, how many were in flight at once, page 2 held for page 3."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.arrivals: list[float] = []
        self.in_flight = self.most_in_flight = 0
        self.page_3_asked = threading.Event()
        self.page_2_overlapped: bool | None = None

    def wrap(self, server) -> None:
        answer = server.RequestHandlerClass.do_GET
        watched = self

        def do_get(handler) -> None:
            page = dict(parse_qsl(urlsplit(handler.path).query)).get("page")
            with watched.lock:
                watched.arrivals.append(time.monotonic())
                watched.in_flight += 1
                watched.most_in_flight = max(watched.most_in_flight, watched.in_flight)
            try:
                if page == "3":
                    watched.page_3_asked.set()
                if page == "2":
                    watched.page_2_overlapped = watched.page_3_asked.wait(60)
                answer(handler)
            finally:
                with watched.lock:
                    watched.in_flight -= 1

        server.RequestHandlerClass.do_GET = do_get

    def most_in_a_second(self) -> int:
        times, most, first = sorted(self.arrivals), 0, 0
        for last, at in enumerate(times):
            while at - times[first] >= 1.0:
                first += 1
            most = max(most, last - first + 1)
        return most


def test_onboarding_2000_nodes_reads_pages_two_at_a_time_within_the_budget(tmp_path, settings):
    from django.db import connection

    grid = SimulatedGrid(tmp_path / "simgrid.sqlite3")
    for i in range(NODES):
        cru, mru, sru = SHAPES[i % len(SHAPES)]
        grid.add_node(100_001 + i, cru=cru, mru=mru, sru=sru, farm_id=FARMS[i % len(FARMS)])
    server = serve_simulator(grid, port=0, latency=LATENCY)
    watched = Watched()
    watched.wrap(server)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": (
            f"postgres://{quote(db['USER'] or '')}:{quote(db['PASSWORD'] or '')}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        ),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "GRID_BACKEND": "gridproxy",
        "GRID_PROXY_URL": f"http://127.0.0.1:{server.server_address[1]}",
        "GRID_PAGE_SIZE": "100",
        "VAR_DIR": str(tmp_path / "var"),
    }
    farms = [arg for farm in FARMS for arg in ("--farm-id", str(farm))]
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "manage.py", "node_register", *farms, "--policy", "legacy", "--max-new-nodes", "2000"]
            + ["--json"],
            cwd=settings.BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        server.shutdown()
        server.server_close()
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)
    floor = NODES / 100 * LATENCY
    print(
        f"\nnode_register of {NODES} nodes: {wall:.2f} s wall ({wall / floor:.2f}x its {floor:g} s floor), "
        f"{cpu_s:.2f} s of CPU, load average {os.getloadavg()[0]:.1f}, at most {watched.most_in_a_second()} "
        "requests in a second"
    )

    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["registered"], result["requests"], Node.objects.count()) == (NODES, 20, NODES)
    assert watched.page_2_overlapped is True
    assert watched.most_in_flight == 2
    # Background work, as the onboarding job: the reserve stays free for interactive requests.
    assert watched.most_in_a_second() <= settings.GRID_RATE_LIMIT - settings.GRID_RATE_RESERVE
