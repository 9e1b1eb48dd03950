"""Faults around a job: the broker down or hung, the grid slow or failing, the database connection cut.

Each case ends with a clear job state (succeeded, or failed with a reason a person can act on)
and nothing lost: the catalog is entirely the old one or entirely the new one, and the deployed
slice of node 1774 is the same row.

The broker here is this test's own redis-server on a free loopback port, started and stopped by
the test (never the machine's shared Redis). The Celery app is pointed at it for the test and
pointed back afterwards. The grid is a loopback HTTP server answering like the Grid Proxy
(tests/gridproxy_canned.py), slow or failing on demand.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from config.celery import app as celery_app
from dashboard.jobs.services.job_reaper import jobs_reap
from dashboard.jobs.services.jobs import job_request
from dashboard.models import Job, Slice
from tests.gridproxy_canned import Answer, sample, start_canned_proxy
from tests.support import wait_until

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def catalog(node) -> list[tuple]:
    return list(Slice.objects.filter(node=node).order_by("index").values_list("pk", "index", "mru", "sru", "state"))


# --- our own Redis ---------------------------------------------------------------------------


class OwnRedis:
    """A redis-server of this test's own, on a free loopback port; stop/start/pause it at will."""

    def __init__(self, workdir: Path, *, persistent: bool = False):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.workdir = workdir
        self.persistent = persistent
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
            if self.persistent
            else ["--appendonly", "no", "--save", ""]
        )
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir), *persistence],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        wait_until(lambda: self._pings(client), timeout=10, what="our redis-server to answer")

    def stop(self) -> None:
        """As an operator's restart does: SIGTERM, and wait for it to be gone."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def pause(self) -> None:
        """Hung, not gone: connections stay open and nothing answers (a stuck host, a full disk)."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def queued(self) -> int:
        return redis.Redis(port=self.port).llen("celery")

    @staticmethod
    def _pings(client) -> bool:
        try:
            return client.ping()
        except redis.exceptions.ConnectionError:
            return False


@contextmanager
def celery_pointed_at(url: str):
    """The Celery app (and so job_request's enqueue, and live_worker) uses `url` as its broker inside the block.

    Celery reads CELERY_BROKER_URL from the environment before its configuration, so both change.
    """
    saved_env, saved_conf = os.environ.get("CELERY_BROKER_URL"), celery_app.conf.broker_url

    def reset_pools():
        # What Celery itself does after a fork (Celery._after_fork): the next send builds its
        # pools from the configured URL. kombu keeps one pool per URL, so none is closed here.
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    os.environ["CELERY_BROKER_URL"] = celery_app.conf.broker_url = url
    reset_pools()
    try:
        yield celery_app
    finally:
        celery_app.conf.broker_url = saved_conf
        if saved_env is None:
            os.environ.pop("CELERY_BROKER_URL", None)
        else:
            os.environ["CELERY_BROKER_URL"] = saved_env
        reset_pools()


@pytest.fixture
def own_redis(tmp_path):
    server = OwnRedis(tmp_path)
    server.start()
    with celery_pointed_at(server.url):
        yield server
    if server.proc and server.proc.poll() is None:
        server.resume()
        server.proc.kill()
        server.proc.wait(10)


@pytest.fixture
def own_worker(own_redis, request):
    """A real worker (solo pool, in a thread) consuming our own Redis."""
    return request.getfixturevalue("live_worker")


@pytest.fixture
def admin_client(role_user):
    client = Client()
    client.force_login(role_user("admins", username="ada", password=None))
    return client


# --- the broker ------------------------------------------------------------------------------


@pytest.mark.slow  # a wall-clock assertion
def test_it_fails_the_job_at_once_when_the_broker_is_down_at_click_time(legacy_node_1774, own_redis, admin_client):
    before = catalog(legacy_node_1774)
    own_redis.stop()
    started = time.monotonic()
    response = admin_client.post(reverse("node-reregister", args=[1774]))
    job = Job.objects.get()
    assert (response.status_code, job.state) == (302, Job.State.FAILED)
    assert job.error.startswith("could not queue the job: ") and str(own_redis.port) in job.error
    assert time.monotonic() - started < 10 and catalog(legacy_node_1774) == before


def test_it_shows_why_on_the_job_page_and_takes_the_next_click_once_the_broker_is_back(
    legacy_node_1774, own_redis, admin_client
):
    own_redis.stop()
    failed = admin_client.post(reverse("node-reregister", args=[1774]))
    assert b"could not queue the job" in admin_client.get(failed["Location"]).content
    own_redis.start()
    admin_client.post(reverse("node-reregister", args=[1774]))
    assert list(Job.objects.order_by("pk").values_list("state", flat=True)) == [Job.State.FAILED, Job.State.QUEUED]
    assert own_redis.queued() == 1


