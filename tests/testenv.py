"""Loaded first (pytest.ini `-p tests.testenv`): the suite runs on PostgreSQL and Redis.

The database and the Redis db are derived from where this checkout lives, so two clones on one
machine can run `make test` at once without destroying each other's data:

    checkout /work/wt-loop -> sha1 of the path -> "267daab5..."
    DATABASE_URL      postgres://postgres@127.0.0.1:5432/slicedash_267daab5  (pytest-django creates test_slicedash_267daab5)
    CELERY_BROKER_URL redis://127.0.0.1:6379/<n>

Redis has only 16 databases, so a hash alone would give two clones the same one far too often.
n is the first of REDIS_DBS, starting from the one the hash picks, that is not claimed by another
checkout: a claim is the key CLAIM_KEY in that db holding the checkout's path, written on the first
run and renewed by every run, so a checkout keeps its db from run to run. A claim lapses only by time
(CLAIM_TTL after its last run), never because its path is missing here: CI runs its checkout
(/check/...) on this machine's Redis from a filesystem this session cannot see, and the other way
round, so a path that is absent may still be a suite running now. Without Redis (or with every db
claimed) the hash's choice is used as it is.

Where nothing answers on 127.0.0.1:5432 and DATABASE_URL is not set, the database is the checkout's
own embedded PostgreSQL (var/postgres, config.embedded_db), started for the run if it is not running.

The session header prints what this run uses, and either variable set in the environment wins, e.g.
DATABASE_URL=postgres://postgres@127.0.0.1:5432/mine CELERY_BROKER_URL=redis://127.0.0.1:6379/3 make test

Under pytest-xdist (`make check` runs `-n 2`) each worker is a process of its own that runs this
module again, with the controller's environment. pytest-django gives each worker its own test
database (test_slicedash_<hash>_gw0, _gw1, ...). The Redis db and VAR_DIR this module derived
(listed in DERIVED_MARK, so a value the person set is still never touched) are derived again per
worker: gw0 keeps the checkout's own claim, gw1 and later claim "<checkout>#gw1" and so on, so
two workers never purge or read each other's broker.
"""

import atexit
import hashlib
import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
# db 0 is the usual application db (README), 6 is `make bench`'s, 7 `make reliability`'s.
REDIS_DBS = tuple(n for n in range(1, 16) if n not in (6, 7))
CLAIM_KEY = "slicedash:test-suite-checkout"
# Longer than any suite run (make test: about 15 minutes here), short enough that a deleted clone's
# db comes back the same day.
CLAIM_TTL = 6 * 3600
# The variables this module set itself (not the person running the suite): an xdist worker derives them again.
DERIVED_MARK = "SLICEDASH_TESTENV_DERIVED"


def checkout_names(checkout: Path) -> tuple[str, int]:
    """(database name, the Redis db the hash picks first) for the suite run from this checkout."""
    digest = hashlib.sha1(str(checkout).encode()).hexdigest()
    return f"slicedash_{digest[:8]}", REDIS_DBS[int(digest, 16) % len(REDIS_DBS)]


def claim_owner(checkout: Path, worker: str = "") -> str:
    """Who a claim names: the checkout, or "<checkout>#gwN" for xdist's workers past the first."""
    return str(checkout) if worker in ("", "gw0") else f"{checkout}#{worker}"


def redis_db_claim(checkout: Path, first: int, *, worker: str = "", host: str = "127.0.0.1", port: int = 6379) -> int:
    """The first Redis db from `first` on that this checkout (or this xdist worker of it) has claimed
    or can claim (see above)."""
    me = claim_owner(checkout, worker)
    try:
        import redis

        # Fail fast when nothing listens: the client would retry with back-off first.
        socket.create_connection((host, port), timeout=2).close()
        start = REDIS_DBS.index(first)
        for n in REDIS_DBS[start:] + REDIS_DBS[:start]:
            client = redis.Redis(host=host, port=port, db=n, socket_timeout=2, socket_connect_timeout=2)
            if client.set(CLAIM_KEY, me, nx=True, ex=CLAIM_TTL):
                return n
            if (client.get(CLAIM_KEY) or b"").decode() == me:
                client.expire(CLAIM_KEY, CLAIM_TTL)
                return n
            # Another checkout's: kept until its time runs out (a claim from before claims had
            # one gets it now).
            client.expire(CLAIM_KEY, CLAIM_TTL, nx=True)
    except Exception:  # Redis down or missing: the broker tests will say so themselves.
        pass
    # Without Redis, workers still take distinct dbs (gw0 the hash's choice, gw1 the next, ...).
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    return REDIS_DBS[(REDIS_DBS.index(first) + index) % len(REDIS_DBS)]


