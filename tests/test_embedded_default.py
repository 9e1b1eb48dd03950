"""The embedded default that `make run` gives a newcomer: its private PostgreSQL, the filesystem broker,
the simulated grid, a real worker. Run from nothing in subprocesses, the way `make run` runs it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config.embedded_db import EmbeddedDb

BASE_DIR = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def embedded_env(tmp_path) -> dict:
    """Only what a bare shell has: no DATABASE_URL, no broker URL, our own VAR_DIR."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "VAR_DIR": str(tmp_path / "var")}


def run(args: list[str], env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


PAGES_AND_CLICK = """
import json, django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from django.contrib.auth.models import User
from django.test import Client
client = Client(HTTP_HOST="127.0.0.1:8000")  # the host `make run` serves
client.force_login(User.objects.get(username="admin"))
statuses = {url: client.get(url).status_code
            for url in ["/", "/nodes/1774/", "/deployments/failed/", "/jobs/", "/policy/", "/?format=csv"]}
clicked = client.post("/nodes/1774/reregister/")
print(json.dumps({"statuses": statuses, "click": clicked.status_code}))
"""

JOB_STATE = """
import json, django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from django.contrib.auth.models import User
from django.test import Client
from dashboard.models import Job
job = Job.objects.get()
client = Client(HTTP_HOST="127.0.0.1:8000")
client.force_login(User.objects.get(username="admin"))
pages = {url: client.get(url).status_code for url in ["/jobs/", f"/jobs/{job.pk}/", "/nodes/1774/"]}
print(json.dumps({"state": job.state, "slices": job.node.slices.count(), "error": job.error, "pages": pages}))
"""


def test_it_serves_the_demo_and_runs_a_reregister_on_its_own_postgresql_and_the_filesystem_broker(tmp_path):
    env = embedded_env(tmp_path)
    db = EmbeddedDb.of(tmp_path / "var")
    db.start()
    try:
        served_and_reregistered(env)
    finally:
        db.stop()


def served_and_reregistered(env: dict) -> None:
    run([sys.executable, "manage.py", "migrate", "--no-input"], env)
    run([sys.executable, "manage.py", "demo_fleet"], env)

    pages = json.loads(run([sys.executable, "-c", PAGES_AND_CLICK], env).stdout.strip().splitlines()[-1])
    assert set(pages["statuses"].values()) == {200} and pages["click"] == 302

    worker = subprocess.Popen(
        [str(Path(sys.executable).parent / "celery"), "-A", "config", "worker", "--pool=solo", "--loglevel=WARNING"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            job = json.loads(run([sys.executable, "-c", JOB_STATE], env).stdout.strip().splitlines()[-1])
            if job["state"] not in ("queued", "running") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(30)
    assert (job["state"], job["slices"]) == ("succeeded", 6), job["error"]
    assert set(job["pages"].values()) == {200}
