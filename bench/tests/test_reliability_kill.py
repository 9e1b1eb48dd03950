"""The kill loop, short: 5 SIGKILLs at random moments during re-registers of 3 nodes, then every invariant.

tests/jobs/test_jobs_kill.py kills a worker at each named point of one job; this runs the long loop
of bench/reliability/kill_loop.py (100 kills, `make reliability`) at suite size: random moments,
whole worker or pool child, several nodes with deployed and rented slices. Instead of waiting an
hour-long visibility timeout it restores the unacknowledged messages at the end, as the Redis
transport does once the timeout has passed.
"""

import os
import random

import pytest
from django.db import connection

from bench.reliability.kill_loop import HEARTBEAT_TIMEOUT, Worker, kill_loop, seed_fleet, serve_slow_grid
from dashboard.models import Job, Slice
from sim.grid import SimulatedGrid
from tests.invariants import figures_violations, half_catalog_violations, occupied_slices, occupied_violations
from tests.killed_workers import redeliver_unacked


@pytest.fixture
def slow_grid(simgrid_path):
    grid = SimulatedGrid(simgrid_path)
    server, url = serve_slow_grid(grid, 0.1)
    yield grid, url
    server.shutdown()
    server.server_close()


@pytest.fixture
def killable_worker(tmp_path, slow_grid, broker_purged, settings):
    """A prefork worker in its own process (and session) on this test's database and broker."""
    settings.JOB_HEARTBEAT_TIMEOUT = HEARTBEAT_TIMEOUT  # the reaper here, and the worker below, agree
    db = connection.settings_dict
    worker = Worker(
        env=os.environ
        | {
            "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "CELERY_BROKER_URL": broker_purged.conf.broker_url,
            "GRID_BACKEND": "gridproxy",
            "GRID_PROXY_URL": slow_grid[1],
            "VAR_DIR": str(tmp_path / "var"),
            "JOB_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT),
            "CELERY_SKIP_CHECKS": "1",
        },
        logdir=tmp_path,
    )
    worker.start()
    yield worker
    worker.stop()


@pytest.mark.worker
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_keeps_every_invariant_through_5_random_sigkills(slow_grid, killable_worker, broker_purged):
    rng = random.Random(1774)
    policies = seed_fleet(grid=slow_grid[0], nodes=3, rng=rng)
    report = kill_loop(
        worker=killable_worker,
        kills=5,
        rng=rng,
        policies=policies,
        log=lambda line: None,
        redeliver=lambda: redeliver_unacked(broker_purged),
        settle_timeout=60,
    )
    assert report["violations"] == []
    assert sum(report["job_outcomes"].values()) == Job.objects.count() == 8  # 3 warm-up jobs and 5 killed ones


# --- the checks can fail -------------------------------------------------------------------


@pytest.fixture
def seeded(simgrid_path):
    return seed_fleet(grid=SimulatedGrid(simgrid_path), nodes=3, rng=random.Random(7))


@pytest.mark.django_db
def test_it_passes_a_fresh_fleet(seeded):
    assert half_catalog_violations(seeded) == []


@pytest.mark.django_db
def test_it_notices_a_half_swapped_catalog(seeded):
    free = Slice.objects.filter(state=Slice.State.FREE).order_by("node_id", "index")
    free.filter(pk=free[0].pk).update(mru=2 * 1024**3, generation=2)
    assert any("generations" in p for p in half_catalog_violations(seeded))


@pytest.mark.django_db
def test_it_passes_the_stored_figures_of_a_fresh_fleet(seeded):
    assert figures_violations() == []


@pytest.mark.django_db
def test_it_notices_stored_figures_out_of_date(seeded):
    Slice.objects.filter(state=Slice.State.FREE).order_by("node_id", "index").first().delete()
    assert any("slices_free" in p for p in figures_violations())


@pytest.mark.django_db
def test_it_notices_a_missing_free_slice(seeded):
    Slice.objects.filter(state=Slice.State.FREE).order_by("node_id", "index").first().delete()
    assert any("free slices, but" in p for p in half_catalog_violations(seeded))


@pytest.mark.django_db
def test_it_notices_a_resized_or_lost_rented_slice(seeded):
    before = occupied_slices()
    rented = Slice.objects.filter(state=Slice.State.RENTED).order_by("pk")
    Slice.objects.filter(pk=rented[0].pk).update(sru=1)
    rented[1].delete()
    assert len(occupied_violations(before, occupied_slices())) == 2
