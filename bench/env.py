"""The bench's own world: its database, Redis db, simulator file and settings, all on loopback.

The bench never touches the developer's database: it creates (and drops) the one named by
BENCH_DATABASE_URL, default slicedash_bench, and refuses a name without "bench" in it,
since it drops that database. Everything it talks to must be on loopback.
"""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/slicedash_bench"
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/6"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class BenchSetupError(RuntimeError):
    """The bench cannot run as asked; the message says what to change."""


@dataclass(frozen=True)
class BenchEnv:
    database_url: str
    database_name: str
    broker_url: str
    work_dir: Path
    secret_key: str
    # /metrics answers 404 without it; the bench scrapes it as Prometheus would, with this bearer token.
    metrics_token: str = field(default_factory=lambda: "bench-metrics-" + secrets.token_urlsafe(24))

    @property
    def simgrid_path(self) -> Path:
        return self.work_dir / "simgrid.sqlite3"

    def settings_env(self, *, web: bool) -> dict[str, str]:
        """Production-like settings: DEBUG off, a real key, the bench's database, broker and grid."""
        env = {
            "DATABASE_URL": self.database_url,
            "CELERY_BROKER_URL": self.broker_url,
            "DEBUG": "false",
            "SECRET_KEY": self.secret_key,
            "ALLOWED_HOSTS": "testserver,127.0.0.1,localhost",
            # The test client speaks plain HTTP; a TLS proxy would sit in front in production.
            "SECURE_SSL_REDIRECT": "false",
            "GRID_BACKEND": "simulator",
            "SIMGRID_PATH": str(self.simgrid_path),
            "VAR_DIR": str(self.work_dir),
            "STATIC_ROOT": str(self.work_dir / "static"),
            "LOG_LEVEL": "WARNING",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "METRICS_TOKEN": self.metrics_token,
            # The per-token throttle stays on (its cost is part of every API call) but never
            # refuses: the bench times answers, not 429s.
            "API_THROTTLE_RATE": "1000000/m",
        }
        if web:
            # A served dashboard keeps its database connections (gunicorn with DB_CONN_MAX_AGE);
            # the worker keeps the app's default so its figures are what `make run` gives.
            env["DB_CONN_MAX_AGE"] = "600"
        return env

    def child_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("DB_CONN_MAX_AGE", "JOB_TEST_PAUSE")}
        env.update(self.settings_env(web=False))
        env["PYTHONPATH"] = str(REPO)
        return env


def bench_env(work_dir: Path) -> BenchEnv:
    database_url = os.environ.get("BENCH_DATABASE_URL") or DEFAULT_DATABASE_URL
    broker_url = os.environ.get("BENCH_BROKER_URL") or DEFAULT_BROKER_URL
    db = urlsplit(database_url)
    if db.scheme not in ("postgres", "postgresql"):
        raise BenchSetupError(f"BENCH_DATABASE_URL must be a postgres:// URL, not {database_url!r}")
    name = db.path.lstrip("/")
    if not name or "bench" not in name:
        raise BenchSetupError(
            f"the bench drops and recreates its database; {name!r} has no 'bench' in its name, "
            "so it is refused (set BENCH_DATABASE_URL to e.g. .../slicedash_bench)"
        )
    broker = urlsplit(broker_url)
    if broker.scheme != "redis":
        raise BenchSetupError(f"BENCH_BROKER_URL must be a redis:// URL, not {broker_url!r}")
    for what, parts in (("database", db), ("broker", broker)):
        if (parts.hostname or "") not in LOOPBACK_HOSTS:
            raise BenchSetupError(f"the bench only talks to loopback; the {what} host is {parts.hostname!r}")
    return BenchEnv(
        database_url=database_url,
        database_name=name,
        broker_url=broker_url,
        work_dir=work_dir,
        secret_key="bench-" + secrets.token_urlsafe(40),
    )


def database_recreate(env: BenchEnv) -> None:
    """Drop and create the bench database (forcing out stale connections of a crashed run)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(_maintenance_url(env), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(env.database_name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(env.database_name)))


def database_drop(env: BenchEnv) -> None:
    import psycopg
    from django.db import connections
    from psycopg import sql

    connections.close_all()
    with psycopg.connect(_maintenance_url(env), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(env.database_name)))


def _maintenance_url(env: BenchEnv) -> str:
    parts = urlsplit(env.database_url)
    return parts._replace(scheme="postgresql", path="/postgres").geturl()


def django_setup(env: BenchEnv) -> None:
    """Point this process at the bench's world and start Django (call once, before any Django import)."""
    os.environ.update(env.settings_env(web=True))
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    (env.work_dir / "static").mkdir(parents=True, exist_ok=True)
    import django

    django.setup()
    from django.test.utils import override_settings

    # DEBUG off would ask for collectstatic's manifest; a manifest lookup is a dict read,
    # so plain storage measures the same pages without a collectstatic step.
    override_settings(
        STORAGES={
            "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        },
        ROOT_URLCONF="bench.urls",
    ).enable()
    # setup_test_environment() is NOT called: it instruments every template render (a context
    # copy per template for response.context), which is test tooling, not the page's cost.
