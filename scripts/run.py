"""`make run`: the embedded database, migrate and the demo, then the web server and one worker
(with the reaper's beat) side by side.

    .venv/bin/python scripts/run.py [--host 127.0.0.1] [--port 8000]

Without DATABASE_URL the private PostgreSQL under VAR_DIR/postgres (config.embedded_db) starts
first (a server a killed run left running is adopted) and is stopped last, after web and worker.

Ctrl-C (SIGINT, sent by the terminal to the whole foreground process group), SIGTERM or SIGHUP stops both:
the web server gets SIGINT (runserver exits quietly), the worker gets one SIGTERM (Celery's warm
shutdown: the running job is finished). A worker still busy after WARM_SECONDS gets SIGQUIT (cold
shutdown) and, should that hang too, its whole process group is killed, so both are gone within
10 s and the next `make run` never finds a second worker beside its own.

Each child runs in its own process group. The terminal's Ctrl-C therefore reaches only `make` and
this script, and each child is signalled exactly once, by this script. The shell recipe this
replaces (`trap 'kill 0' INT TERM EXIT`) sent SIGTERM to its whole process group, itself included,
from inside its own trap, so the trap fired again and again (issue 11: "Segmentation fault",
thousands of "Warm shutdown" lines, RecursionErrors, and a worker left running).

A worker left behind by a run that was killed outright (SIGKILL, a crash) is found through its
pidfile (VAR_DIR/worker.pid) and stopped before a new one starts.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
# An idle worker's warm shutdown takes 4-7 s on the filesystem broker (the consumer polls it,
# then the pool's children are joined), so it gets most of the 10 s.
WARM_SECONDS = 7.0  # SIGTERM -> SIGQUIT
COLD_SECONDS = 1.5  # SIGQUIT -> SIGKILL of the worker's process group
WEB_SECONDS = 5.0  # SIGINT -> SIGKILL of the web server (it stops at once; this is in parallel)
# Before web and worker: the schema, then the demo fleet (built once per database, kept across
# restarts) with the logins and a tour of its special nodes.
PREPARE = (
    ["manage.py", "migrate", "--no-input"],
    ["manage.py", "demo_fleet", "--tour"],
)


# What `make run` decides for the demo, for every process: the marketplace twin (demo_fleet's
# DEMO_MARKETPLACE_TWIN: rent contracts are judged for it and the simulated chain signs with it; an empty
# value: not judged) and the simulated grid. The environment wins; the values are written to
# VAR_DIR/run.env, which config.settings reads in the embedded default, so a `manage.py` typed in
# another terminal stores figures under the web's settings (issue 34: a precheck run without
# MARKETPLACE_TWIN_ID opened a node rented by another twin on every page).
RUN_SETTINGS = {"MARKETPLACE_TWIN_ID": "7", "GRID_BACKEND": "simulator"}
RUN_SETTINGS_FILE = "run.env"  # config.env.RUN_SETTINGS_FILE


STOP_REQUESTED = []


def _var_dir() -> Path:
    var_dir = Path(os.environ.get("VAR_DIR") or BASE_DIR / "var").resolve()
    var_dir.mkdir(parents=True, exist_ok=True)
    return var_dir


def run_settings_keep(var_dir: Path) -> dict[str, str]:
    """Decide the demo's settings (the environment's value, else the demo's), put them in this process's
    environment for web and worker, and write them to VAR_DIR/run.env for every other process."""
    decided = {name: os.environ.get(name, default) for name, default in RUN_SETTINGS.items()}
    os.environ.update(decided)
    lines = [f"{name}={value}" for name, value in decided.items()]
    text = "# Written by `make run` (scripts/run.py) at each start; the environment wins over it.\n"
    (var_dir / RUN_SETTINGS_FILE).write_text(text + "\n".join(lines) + "\n", encoding="utf-8")
    return decided


def run_settings_words(decided: dict[str, str]) -> str:
    values = ", ".join(f"{name}={value or '(empty)'}" for name, value in decided.items())
    if os.environ.get("DATABASE_URL"):
        return f"Settings: {values} (DATABASE_URL is set: give manage.py the same environment)"
    return f"Settings: {values} (web, worker, beat and manage.py: {RUN_SETTINGS_FILE} under VAR_DIR)"


def _stop(signum, frame):
    # Only note it: the main loop stops the children, so a signal arriving while a child is
    # being started never leaves that child unaccounted for.
    STOP_REQUESTED.append(signum)


def _alive(pid: int) -> bool:
    """Running: present and not a zombie (a process that has exited but was not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def leftover_worker_stop(pidfile: Path) -> None:
    """Stop the worker an earlier run left behind (its pidfile names a live Celery process)."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmdline = ""
    if not _alive(pid) or "celery" not in cmdline:
        pidfile.unlink(missing_ok=True)
        return
    print(f"A worker from an earlier run is still running (pid {pid}): stopping it first.", flush=True)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + WARM_SECONDS + COLD_SECONDS
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)


def wait_for(process: subprocess.Popen, seconds: float) -> bool:
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def killpg(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def stop(web: subprocess.Popen, worker: subprocess.Popen) -> None:
    """One signal to each, then escalate; returns when both (and the worker's children) are gone."""
    if web.poll() is None:
        web.send_signal(signal.SIGINT)
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    if not wait_for(worker, WARM_SECONDS):
        print(
            f"The worker has not stopped after {WARM_SECONDS:.0f} s (a job still running?): cold shutdown.", flush=True
        )
        worker.send_signal(signal.SIGQUIT)
        if not wait_for(worker, COLD_SECONDS):
            killpg(worker, signal.SIGKILL)
            worker.wait()
    # The pool's children and the beat share the worker's process group; none may outlive it.
    killpg(worker, signal.SIGKILL)
    if not wait_for(web, WEB_SECONDS):
        killpg(web, signal.SIGKILL)
        web.wait()


def database_start():
    """The embedded database when no DATABASE_URL is set (None otherwise), started or adopted."""
    if os.environ.get("DATABASE_URL"):
        return None
    sys.path.insert(0, str(BASE_DIR))
    from config.embedded_db import EmbeddedDb

    db = EmbeddedDb.of(os.environ.get("VAR_DIR") or BASE_DIR / "var")
    started = time.monotonic()
    db.start()
    print(f"Database: private PostgreSQL in {db.pgdata} (ready in {time.monotonic() - started:.1f} s)", flush=True)
    return db


def prepare() -> bool:
    """The steps before web and worker, each in the foreground (Ctrl-C stops it too); False on a failure or Ctrl-C."""
    for step in PREPARE:
        if STOP_REQUESTED:
            return False
        done = subprocess.run([sys.executable, *step], cwd=BASE_DIR, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            if not STOP_REQUESTED:
                print(f"`{' '.join(step)}` failed (exit status {done.returncode}).", file=sys.stderr, flush=True)
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", default=os.environ.get("PORT", "8000"))
    args = parser.parse_args(argv)
    print(run_settings_words(run_settings_keep(_var_dir())), flush=True)
    # SIGHUP too: a closed terminal reaches only its foreground process group, not the children's.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop)
    db = None
    try:
        db = database_start()
        return serve(args)
    finally:
        if db is not None:
            db.stop()
            print("Database stopped.", flush=True)


def serve(args: argparse.Namespace) -> int:
    var_dir = _var_dir()
    pidfile = var_dir / "worker.pid"
    logfile = var_dir / "worker.log"
    bin_dir = Path(sys.executable).parent

    leftover_worker_stop(pidfile)
    if not prepare():
        return 0 if STOP_REQUESTED else 1
    worker = subprocess.Popen(
        [
            str(bin_dir / "celery"),
            "-A",
            "config",
            "worker",
            "--beat",
            "--loglevel=INFO",
            "--concurrency=2",
            f"--schedule={var_dir / 'celerybeat-schedule'}",
            f"--pidfile={pidfile}",
            f"--logfile={logfile}",
        ],
        cwd=BASE_DIR,
        stdin=subprocess.DEVNULL,
        process_group=0,
    )
    web = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"{args.host}:{args.port}"],
        cwd=BASE_DIR,
        stdin=subprocess.DEVNULL,
        process_group=0,
    )
    print(
        f"Dashboard: http://{args.host}:{args.port}/   (Ctrl-C stops web and worker; worker log: {logfile})", flush=True
    )
    while not STOP_REQUESTED:
        for name, process in (("web server", web), ("worker", worker)):
            if process.poll() is not None:
                print(
                    f"The {name} stopped (exit status {process.returncode}); stopping the other.",
                    file=sys.stderr,
                    flush=True,
                )
                if name == "worker":
                    print(f"See {logfile}.", file=sys.stderr, flush=True)
                stop(web, worker)
                return 1
        time.sleep(0.1)
    print("\nStopping web and worker...", flush=True)
    stop(web, worker)
    print("Stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
