"""The suite's own set-up: names derived from the checkout (tests/testenv.py) and the banner that
says browser tests were skipped (tests/conftest.py)."""

import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis

from tests.conftest import browser_skips
from tests.support import wait_until
from tests.testenv import CHECKOUT, CLAIM_KEY, CLAIM_TTL, REDIS_DBS, checkout_names, claim_owner, redis_db_claim


@pytest.fixture
def scratch_redis(tmp_path):
    """A redis-server of this test's own, so claims never touch the machine's Redis."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, socket_connect_timeout=0.5)

    def answers() -> bool:
        try:
            return client.ping()
        except redis.ConnectionError:
            return False

    wait_until(answers, timeout=5, what="our redis-server to answer")
    yield port
    server.kill()
    server.wait(10)


def test_it_derives_the_same_names_for_the_same_checkout():
    assert checkout_names(Path("/work/clone-a")) == checkout_names(Path("/work/clone-a"))


def test_it_derives_another_database_for_another_checkout():
    (db_a, _), (db_b, _) = checkout_names(Path("/work/clone-a")), checkout_names(Path("/work/clone-b"))
    assert db_a != db_b and db_a.startswith("slicedash_") and len(db_a) == len("slicedash_") + 8


def test_it_never_picks_the_application_bench_or_reliability_redis_db():
    picked = {checkout_names(Path(f"/work/clone-{n}"))[1] for n in range(200)}
    assert picked <= set(REDIS_DBS) and not picked & {0, 6, 7}


def test_it_gives_two_checkouts_that_hash_alike_two_redis_dbs(tmp_path, scratch_redis):
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir(), other.mkdir()
    first = redis_db_claim(one, REDIS_DBS[0], port=scratch_redis)
    second = redis_db_claim(other, REDIS_DBS[0], port=scratch_redis)
    assert (first, second) == (REDIS_DBS[0], REDIS_DBS[1])


def test_it_keeps_a_checkouts_redis_db_from_run_to_run(tmp_path, scratch_redis):
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir(), other.mkdir()
    redis_db_claim(one, REDIS_DBS[0], port=scratch_redis)
    redis_db_claim(other, REDIS_DBS[0], port=scratch_redis)
    assert redis_db_claim(other, REDIS_DBS[0], port=scratch_redis) == REDIS_DBS[1]


def test_a_claim_whose_checkout_this_machine_cannot_see_is_kept_until_its_time_runs_out(tmp_path, scratch_redis):
    # CI's checkout (/check/...) lives in a filesystem this session cannot see, on the same Redis.
    elsewhere = tmp_path / "not-here"
    client = redis.Redis(port=scratch_redis, db=REDIS_DBS[0])
    client.set(CLAIM_KEY, claim_owner(elsewhere, "gw1"))
    mine = tmp_path / "mine"
    mine.mkdir()
    assert redis_db_claim(mine, REDIS_DBS[0], port=scratch_redis) == REDIS_DBS[1]
    assert client.get(CLAIM_KEY).decode() == claim_owner(elsewhere, "gw1")
    assert 0 < client.ttl(CLAIM_KEY) <= CLAIM_TTL  # a claim from before claims lapsed got its time
    client.delete(CLAIM_KEY)  # its time ran out
    assert redis_db_claim(mine, REDIS_DBS[0], port=scratch_redis) == REDIS_DBS[0]


def test_each_run_renews_its_claim(tmp_path, scratch_redis):
    mine = tmp_path / "mine"
    mine.mkdir()
    client = redis.Redis(port=scratch_redis, db=REDIS_DBS[0])
    assert redis_db_claim(mine, REDIS_DBS[0], port=scratch_redis) == REDIS_DBS[0]
    client.expire(CLAIM_KEY, 5)
    assert redis_db_claim(mine, REDIS_DBS[0], port=scratch_redis) == REDIS_DBS[0]
    assert client.ttl(CLAIM_KEY) > 5


def test_it_falls_back_to_the_hashs_choice_without_redis(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    assert redis_db_claim(tmp_path, REDIS_DBS[3], port=closed) == REDIS_DBS[3]


def skipped(reason: str, *marks: str):
    return SimpleNamespace(keywords={mark: 1 for mark in marks}, longrepr=("test_x.py", 1, f"Skipped: {reason}"))


def test_it_counts_only_the_browser_tests_among_the_skipped():
    reports = [skipped("/usr/bin/chromium is missing", "browser"), skipped("no grid", "slow")]
    assert browser_skips(reports) == ["/usr/bin/chromium is missing"]


def test_it_gives_each_xdist_worker_a_redis_db_of_its_own(tmp_path, scratch_redis):
    checkout = tmp_path / "clone"
    checkout.mkdir()
    plain = redis_db_claim(checkout, REDIS_DBS[0], port=scratch_redis)
    workers = [redis_db_claim(checkout, REDIS_DBS[0], worker=f"gw{n}", port=scratch_redis) for n in range(3)]
    assert workers[0] == plain and len(set(workers)) == 3  # gw0 is the checkout's own db


def test_a_workers_db_stays_its_own_from_run_to_run(tmp_path, scratch_redis):
    checkout = tmp_path / "clone"
    checkout.mkdir()
    first = redis_db_claim(checkout, REDIS_DBS[0], worker="gw1", port=scratch_redis)
    assert redis_db_claim(checkout, REDIS_DBS[0], worker="gw1", port=scratch_redis) == first
    assert redis.Redis(port=scratch_redis, db=first).get(CLAIM_KEY).decode() == claim_owner(checkout, "gw1")


def test_workers_without_redis_still_take_distinct_dbs(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    picked = [redis_db_claim(tmp_path, REDIS_DBS[3], worker=w, port=closed) for w in ("", "gw0", "gw1")]
    assert picked == [REDIS_DBS[3], REDIS_DBS[3], REDIS_DBS[4]]


@pytest.mark.django_db
def test_an_xdist_worker_runs_on_a_database_and_broker_of_its_own():
    """Under `make check` (-n 2) this test runs in a worker: its test database has the worker's
    suffix and, when tests/testenv.py chose the broker, the claim on its Redis db is the worker's."""
    import os

    from django.db import connection

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        pytest.skip("not under pytest-xdist")
    assert connection.settings_dict["NAME"].endswith(f"_{worker}")
    if "CELERY_BROKER_URL" in os.environ.get("SLICEDASH_TESTENV_DERIVED", "").split(","):
        db = int(os.environ["CELERY_BROKER_URL"].rsplit("/", 1)[1])
        owner = redis.Redis(db=db).get(CLAIM_KEY)
        if owner is not None and owner.decode() != claim_owner(CHECKOUT, worker):
            claims = [redis.Redis(db=n).get(CLAIM_KEY) for n in REDIS_DBS]
            if all(claims):  # testenv's documented fallback: the hash's choice, shared
                pytest.skip(f"every Redis db of {REDIS_DBS} is claimed by another checkout on this machine")
        assert owner is not None and owner.decode() == claim_owner(CHECKOUT, worker)
