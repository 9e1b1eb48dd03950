"""The production-like set-up the drip and no-group stages share: settings, database, gunicorn.

As load.py does it: DEBUG=false, a SECRET_KEY generated for the run, ALLOWED_HOSTS=127.0.0.1,
SECURE_SSL_REDIRECT=false (plain HTTP on loopback where a TLS proxy would sit; the Secure cookies
are sent back by hand, see load.Browser), collected static files served by WhiteNoise, and
gunicorn with the project's gunicorn.conf.py on a free loopback port. The database is the one
DATABASE_URL names (default slicedash_rel), migrated and flushed: never point it at one you care about.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

from bench.reliability.kill_loop import DEFAULT_DATABASE_URL, database_ensure, die_with_parent, free_port, wait_until

BASE_DIR = Path(__file__).resolve().parents[2]
GUNICORN = BASE_DIR / ".venv" / "bin" / "gunicorn"


def production_env(*, workdir: Path, broker_url: str, **extra: str) -> dict:
    """The environment for this process, gunicorn and the worker (extra entries win)."""
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("JOB_TEST_PAUSE", "DJANGO_SETTINGS_MODULE")},
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL),
        "CELERY_BROKER_URL": broker_url,
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "false",
        "SIMGRID_PATH": str(workdir / "simgrid.sqlite3"),
        "VAR_DIR": str(workdir / "var"),
        "STATIC_ROOT": str(workdir / "static"),
        "LOG_LEVEL": "WARNING",
        "CELERY_SKIP_CHECKS": "1",
        "PYTHONPATH": str(BASE_DIR),
    }
    env.pop("METRICS_TOKEN", None)
    env.update(extra)
    return env


def django_fresh(env: dict) -> None:
    """Set Django up in this process on `env`, migrate, empty the database, give the groups back
    their roles (flush removes them) and collect the static files gunicorn serves."""
    os.environ.update(env)
    database_ensure(env["DATABASE_URL"])
    import django

    django.setup()
    from django.apps import apps
    from django.core.management import call_command

    from dashboard.access.roles import roles_restore

    call_command("migrate", verbosity=0, interactive=False)
    call_command("flush", verbosity=0, interactive=False)
    roles_restore(apps)
    call_command("collectstatic", verbosity=0, interactive=False)


class Gunicorn:
    """`gunicorn -c gunicorn.conf.py config.wsgi` (gthread) on a free loopback port; its log in workdir."""

    def __init__(self, *, env: dict, workdir: Path, workers: int = 1, threads: int = 4):
        self.env = env
        self.log_path = workdir / "gunicorn.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers, self.threads = workers, threads
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self) -> float:
        import requests
        from django.db import connections

        connections.close_all()  # no connection of ours is shared with what follows
        began = time.monotonic()
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [
                str(GUNICORN),
                "-c",
                "gunicorn.conf.py",
                "config.wsgi:application",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(self.workers),
                "--worker-class",
                "gthread",
                "--threads",
                str(self.threads),
                "--timeout",
                "30",
                "--graceful-timeout",
                "10",
            ],
            cwd=BASE_DIR,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )

        def up() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited at start-up:\n{self.log_path.read_text()[-3000:]}")
            try:
                return requests.get(f"{self.url}/login/", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_until(up, timeout=60, what="gunicorn", every=0.2)
        return time.monotonic() - began

    def server_errors(self) -> int:
        """Requests that ended in an unhandled exception (Django's "Internal Server Error" log line,
        or gunicorn's own). Not every traceback: Django logs a refused permission (a 403) with one."""
        if self._log:
            self._log.flush()
        if not self.log_path.exists():
            return 0
        text = self.log_path.read_text()
        return sum(
            text.count(words) for words in ("Internal Server Error:", "Error handling request", "Exception in worker")
        )

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text()[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._log:
            self._log.close()


def csrf_token(html: str) -> str:
    import re

    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    if not found:
        raise RuntimeError("no CSRF token in the page")
    return found.group(1)
