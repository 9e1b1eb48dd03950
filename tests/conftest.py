"""Shared fixtures. Append new ones; keep the others'."""

from contextlib import contextmanager

import pytest
from hypothesis import settings as hypothesis_settings

# `make check` runs the property tests with --hypothesis-profile=quick: a quarter of their examples
# (Hypothesis's 100 here, a test's own count through tests/support.py examples()). `make test` keeps the
# default, so every property is still tried at full length there.
hypothesis_settings.register_profile("quick", max_examples=25)


@pytest.fixture
def simgrid_path(tmp_path, settings):
    """Each test gets its own simulated grid file."""
    path = tmp_path / "simgrid.sqlite3"
    settings.SIMGRID_PATH = path
    settings.GRID_BACKEND = "simulator"
    return path


@pytest.fixture
def sim_node(simgrid_path):
    """Add a node to this test's simulated grid and register it from what the grid reports.

    sim_node(node_id, cru=.., mru=.., sru=.., policy_name=None, register=True, hide_pools=False, **add_node options)
    -> Node | None
    """
    from sim.grid import SimulatedGrid

    grid = SimulatedGrid(simgrid_path)

    def add(node_id, **options):
        return sim_node_add(grid, node_id, **options)

    add.grid = grid
    return add


def sim_node_add(grid, node_id, *, policy_name=None, register=True, hide_pools=False, **options):
    """sim_node's work on any SimulatedGrid, for class-scoped fixtures too (see rolled_back_after)."""
    from dataclasses import replace

    from dashboard.nodes.services.registration import node_register_from_grid

    grid.add_node(node_id, **options)
    if not register:
        return None
    # The pools as reported (zos.storage.pools): the test's, or one SSD of the whole total. A test of
    # a node whose pools nobody reported passes hide_pools=True (the Grid Proxy's face alone). The node
    # itself is not asked (its pools or build, over the simulated grid's RMB): a test that wants it calls
    # node_register_from_grid.
    pools = None if hide_pools else tuple(options.get("pools") or [options["sru"]])
    live = replace(grid.node(node_id), pools_sru=pools)
    return node_register_from_grid(live=live, policy_name=policy_name, ask_rmb=False)


@pytest.fixture
def gridproxy_down(settings):
    """The configured grid is the real Grid Proxy client pointed at a closed loopback port."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings.GRID_BACKEND = "gridproxy"
    settings.GRID_PROXY_URL = f"http://127.0.0.1:{port}"
    settings.GRID_RETRIES = 0
    return settings.GRID_PROXY_URL


@pytest.fixture
def gridproxy_serving(settings):
    """gridproxy_serving({"/nodes/1774": payload, ...}): the Grid Proxy client against a loopback server."""
    from tests.gridproxy_canned import start_canned_proxy

    servers = []

    def serve(routes: dict):
        canned, server = start_canned_proxy()
        for path, body in routes.items():
            canned.answer(path, body)
        servers.append(server)
        settings.GRID_BACKEND = "gridproxy"
        settings.GRID_PROXY_URL = canned.url
        settings.GRID_RETRIES = 0
        return canned.url

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def role_user(db, django_user_model):
    """role_user("admins") / role_user("support"): a user in that role's group (dashboard.access.roles);
    role_user(None): a signed-in user in no group.

    A transactional test before this one may have flushed the groups; they are made again from the
    declaration migration 0003_roles reads, so the permissions are exactly what production gets.
    """
    from django.apps import apps
    from django.contrib.auth.models import Group

    def make(role: str | None, *, username: str | None = None, password: str = "not-a-real-password-1774", **fields):
        if role is None:
            return django_user_model.objects.create_user(username=username or "nobody", password=password, **fields)
        if not Group.objects.filter(name=role).exists():
            from dashboard.access.roles import roles_restore

            roles_restore(apps)
        user = django_user_model.objects.create_user(
            username=username or f"{role}-{Group.objects.count()}-user", password=password, **fields
        )
        user.groups.add(Group.objects.get(name=role))
        return user

    return make


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, with the role groups 0003_roles makes: a database kept from an
    earlier run (--reuse-db) was left flushed by that run's transactional tests."""
    from django.apps import apps
    from django.db import connection

    from dashboard.access.roles import roles_restore

    with django_db_blocker.unblock():
        roles_restore(apps)
    yield
    # A connection some test left open (a thread's, a worker's) would keep pytest-django from dropping the
    # database ("being accessed by other users"), and every run would leave one behind on the server.
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def flushes_the_database(item) -> bool:
    """Whether this test is a transactional one, whose teardown flushes every table."""
    marker = item.get_closest_marker("django_db")
    if marker and (marker.kwargs.get("transaction") or (marker.args and marker.args[0])):
        return True
    return bool({"transactional_db", "live_server"} & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a transactional test's flush (its fixtures' teardown, inside this hook) the role groups are
    made again and committed, as 0003_roles makes them, so the next test finds the database as migrate
    leaves it. Without this every role_user call after a flush made them again in its own test (0.04 s
    a call, hundreds of calls a run). The last test's teardown drops the database: nothing to do then."""
    result = yield
    if nextitem is not None and flushes_the_database(item):
        from django.apps import apps
        from pytest_django.plugin import blocking_manager_key

        from dashboard.access.roles import roles_restore

        with item.config.stash[blocking_manager_key].unblock():
            roles_restore(apps)
    return result