@pytest.mark.parametrize("url", ["/nodes/1774/reregister/", "/fleet/reregister-stale/"])
def test_it_says_could_not_start_and_not_started_when_the_broker_is_down(
    legacy_node_1774, own_redis, admin_client, url
):
    own_redis.stop()
    page = admin_client.post(url, follow=True).content.decode()
    assert "Could not start" in page and "could not queue the job" in page
    assert "Started " not in page


@pytest.mark.slow
def test_it_answers_a_click_within_seconds_when_the_broker_hangs(legacy_node_1774, own_redis, admin_client):
    own_redis.pause()
    answered = threading.Event()

    def click():
        try:
            admin_client.post(reverse("node-reregister", args=[1774]))
            answered.set()
        finally:
            connection.close()

    clicker = threading.Thread(target=click, daemon=True)
    clicker.start()
    try:
        assert answered.wait(15), "the click was still waiting for the broker after 15 s"
        assert Job.objects.get().state == Job.State.FAILED
    finally:
        own_redis.resume()
        clicker.join(30)


def test_it_finishes_a_running_job_when_the_broker_restarts_meanwhile(
    legacy_node_1774, own_redis, own_worker, job_finished, monkeypatch, tmp_path, settings
):
    marker = tmp_path / "paused"
    settings.DEBUG = True  # the pause hook works only then (pytest-django turns DEBUG off)
    monkeypatch.setenv("JOB_TEST_PAUSE", "planned:2")
    monkeypatch.setenv("JOB_TEST_PAUSE_MARKER", str(marker))
    job = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job
    wait_until(marker.exists, timeout=30, what="the worker to be mid-job")
    own_redis.stop()
    own_redis.start()  # empty: nothing persisted
    job = job_finished(job, timeout=30)
    assert (job.state, job.result["after"]["slices"]) == (Job.State.SUCCEEDED, 6)
    assert len(catalog(legacy_node_1774)) == 6


def test_it_runs_the_next_job_once_the_worker_has_reconnected(legacy_node_1774, own_redis, own_worker, job_finished):
    own_redis.stop()
    own_redis.start()
    job = job_finished(job_request(kind=Job.Kind.PRECHECK, node=legacy_node_1774).job, timeout=60)
    assert job.state == Job.State.SUCCEEDED


def test_it_runs_a_queued_job_after_a_restart_when_redis_keeps_its_data(
    legacy_node_1774, tmp_path, broker_purged, job_finished, request
):
    server = OwnRedis(tmp_path, persistent=True)
    server.start()
    try:
        with celery_pointed_at(server.url):
            job = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job
            server.stop()
            server.start()  # the append-only file brings the message back
            request.getfixturevalue("live_worker")
            job = job_finished(job, timeout=60)
    finally:
        server.stop()
    assert (job.state, len(catalog(legacy_node_1774))) == (Job.State.SUCCEEDED, 6)


def test_it_reaps_a_queued_job_whose_message_an_empty_restart_lost(legacy_node_1774, own_redis, settings):
    before = catalog(legacy_node_1774)
    job = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job
    own_redis.stop()
    own_redis.start()  # no persistence: the message is gone, the row says queued
    assert own_redis.queued() == 0
    later = timezone.now() + timedelta(seconds=getattr(settings, "JOB_QUEUED_TIMEOUT", 15 * 60) + 1)
    assert jobs_reap(now=later) == 1
    job.refresh_from_db()
    assert job.state == Job.State.FAILED and job.error.startswith("never started: ")
    assert catalog(legacy_node_1774) == before


def test_it_sends_again_the_message_an_empty_restart_lost(legacy_node_1774, own_redis, settings):
    job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    own_redis.stop()
    own_redis.start()  # no persistence: the message is gone, the row says queued
    assert jobs_reap(now=timezone.now() + timedelta(seconds=settings.JOB_RESEND_AFTER + 1)) == 0
    assert own_redis.queued() == 1


def test_it_finishes_a_job_whose_lost_message_the_reaper_sent_again(
    legacy_node_1774, own_redis, settings, request, job_finished
):
    job = job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job
    own_redis.stop()
    own_redis.start()
    request.getfixturevalue("live_worker")  # idle: the queue it watches is empty
    jobs_reap(now=timezone.now() + timedelta(seconds=settings.JOB_RESEND_AFTER + 1))
    job = job_finished(job, timeout=60)
    assert (job.state, len(catalog(legacy_node_1774))) == (Job.State.SUCCEEDED, 6)


def test_it_sends_a_queued_message_again_only_once_per_interval(legacy_node_1774, own_redis, settings):
    job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774)
    later = timezone.now() + timedelta(seconds=settings.JOB_RESEND_AFTER + 1)
    jobs_reap(now=later)
    jobs_reap(now=later + timedelta(seconds=1))
    assert own_redis.queued() == 2  # the original and one re-send


# --- the grid ------------------------------------------------------------------------------


