"""`make run` stops cleanly on Ctrl-C: web and worker gone within 10 s, nothing alarming in the logs.

Runs the real `make run` (migrate, the demo fleet, web + worker on the embedded default) in its own
session from a bare environment, then does what a terminal does on Ctrl-C: SIGINT to the whole
foreground process group.
"""

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


@pytest.fixture
def make_run(tmp_path):
    """Start `make run` on a free port, from a bare environment (the embedded default under tmp_path)."""
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "VAR_DIR": str(tmp_path / "var"),
        "LANG": "C.UTF-8",
    }
    output = tmp_path / "make-run.log"
    with output.open("w") as out:
        # -o: the shared virtualenv is already installed; never reinstall it from a test.
        process = subprocess.Popen(
            ["make", "--no-print-directory", "-o", ".venv/.installed", "run", f"PORT={port}", "HOST=127.0.0.1"],
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    process.port, process.output, process.var_dir = port, output, tmp_path / "var"
    yield process
    for line in session_processes(process.pid):  # never leave anything behind, whatever happened
        try:
            os.kill(int(line.split()[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(10)


@pytest.mark.slow
def test_it_stops_web_and_worker_within_ten_seconds_on_ctrl_c(make_run):
    url = f"http://127.0.0.1:{make_run.port}/"
    deadline = time.monotonic() + 180
    while not (page_answers(url) and (make_run.var_dir / "worker.pid").exists()):
        assert make_run.poll() is None, make_run.output.read_text()
        assert time.monotonic() < deadline, f"no page at {url}: {make_run.output.read_text()}"
        time.sleep(0.5)
    time.sleep(2)  # the worker connects to its broker and starts its beat
    assert len(session_processes(make_run.pid)) >= 4, session_processes(make_run.pid)

    os.killpg(make_run.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    stopped = time.monotonic() + 10
    while session_processes(make_run.pid) and time.monotonic() < stopped:
        time.sleep(0.1)

    left = session_processes(make_run.pid)
    assert left == [], f"still running 10 s after Ctrl-C: {left}"
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
