"""Shared fixtures. Append new ones; keep the others'."""

import pytest


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

    sim_node(node_id, cru=.., mru=.., sru=.., policy_name=None, register=True, **add_node options) -> Node | None
    """
    from dashboard.grid.simulator import SimulatedGrid
    from dashboard.services.catalog import node_register

    grid = SimulatedGrid(simgrid_path)

    def add(node_id, *, policy_name=None, register=True, **options):
        grid.add_node(node_id, **options)
        if not register:
            return None
        live = grid.node(node_id)
        return node_register(
            node_id=node_id,
            total=live.total,
            farm_id=live.farm_id,
            farm_name=live.farm_name,
            status=live.status,
            pools=options.get("pools"),
            policy_name=policy_name,
            used=live.used,
        )

    add.grid = grid
    return add


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
    """role_user("admins") / role_user("support"): a user in that role's group (migrations 0002_roles
    and 0004_harden_permissions); role_user(None): a signed-in user in no group.

    A transactional test before this one may have flushed the groups; they are made again by the
    migrations' own functions, so the permissions are exactly what production gets.
    """
    import importlib

    from django.apps import apps
    from django.contrib.auth.models import Group

    def make(role: str | None, *, username: str | None = None, password: str = "not-a-real-password-1774", **fields):
        if role is None:
            return django_user_model.objects.create_user(username=username or "nobody", password=password, **fields)
        if not Group.objects.filter(name=role).exists():
            importlib.import_module("dashboard.migrations.0002_roles").create_roles(apps, None)
            importlib.import_module("dashboard.migrations.0004_harden_permissions").grant_view_permissions(apps, None)
        user = django_user_model.objects.create_user(username=username or f"{role}-{Group.objects.count()}-user", password=password, **fields)
        user.groups.add(Group.objects.get(name=role))
        return user

    return make


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

    8 cores, 31 GiB, 931.5 GiB on the simulated grid; registered with policy "legacy" (7 slices
    of 4 GiB / 133 GiB); slice 0 deployed through the simulator's deploy_vm and marked deployed.
    """
    from dashboard.capacity import GiB
    from dashboard.grid.simulator import SimulatedGrid
    from dashboard.models import Slice
    from dashboard.services.catalog import node_register
    from dashboard.services.figures import figures_refresh

    grid = SimulatedGrid(simgrid_path)
    live = grid.add_node(1774, cru=8, mru=31 * GiB, sru=int(931.5 * GiB), farm_id=1, farm_name="farm one")
    node = node_register(
        node_id=1774, total=live.total, farm_id=1, farm_name="farm one", policy_name="legacy", used=live.used
    )
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
    from dashboard.celery import app

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

    monkeypatch.setenv("CELERY_SKIP_CHECKS", "1")
    with start_worker(broker_purged, pool="solo", perform_ping_check=False, shutdown_timeout=30) as worker:
        yield worker


@pytest.fixture
def job_finished():
    """job_finished(job_or_id, timeout=30) -> Job: polls the row until the job is no longer active."""
    import time

    from dashboard.models import Job

    def wait(job, timeout: float = 30.0):
        job_id = getattr(job, "pk", job)
        deadline = time.monotonic() + timeout
        while True:
            current = Job.objects.select_related("node").get(pk=job_id)
            if not current.is_active:
                return current
            if time.monotonic() > deadline:
                raise AssertionError(f"job #{job_id} still {current.state} after {timeout} s (step: {current.step!r})")
            time.sleep(0.05)

    return wait


@pytest.fixture
def legacy_fleet(simgrid_path):
    """legacy_fleet(count, first=1, farm_id=1) -> [Node]: nodes on the simulated grid, registered with
    the legacy carve (stale under the fleet default), in one bulk insert per table.
    """
    from dashboard.capacity import GiB, PROFILES, carve
    from dashboard.grid.simulator import SimulatedGrid
    from dashboard.models import Node, Slice
    from dashboard.services.figures import figures_refresh
    from dashboard.services.catalog import catalog_slices

    grid = SimulatedGrid(simgrid_path)

    def make(count: int, *, first: int = 1, farm_id: int = 1, mru: int = 16 * GiB, sru: int = 500 * GiB):
        legacy = PROFILES["legacy"]
        nodes = []
        for node_id in range(first, first + count):
            live = grid.add_node(node_id, cru=8, mru=mru, sru=sru, farm_id=farm_id)
            cut = carve(live.total, legacy)
            nodes.append(Node(
                node_id=node_id, farm_id=farm_id, status="up", total_cru=8, total_mru=mru, total_sru=sru,
                carved_policy_name=legacy.name, carved_policy_version=legacy.version,
                carved_slice_sru=cut.slice.sru, carved_deployable=cut.slices,
            ))
        nodes = Node.objects.bulk_create(nodes)
        Slice.objects.bulk_create(
            s for node in nodes
            for s in catalog_slices(node=node, carve=carve(node.total, legacy), start_index=0, generation=1)
        )
        figures_refresh([n.pk for n in nodes])
        return nodes

    make.grid = grid
    return make


# --- end of the JOBS helper's fixtures ---------------------------------------------------