@pytest.fixture
def admins_client(client, role_user):
    """A test client logged in as a member of the admins group."""
    client.force_login(role_user("admins", username="ada"))
    return client


@pytest.fixture
def nogroup_client(client, role_user):
    """A test client logged in as a user in no group: signed in, allowed nothing."""
    client.force_login(role_user(None, username="nora"))
    return client


@pytest.fixture
def support_client(client, role_user):
    """A test client logged in as a member of the support group (read only)."""
    client.force_login(role_user("support", username="sam"))
    return client


# --- jobs and Celery workers (JOBS helper) -------------------------------------------------


@pytest.fixture
def legacy_node_1774(simgrid_path):
    """Node 1774 as the marketplace has it: the legacy 7-slice catalog, slice 0's VM deployed on the grid.

    8 cores, 31 GiB, 931.5 GiB on the simulated grid, its one SSD reported; registered with policy
    "legacy" (7 slices of 4 GiB / 133 GiB); slice 0 deployed through the simulator's deploy_vm and
    marked deployed.
    """
    from dataclasses import replace

    from dashboard.figures.services.figures import figures_refresh
    from dashboard.models import Slice
    from dashboard.nodes.services.registration import node_register_from_grid
    from sim.grid import SimulatedGrid
    from tests.factories import TOTAL_1774, node_1774

    grid = SimulatedGrid(simgrid_path)
    grid.add_node(1774, **node_1774(farm_id=1, farm_name="farm one"))
    node = node_register_from_grid(live=replace(grid.node(1774), pools_sru=(TOTAL_1774.sru,)), policy_name="legacy")
    first = node.slices.get(index=0)
    grid.deploy_vm(1774, first.size, name="vm1774s0")
    Slice.objects.filter(pk=first.pk).update(state=Slice.State.DEPLOYED)
    figures_refresh([node.pk])
    node.refresh_from_db()
    node.grid = grid
    return node


@pytest.fixture
def broker_purged():
    """The Celery app, its Redis broker emptied: queued messages and unacked ones (a killed worker's).

    Tests run with their own Redis db (CELERY_BROKER_URL), so nobody else's messages are here.
    """
    from config.celery import app

    app.control.purge()
    with app.connection_for_write() as conn:
        conn.default_channel.client.delete("unacked", "unacked_index", "unacked_mutex")
    return app


@pytest.fixture
def live_worker(transactional_db, broker_purged, monkeypatch):
    """A real Celery worker (solo pool) in a thread of this process, consuming the test's Redis broker.

    Needs @pytest.mark.django_db(transaction=True): the worker has its own database connection and
    sees only committed rows. Django's system checks are skipped at worker start-up (the suite runs
    them on their own); they would otherwise run again for every worker test.
    """
    from celery.contrib.testing.worker import start_worker

    from tests.support import worker_stops_quickly

    monkeypatch.setenv("CELERY_SKIP_CHECKS", "1")
    with (
        worker_stops_quickly(broker_purged),
        start_worker(broker_purged, pool="solo", perform_ping_check=False, shutdown_timeout=30) as worker,
    ):
        yield worker


@pytest.fixture
def job_finished():
    """job_finished(job_or_id, timeout=30) -> Job: polls the row until the job is no longer active."""
    from dashboard.models import Job
    from tests.support import wait_until

    def wait(job, timeout: float = 30.0):
        job_id = getattr(job, "pk", job)
        seen = []

        def finished() -> bool:
            seen[:] = [Job.objects.select_related("node").get(pk=job_id)]
            return not seen[0].is_active

        try:
            wait_until(finished, timeout=timeout, what=f"job #{job_id} to finish")
        except AssertionError:
            state, step = seen[0].state, seen[0].step
            raise AssertionError(f"job #{job_id} still {state} after {timeout} s (step: {step!r})") from None
        return seen[0]

    return wait