DATABASE_NAME, REDIS_DB_FIRST = checkout_names(CHECKOUT)
# Set in xdist's workers ("gw0", "gw1", ...); empty in a plain run and in xdist's controller.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_derived = set(filter(None, os.environ.get(DERIVED_MARK, "").split(",")))
if WORKER:  # derive again what the controller derived; keep what the person set
    for _name in _derived & {"CELERY_BROKER_URL", "VAR_DIR"}:
        del os.environ[_name]


def postgresql_answers(host: str = "127.0.0.1", port: int = 5432) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def embedded_database_url() -> str:
    """The checkout's own embedded PostgreSQL (var/postgres, as `make run` uses), started for this run
    and stopped when the run ends if this run started it."""

    from config.embedded_db import EmbeddedDb

    db = EmbeddedDb.of(CHECKOUT / "var")
    if db.start(database="postgres"):
        atexit.register(db.stop)
    return db.url(DATABASE_NAME)


# pytest-django adds "test_" to this name, and "_gwN" in an xdist worker. Without a PostgreSQL on
# 127.0.0.1:5432 the checkout's embedded one serves (xdist's workers inherit the controller's URL).
if "DATABASE_URL" not in os.environ:
    os.environ["DATABASE_URL"] = (
        f"postgres://postgres@127.0.0.1:5432/{DATABASE_NAME}" if postgresql_answers() else embedded_database_url()
    )
if "CELERY_BROKER_URL" not in os.environ:
    os.environ["CELERY_BROKER_URL"] = (
        f"redis://127.0.0.1:6379/{redis_db_claim(CHECKOUT, REDIS_DB_FIRST, worker=WORKER)}"
    )
    _derived.add("CELERY_BROKER_URL")
os.environ.setdefault("DEBUG", "true")
os.environ.setdefault("GRID_BACKEND", "simulator")
if "VAR_DIR" not in os.environ:
    os.environ["VAR_DIR"] = tempfile.mkdtemp(prefix=f"slicedash-test-{WORKER}-" if WORKER else "slicedash-test-")
    _derived.add("VAR_DIR")
    # A run leaves nothing behind in /tmp: this process made the folder, so it removes it on its way out
    # (after pytest has stopped the workers and servers its tests started there).
    atexit.register(shutil.rmtree, os.environ["VAR_DIR"], ignore_errors=True)
os.environ[DERIVED_MARK] = ",".join(sorted(_derived))
# Tests exercise retries; the production back-off would only make them slow.
os.environ.setdefault("GRID_BACKOFF", "0.01")


def pytest_report_header(config):
    # In xdist's controller: the workers' own dbs are suffixed (database) or claimed again (broker).
    return [
        f"database: {os.environ['DATABASE_URL']} (pytest-django prefixes test_)",
        f"broker: {os.environ['CELERY_BROKER_URL']}   (both derived from {CHECKOUT} unless set in the environment)",
    ]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """pytest's own folders (tmp_path, tmp_path_factory) in a folder of this run's, removed at exit,
    rather than /tmp/pytest-of-<user>, where pytest keeps the last three runs'. `--basetemp=DIR` keeps
    them in DIR instead (to look at a failure's files); xdist hands each worker a folder inside its
    controller's. The name stays short: a test's folder must hold a unix socket's path (107 bytes)."""
    if config.option.basetemp is None:
        run = tempfile.mkdtemp(prefix="pytest-")
        atexit.register(shutil.rmtree, run, ignore_errors=True)
        config.option.basetemp = os.path.join(run, "b")
        # Every process the run starts (xdist's workers, Celery workers, servers) inherits a TMPDIR in the
        # run's folder too: what a process killed on purpose cannot clean up (a SIGKILLed worker's
        # multiprocessing "pymp-" folder) goes with the run instead of staying in /tmp (issue 46). Beside
        # the basetemp, not in it: pytest empties a given basetemp when it first makes a tmp_path.
        os.environ["TMPDIR"] = os.path.join(run, "tmp")
        os.mkdir(os.environ["TMPDIR"])
        tempfile.tempdir = None  # asked again: this process's own temporary files go there as well
