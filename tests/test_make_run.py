"""`make run` stops cleanly on Ctrl-C: web and worker gone within 10 s, nothing alarming in the logs.

Runs the real `make run` (migrate, the demo fleet, web + worker on the embedded default) in its own
session from a bare environment, then does what a terminal does on Ctrl-C: SIGINT to the whole
foreground process group.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from config.embedded_db import EmbeddedDb
from scripts.run import leftover_worker_stop

BASE_DIR = Path(__file__).resolve().parent.parent

# Signs of the old recipe's breakage (a trap re-triggering itself, a worker told to stop thousands
# of times) and of any crash; bash reports a child killed by a signal as "Killed" / "Terminated".
ALARMING = ("Traceback", "Error", "Segmentation fault", "Killed", "Terminated")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def session_processes(sid: int) -> list[str]:
    """Every live process of that session: `pid command`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...; comm may hold spaces, so split after its ")".
        fields = text.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(f"{stat.parent.name} {text.split(' (', 1)[1].split(')')[0]}")
    return found


def page_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status in (200, 302)
    except urllib.error.HTTPError as refused:
        return refused.code in (302, 403)
    except OSError:
        return False


def bare_env(tmp_path) -> dict:
    """A bare environment: the embedded default under tmp_path."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "VAR_DIR": str(tmp_path / "var"),
        "LANG": "C.UTF-8",
    }


def make_run_start(tmp_path, name: str = "make-run.log") -> subprocess.Popen:
    """Start `make run` on a free port, from a bare environment, in a session of its own."""
    port = free_port()
    output = tmp_path / name
    with output.open("w") as out:
        # -o: the shared virtualenv is already installed; never reinstall it from a test.
        process = subprocess.Popen(
            ["make", "--no-print-directory", "-o", ".venv/.installed", "run", f"PORT={port}", "HOST=127.0.0.1"],
            cwd=BASE_DIR,
            env=bare_env(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    process.port, process.output, process.var_dir = port, output, tmp_path / "var"
    return process


def make_run_end(process: subprocess.Popen) -> None:
    for line in session_processes(process.pid):  # never leave anything behind, whatever happened
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(10)
    # The database runs in a session of its own (pg_ctl's setsid): a failed test stops it here.
    EmbeddedDb.of(process.var_dir).stop()


def serving_wait(process: subprocess.Popen, seconds: float = 180) -> None:
    url = f"http://127.0.0.1:{process.port}/"
    deadline = time.monotonic() + seconds
    while not (page_answers(url) and (process.var_dir / "worker.pid").exists()):
        assert process.poll() is None, process.output.read_text()
        assert time.monotonic() < deadline, f"no page at {url}: {process.output.read_text()}"
        time.sleep(0.2)


def ctrl_c(process: subprocess.Popen, seconds: float = 10) -> list[str]:
    """What the terminal does on Ctrl-C; the session's processes still running `seconds` later."""
    os.killpg(process.pid, signal.SIGINT)
    stopped = time.monotonic() + seconds
    while session_processes(process.pid) and time.monotonic() < stopped:
        time.sleep(0.1)
    return session_processes(process.pid)


@pytest.fixture
def make_run(tmp_path):
    """Start `make run` on a free port, from a bare environment (the embedded default under tmp_path)."""
    process = make_run_start(tmp_path)
    yield process
    make_run_end(process)


@pytest.mark.slow
def test_it_stops_web_and_worker_within_ten_seconds_on_ctrl_c(make_run):
    url = f"http://127.0.0.1:{make_run.port}/"
    serving_wait(make_run)
    time.sleep(2)  # the worker connects to its broker and starts its beat
    assert len(session_processes(make_run.pid)) >= 4, session_processes(make_run.pid)
    database = EmbeddedDb.of(make_run.var_dir)
    assert database.is_running()

    left = ctrl_c(make_run)
    assert left == [], f"still running 10 s after Ctrl-C: {left}"
    # pg_ctl starts the server in a session of its own (so the terminal's Ctrl-C never reaches it).
    assert not database.is_running() and database.postmaster_pid() is None
    assert not page_answers(url)
    logs = make_run.output.read_text() + (make_run.var_dir / "worker.log").read_text()
    assert [word for word in ALARMING if word in logs] == [], logs
    assert logs.count("Warm shutdown") <= 1, logs
    assert not (make_run.var_dir / "worker.pid").exists()