@pytest.fixture
def legacy_fleet(simgrid_path):
    """legacy_fleet(count, first=1, farm_id=1) -> [Node]: nodes on the simulated grid, registered with
    the legacy carve (stale under the fleet default), in one bulk insert per table.
    """
    from dashboard.capacity import GiB
    from sim.grid import SimulatedGrid

    grid = SimulatedGrid(simgrid_path)

    def make(count: int, *, first: int = 1, farm_id: int = 1, mru: int = 16 * GiB, sru: int = 500 * GiB):
        return legacy_fleet_build(grid, count, first=first, farm_id=farm_id, mru=mru, sru=sru)

    make.grid = grid
    return make


def legacy_fleet_build(grid, count: int, *, first: int, farm_id: int, mru: int, sru: int):
    """legacy_fleet's work on any SimulatedGrid, for class-scoped fixtures too (see rolled_back_after)."""
    from dashboard.capacity import PROFILES, carve
    from dashboard.figures.services.figures import figures_refresh
    from dashboard.models import Node, Slice
    from dashboard.nodes.services.registration import catalog_slices

    legacy = PROFILES["legacy"]
    nodes = []
    for node_id in range(first, first + count):
        live = grid.add_node(node_id, cru=8, mru=mru, sru=sru, farm_id=farm_id)
        cut = carve(live.total, legacy)
        nodes.append(
            Node(
                grid_id=node_id,
                farm_id=farm_id,
                status="up",
                total_cru=8,
                total_mru=mru,
                total_sru=sru,
                carved_policy_name=legacy.name,
                carved_policy_version=legacy.version,
                carved_slice_sru=cut.slice.sru,
                carved_deployable=cut.slices,
            )
        )
    nodes = Node.objects.bulk_create(nodes)
    Slice.objects.bulk_create(
        s
        for node in nodes
        for s in catalog_slices(node=node, carve=carve(node.total, legacy), start_index=0, generation=1)
    )
    figures_refresh([n.pk for n in nodes])
    return nodes


# --- end of the JOBS helper's fixtures ---------------------------------------------------


# --- the quick loop and the run's report (issue 11) -------------------------------------------


def browser_skips(skipped_reports) -> list[str]:
    """The reasons of the browser tests among these skipped reports."""
    reasons = []
    for report in skipped_reports:
        if "browser" in getattr(report, "keywords", {}) and isinstance(report.longrepr, tuple):
            reasons.append(str(report.longrepr[2]).removeprefix("Skipped: "))
    return reasons


def pytest_unconfigure(config):
    """Say it at the very end, below pytest's own summary, where nobody can miss it: the browser
    tests did not run. (CI=true fails instead of skipping: tests/browser/conftest.py.)"""
    terminalreporter = config.pluginmanager.get_plugin("terminalreporter")
    if terminalreporter is None:
        return
    reasons = browser_skips(terminalreporter.stats.get("skipped", []))
    if not reasons:
        return
    write = terminalreporter.write_line
    terminalreporter.write_sep("!", f"{len(reasons)} BROWSER TESTS WERE SKIPPED", red=True, bold=True)
    for reason in sorted(set(reasons)):
        write(f"  {reason}", red=True, bold=True)
    write("  The pages were not tested in a browser. Install Debian's Chromium and run again:", red=True, bold=True)
    write("      sudo apt-get install chromium      (never `playwright install`)", red=True, bold=True)
    terminalreporter.write_sep("!", red=True, bold=True)


@pytest.fixture(autouse=True)
def grid_requests_forgotten():
    """Each test starts with no Grid Proxy request counted in this process (dashboard.grid.telemetry):
    one test's requests must not be stored by the next test's web request."""
    from dashboard.grid import telemetry

    telemetry.drain()


@pytest.fixture(autouse=True, scope="session")
def fast_password_hasher():
    """Hash passwords with MD5 in the suite: PBKDF2 costs about 0.4 s per user created or login
    checked, which was most of many tests' time. Production keeps Django's default hashers
    (tests/test_settings.py runs the real settings in a subprocess)."""
    from django.test import override_settings

    # override_settings (not plain assignment) sends setting_changed, which clears Django's cached hashers.
    fast = override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"])
    fast.enable()
    yield
    fast.disable()