@pytest.fixture
def proxy(settings):
    """The Grid Proxy client (as configured by settings) against a loopback canned proxy."""
    canned, server = start_canned_proxy()
    settings.GRID_BACKEND = "gridproxy"
    settings.GRID_PROXY_URL = canned.url
    settings.GRID_RETRIES = 1
    settings.GRID_BACKOFF = 0.01
    settings.GRID_READ_TIMEOUT = 0.3
    settings.GRID_CONNECT_TIMEOUT = 0.3
    yield canned
    server.shutdown()
    server.server_close()


@pytest.mark.slow  # a wall-clock assertion
def test_it_fails_the_job_naming_the_timeout_when_the_grid_is_slower_than_it(
    legacy_node_1774, proxy, live_worker, job_finished
):
    proxy.answer("/nodes/1774", Answer(body=sample("node-1774.json"), delay=1.5))
    before = catalog(legacy_node_1774)
    job = job_finished(job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job, timeout=60)
    assert job.state == Job.State.FAILED and "timed out waiting for the answer (read timeout 0.3s)" in job.error
    assert catalog(legacy_node_1774) == before
    assert job.finished_at - job.started_at < timedelta(seconds=10)


def test_it_fails_the_job_with_the_status_when_the_grid_keeps_failing(
    legacy_node_1774, proxy, live_worker, job_finished
):
    proxy.answer("/nodes/1774", Answer(500, {"error": "database is down"}))
    before = catalog(legacy_node_1774)
    job = job_finished(job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job, timeout=60)
    assert job.state == Job.State.FAILED and "answered 500" in job.error and "database is down" in job.error
    assert catalog(legacy_node_1774) == before


def test_it_completes_the_job_when_the_grid_recovers_within_the_retries(
    legacy_node_1774, proxy, live_worker, job_finished
):
    down = Answer(503, {"error": "restarting"})
    proxy.answer("/nodes/1774", down, down, down, Answer(body=sample("node-1774.json")))
    job = job_finished(job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job, timeout=60)
    assert (job.state, job.result["after"]["slices"]) == (Job.State.SUCCEEDED, 6)
    assert proxy.hits["/nodes/1774"] == 4


# --- the database ----------------------------------------------------------------------------


def worker_sessions_cut() -> int:
    """pg_terminate_backend every other session on this test database: the worker's (ours alone)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def cut_the_worker_at(point: str, node, *, monkeypatch, tmp_path, settings) -> Job:
    """Hold the worker at `point` (JOB_TEST_PAUSE), terminate its database session, let it go on."""
    marker = tmp_path / "paused"
    settings.DEBUG = True  # the pause hook works only then (pytest-django turns DEBUG off)
    monkeypatch.setenv("JOB_TEST_PAUSE", f"{point}:1")
    monkeypatch.setenv("JOB_TEST_PAUSE_MARKER", str(marker))
    job = job_request(kind=Job.Kind.REREGISTER, node=node).job
    wait_until(marker.exists, timeout=30, what=f"the worker to reach {point!r}")
    assert worker_sessions_cut() >= 1
    monkeypatch.delenv("JOB_TEST_PAUSE")
    return job


def test_it_fails_the_job_at_once_when_the_connection_drops_inside_the_swap(
    legacy_node_1774, live_worker, job_finished, monkeypatch, tmp_path, settings
):
    old = catalog(legacy_node_1774)
    job = cut_the_worker_at("swapped", legacy_node_1774, monkeypatch=monkeypatch, tmp_path=tmp_path, settings=settings)
    job = job_finished(job, timeout=30)
    assert job.state == Job.State.FAILED and "terminating connection due to administrator command" in job.error
    assert catalog(legacy_node_1774) == old  # PostgreSQL rolled the swap back: entirely the old catalog


def test_it_runs_the_next_job_on_a_fresh_connection_after_a_cut(
    legacy_node_1774, live_worker, job_finished, monkeypatch, tmp_path, settings
):
    job_finished(
        cut_the_worker_at("swapped", legacy_node_1774, monkeypatch=monkeypatch, tmp_path=tmp_path, settings=settings)
    )
    retry = job_finished(job_request(kind=Job.Kind.REREGISTER, node=legacy_node_1774).job, timeout=30)
    assert retry.state == Job.State.SUCCEEDED and len(catalog(legacy_node_1774)) == 6


def test_it_fails_the_job_at_once_when_the_connection_drops_between_steps(
    legacy_node_1774, live_worker, job_finished, monkeypatch, tmp_path, settings
):
    old = catalog(legacy_node_1774)
    job = cut_the_worker_at("planned", legacy_node_1774, monkeypatch=monkeypatch, tmp_path=tmp_path, settings=settings)
    job = job_finished(job, timeout=15)  # not left running for the reaper (JOB_HEARTBEAT_TIMEOUT)
    assert job.state == Job.State.FAILED and "terminating connection due to administrator command" in job.error
    assert catalog(legacy_node_1774) == old