def test_it_stops_a_worker_an_earlier_run_left_behind(tmp_path):
    # A stand-in with "celery" on its command line, as the pidfile check wants.
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "celery"])
    cmdline = Path(f"/proc/{leftover.pid}/cmdline")
    for _ in range(100):  # until it has exec'd: before that, its command line is still ours
        if b"celery" in cmdline.read_bytes():
            break
        time.sleep(0.05)
    pidfile = tmp_path / "worker.pid"
    pidfile.write_text(f"{leftover.pid}\n")
    leftover_worker_stop(pidfile)
    assert leftover.wait(5) is not None and not pidfile.exists()


def test_it_leaves_a_process_alone_that_only_reused_the_pid(tmp_path):
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pidfile = tmp_path / "worker.pid"
    pidfile.write_text(f"{stranger.pid}\n")
    try:
        leftover_worker_stop(pidfile)
        assert stranger.poll() is None and not pidfile.exists()
    finally:
        stranger.kill()
        stranger.wait(5)


KEPT = """
import json, django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from dashboard.models import Job, Node
print(json.dumps({"registered": Node.objects.filter(grid_id=2117).exists(),
                  "onboarded": Node.objects.filter(grid_id=4247).exists(),
                  "reregistered": Job.objects.filter(node__grid_id=2601, kind="reregister", state="succeeded").exists()}))
"""
# The farm of node 4247, one the demo leaves on the grid unregistered: onboarding that farm registers it.
FARM_OF_4247 = """
import django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
from django.conf import settings
from sim.grid import SimulatedGrid
print(SimulatedGrid(settings.SIMGRID_PATH).node(4247).farm_id)
"""


def _manage(tmp_path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=BASE_DIR, env=bare_env(tmp_path), capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_a_second_run_keeps_the_trial_and_starts_within_fifteen_seconds_and_demo_reset_rebuilds(tmp_path):
    first = make_run_start(tmp_path)
    try:
        serving_wait(first)
        assert "Tour:" in first.output.read_text()
        # What the console suggests, and a re-register through the running worker.
        registered = _manage(tmp_path, "manage.py", "node_register", "2117")
        assert registered.returncode == 0, registered.stdout + registered.stderr
        reregistered = _manage(tmp_path, "manage.py", "node_reregister", "2601", "--wait")
        assert reregistered.returncode == 0, reregistered.stdout + reregistered.stderr
        # And an onboarding of a farm from the grid.
        farm = _manage(tmp_path, "-c", FARM_OF_4247)
        assert farm.returncode == 0, farm.stderr
        onboarded = _manage(tmp_path, "manage.py", "node_register", "--farm-id", farm.stdout.split()[-1])
        assert onboarded.returncode == 0, onboarded.stdout + onboarded.stderr
        assert ctrl_c(first) == []
    finally:
        make_run_end(first)

    second = make_run_start(tmp_path, "make-run-2.log")
    try:
        started = time.monotonic()
        serving_wait(second, seconds=60)
        # Wall clock, in a slow test: the database kept, nothing rebuilt.
        assert time.monotonic() - started < 15, second.output.read_text()
        assert "kept as you left it" in second.output.read_text()
        kept = _manage(tmp_path, "-c", KEPT)
        assert json.loads(kept.stdout.splitlines()[-1]) == {
            "registered": True,
            "onboarded": True,
            "reregistered": True,
        }, kept.stderr
        assert ctrl_c(second) == []
    finally:
        make_run_end(second)

    reset = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed", "demo-reset"],
        cwd=BASE_DIR,
        env=bare_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert reset.returncode == 0 and "demo fleet rebuilt" in reset.stdout, reset.stdout + reset.stderr
    after = _manage(tmp_path, "-m", "config.embedded_db", "with", "--", sys.executable, "-c", KEPT)
    assert json.loads(after.stdout.splitlines()[-1]) == {
        "registered": False,
        "onboarded": False,
        "reregistered": False,
    }, after.stderr