@pytest.fixture(autouse=True, scope="session")
def flush_by_delete():
    """A transactional test's teardown (Django's flush) empties the tables with DELETE, not TRUNCATE.

    PostgreSQL's TRUNCATE of the suite's 40-odd tables gives each table and index a new file: 0.7 to
    1 s a flush here, after every worker, browser and live-server test. DELETE of the few rows a test
    wrote takes about 0.01 s, and leaves the same thing: every table empty, sequences as they were
    (Django's teardown flush never resets them; a test that asks for reset_sequences gets it at its
    set-up). The foreign keys Django makes are DEFERRABLE INITIALLY DEFERRED and flush runs in one
    transaction, so the order of the DELETEs does not matter. Any other flush (cascading, or resetting
    sequences) is left to PostgreSQL's own SQL.
    """
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return [f"DELETE FROM {self.quote_name(table)};" for table in tables]

    DatabaseOperations.sql_flush = sql_flush
    yield
    DatabaseOperations.sql_flush = truncate


def simgrid_copy(built, path) -> None:
    """Copy a simulated grid built once (a class's or module's fixture) to a test's own file, which the
    test may then write: far cheaper than adding and registering its nodes again. SQLite's backup
    copies what the WAL holds too."""
    import sqlite3

    source, target = sqlite3.connect(built), sqlite3.connect(path)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()


@contextmanager
def rolled_back_after(django_db_blocker):
    """For a class-scoped fixture that builds data several tests only read: the build happens in a
    transaction rolled back when the class is done, and each test runs in a savepoint inside it
    (the `db` fixture's), so a test's own writes are undone as usual.

    Only for tests marked plain `django_db` (a transactional test would flush the data), and only
    for data in the database: files (a simulated grid) must live in a folder of the fixture's own.
    """
    from django.db import transaction

    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            yield
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


# --- API tokens (API helper) ---------------------------------------------------------------


@pytest.fixture
def api_token(role_user):
    """api_token("read,report", role="admins", **create options) -> the bearer secret of a new token."""
    from dashboard.access.services.tokens import api_token_create

    made = []
    holders = {}

    def make(scopes: str = "read", *, role: str = "admins", user=None, name: str | None = None, **options) -> str:
        if user is None and role not in holders:
            holders[role] = role_user(role, username=f"api-{role}")
        holder = user or holders[role]
        issued = api_token_create(
            user=holder, name=name or f"test-{len(made)}", scopes=scopes, source="command", **options
        )
        made.append(issued.token)
        return issued.secret

    make.tokens = made
    return make


@pytest.fixture
def api_call(client):
    """api_call("get", "/api/v1/fleet", token, json=None, **query) -> response, with the bearer header."""
    import json as jsonlib

    def call(method: str, path: str, token: str | None = None, *, json=None, **params):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if method == "get":
            return client.get(path, params, headers=headers)
        body = jsonlib.dumps(json) if json is not None else ""
        return getattr(client, method)(path, body, content_type="application/json", headers=headers)

    return call


# --- end of the API helper's fixtures ------------------------------------------------------


# --- alerts (ALERTS helper) -----------------------------------------------------------------


@pytest.fixture
def alert_receiver(settings):
    """A webhook receiver on loopback, set as the only ALERT_URLS; `.messages` holds what it got."""
    from tests.alert_receiver import AlertReceiver

    receiver = AlertReceiver()
    settings.ALERT_URLS = [receiver.url]
    yield receiver
    receiver.close()


# --- end of the ALERTS helper's fixtures ---------------------------------------------------


# --- shared by several modules (a test module never imports another: tests/test_architecture.py) ----


@pytest.fixture
def worker_process(tmp_path, simgrid_path, broker_purged):
    """worker_process(pool="solo", **env) -> (Popen, marker path): a real worker in its own process."""
    import os
    import subprocess
    from urllib.parse import quote

    from django.db import connection

    from tests.killed_workers import BASE_DIR, CELERY, WORKER_SESSION
    from tests.support import wait_until

    started: list[tuple[subprocess.Popen, object]] = []

    def start(*, pool: str = "solo", **env):
        n = len(started)
        db = connection.settings_dict
        marker = tmp_path / f"paused-{n}"
        # An in-process worker of an earlier test leaves its log set-up (CELERY_LOG_*, _MP_FORK_*) here.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_LOG_", "_MP_FORK_"))}
        environ = inherited | {
            "DATABASE_URL": (
                f"postgres://{quote(db['USER'] or '')}:{quote(db['PASSWORD'] or '')}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
                f"?application_name={WORKER_SESSION}"
            ),
            "CELERY_BROKER_URL": broker_purged.conf.broker_url,
            "SIMGRID_PATH": str(simgrid_path),
            "GRID_BACKEND": "simulator",
            "DEBUG": "true",
            "VAR_DIR": str(tmp_path / "var"),
            "CELERY_SKIP_CHECKS": "1",
            "JOB_TEST_PAUSE_MARKER": str(marker),
            **env,
        }
        log = open(tmp_path / f"worker-{n}.log", "w")
        proc = subprocess.Popen(
            [
                str(CELERY),
                "-A",
                "config",
                "worker",
                f"--pool={pool}",
                "--concurrency=1",
                "--loglevel=INFO",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
                "-n",
                f"killtest{n}@%h",
            ],
            cwd=BASE_DIR,
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        started.append((proc, log))
        # Tests that look at the worker's behaviour need it consuming before they send anything.
        logged = tmp_path / f"worker-{n}.log"
        wait_until(lambda: " ready." in logged.read_text() or proc.poll() is not None, timeout=60, what="the worker")
        assert proc.poll() is None, logged.read_text()
        return proc, marker

    yield start
    for proc, log in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()


@pytest.fixture
def world(sim_node):
    """One of each thing a URL can name (tests/url_conf.py's url_of): a node (legacy catalog), a job, a policy."""
    from dashboard.capacity import GiB
    from tests.url_conf import url_world

    return url_world(sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, policy_name="legacy"))


@pytest.fixture
def small_fleet(sim_node):
    """Node 1774 with its legacy catalog (stale), two current nodes in another farm, one of them down."""
    from dashboard.capacity import GiB

    sim_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=4242, farm_name="mitana", policy_name="legacy")
    sim_node(20, cru=8, mru=16 * GiB, sru=465 * GiB, farm_id=1, farm_name="freefarm")
    sim_node(21, cru=4, mru=8 * GiB, sru=250 * GiB, farm_id=1, farm_name="freefarm", status="down")
    return sim_node


@pytest.fixture
def failed_on_1774(sim_node):
    """The seventh slice of node 1774's legacy catalog, refused by ZOS for memory."""
    from tests.factories import MEMORY_ERROR, failed_deployment, sim_node_1774

    node = sim_node_1774(sim_node)
    raw = f"workload s1774_6 within deployment 7 failed with error: {MEMORY_ERROR}"
    return failed_deployment(node, index=6, raw_error=raw, cause="memory", needed=4294967296, usable=4187593113)


# --- RMB: the stand-in rmb-peer on the suite's Redis --------------------------------------------


@pytest.fixture
def rmb_redis_url(settings):
    """The suite's Redis as an rmb-peer's (the test is skipped without it), its request queue emptied."""
    import redis

    from dashboard.grid.rmb.client import REQUEST_QUEUE

    url = settings.CELERY_BROKER_URL
    if not url.startswith("redis://"):
        pytest.skip("needs the suite's Redis")
    redis.Redis.from_url(url).delete(REQUEST_QUEUE)
    return url


@contextmanager
def stand_in_peer_serving(grid, url: str, **options):
    """The stand-in rmb-peer (sim/grid/rmb_peer.py) answering for `grid`'s nodes on `url`, in a thread,
    stopped and joined after (a stopped peer still waiting on the queue would take the next test's call)."""
    import threading

    from sim.grid.rmb_peer import StandInPeer

    peer = StandInPeer(grid, url, stop=threading.Event(), **options)
    thread = threading.Thread(target=peer.serve_forever, daemon=True)
    thread.start()
    try:
        yield peer
    finally:
        peer.stop.set()
        thread.join(5)


@pytest.fixture
def rmb_nodes(tmp_path):
    """A simulated grid of three nodes the RMB tests ask: 2310 (one SSD, build v3.14.0-sim), 2311 (two half
    SSDs), 2312 (on standby: silent over RMB)."""
    from dashboard.capacity import GiB
    from sim.grid import SimulatedGrid

    one_ssd, half_ssd = int(931.5 * GiB), int(465.75 * GiB)
    grid = SimulatedGrid(tmp_path / "rmb-nodes.sqlite3")
    grid.add_node(2310, cru=8, mru=31 * GiB, sru=one_ssd, twin_id=3310, zos_build="v3.14.0-sim")
    grid.add_node(2311, cru=8, mru=31 * GiB, sru=2 * half_ssd, pools=[half_ssd, half_ssd], twin_id=3311)
    grid.add_node(2312, cru=8, mru=31 * GiB, sru=one_ssd, twin_id=3312, status="standby")
    return grid
