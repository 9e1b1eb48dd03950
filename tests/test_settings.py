"""Settings from the environment: strict readers, the embedded default, production checks.

Settings are read once per process, so what they make of an environment is seen by running
config/settings.py afresh in this process with an environment built here from nothing
(`settings_of`): a refusal is the ImproperlyConfigured it raises. A few tests start real
processes (`python`, `manage`) to show that a bare start-up and the deployment checks work end to end.
"""

import json
import os
import runpy
import secrets
import subprocess
import sys
import traceback
from pathlib import Path
from unittest import mock

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_choice, env_float, env_int, env_list, env_str

BASE_DIR = Path(settings.BASE_DIR)


# --- the strict readers ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("true", True),
        ("1", True),
        (" Yes ", True),
        ("ON", True),
        ("false", False),
        ("0", False),
        ("no", False),
        ("off", False),
    ],
)
def test_it_reads_booleans(monkeypatch, raw, value):
    monkeypatch.setenv("SLICEDASH_FLAG", raw)
    assert env_bool("SLICEDASH_FLAG", not value) is value


@pytest.mark.parametrize("raw", ["ture", "2", "enabled", "y"])
def test_it_refuses_a_bad_boolean_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("DEBUG", raw)
    with pytest.raises(ImproperlyConfigured, match=f"^DEBUG={raw!r} is not a boolean"):
        env_bool("DEBUG", False)


def test_it_uses_the_default_for_an_unset_or_empty_variable(monkeypatch):
    monkeypatch.delenv("SLICEDASH_FLAG", raising=False)
    assert env_bool("SLICEDASH_FLAG", True) is True
    monkeypatch.setenv("SLICEDASH_FLAG", "")
    assert env_bool("SLICEDASH_FLAG", False) is False


@pytest.mark.parametrize("raw", ["ten", "1.5", "0x10", "1e3"])
def test_it_refuses_a_bad_int_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("GRID_RETRIES", raw)
    with pytest.raises(ImproperlyConfigured, match=f"^GRID_RETRIES={raw!r} is not a whole number"):
        env_int("GRID_RETRIES", 3, minimum=0)


def test_it_refuses_an_int_below_its_minimum(monkeypatch):
    monkeypatch.setenv("CELERY_VISIBILITY_TIMEOUT", "5")
    with pytest.raises(ImproperlyConfigured, match="CELERY_VISIBILITY_TIMEOUT=5 must be at least 60"):
        env_int("CELERY_VISIBILITY_TIMEOUT", 3600, minimum=60)


@pytest.mark.parametrize("raw", ["nan", "NaN", "-inf", "inf"])
def test_it_refuses_nan_and_infinity_for_a_float(monkeypatch, raw):
    # An infinite time-out would let one slow grid call hold a worker forever.
    monkeypatch.setenv("GRID_READ_TIMEOUT", raw)
    with pytest.raises(
        ImproperlyConfigured, match=f"GRID_READ_TIMEOUT={raw!r} must be a finite number of at least 0.01"
    ):
        env_float("GRID_READ_TIMEOUT", 10.0, minimum=0.01)


def test_it_refuses_a_float_that_is_not_a_number(monkeypatch):
    monkeypatch.setenv("GRID_BACKOFF", "fast")
    with pytest.raises(ImproperlyConfigured, match="GRID_BACKOFF='fast' is not a number"):
        env_float("GRID_BACKOFF", 0.5)


def test_it_reads_a_float(monkeypatch):
    monkeypatch.setenv("GRID_BACKOFF", " 0.25 ")
    assert env_float("GRID_BACKOFF", 0.5) == 0.25


def test_it_refuses_a_choice_outside_the_list(monkeypatch):
    monkeypatch.setenv("GRID_BACKEND", "grid-proxy")
    with pytest.raises(ImproperlyConfigured, match="GRID_BACKEND='grid-proxy' must be one of: simulator, gridproxy"):
        env_choice("GRID_BACKEND", "simulator", ("simulator", "gridproxy"))


def test_it_reads_a_comma_separated_list(monkeypatch):
    monkeypatch.setenv("ALLOWED_HOSTS", " dash.example.com, ,127.0.0.1 ")
    assert env_list("ALLOWED_HOSTS", []) == ["dash.example.com", "127.0.0.1"]


def test_it_reads_strings_as_given(monkeypatch):
    monkeypatch.setenv("LOG_LEVEL", "DEBUG")
    assert env_str("LOG_LEVEL", "INFO") == "DEBUG"


# --- start-up, in a clean environment ------------------------------------------------------


def clean_env(tmp_path, **variables) -> dict:
    """Nothing from this process: only what a bare shell has, a VAR_DIR of our own, and `variables`."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "VAR_DIR": str(tmp_path / "var"),
        **variables,
    }


def python(code: str, env: dict) -> subprocess.CompletedProcess:
    prelude = "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); django.setup(); "
    return subprocess.run(
        [sys.executable, "-c", prelude + code], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )


def manage(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )


def settings_started(env: dict, *names: str) -> dict:
    """These settings as a real `python` started with `env` (and django.setup()) has them."""
    code = (
        "import json; from django.conf import settings; "
        f"print(json.dumps({{n: getattr(settings, n) for n in {list(names)!r}}}, default=str))"
    )
    done = python(code, env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def settings_of(env: dict) -> dict:
    """config/settings.py run afresh in this process with `env` as the whole environment: its names.

    This process's own settings (django.conf.settings) are not touched; a bad value raises
    ImproperlyConfigured here, as it would at a process's start-up.
    """
    with mock.patch.dict(os.environ, env, clear=True):
        return runpy.run_path(str(BASE_DIR / "config" / "settings.py"))


def settings_in(env: dict, *names: str) -> dict:
    """These settings as read from `env`, through JSON as settings_started gives them."""
    found = settings_of(env)
    return json.loads(json.dumps({n: found[n] for n in names}, default=str))


def refusal_of(env: dict) -> str:
    """What start-up with `env` stops with: the ImproperlyConfigured, as its traceback prints it."""
    with pytest.raises(ImproperlyConfigured) as refused:
        settings_of(env)
    return "".join(traceback.format_exception(refused.value))


def test_it_starts_a_process_on_the_private_postgresql_under_var_dir_by_default(tmp_path):
    database = settings_started(clean_env(tmp_path), "DATABASES")["DATABASES"]["default"]
    assert (database["ENGINE"], database["NAME"]) == ("django.db.backends.postgresql", "slicedash")
    assert database["HOST"] == str(tmp_path / "var" / "postgres")


@pytest.mark.slow
def test_a_process_refuses_to_start_with_a_bad_setting_naming_it(tmp_path):
    done = python("pass", clean_env(tmp_path, DEBUG="maybe"))
    assert done.returncode != 0
    assert "ImproperlyConfigured: DEBUG='maybe' is not a boolean" in done.stderr


def test_it_runs_on_the_private_postgresql_under_var_dir_by_default(tmp_path):
    database = settings_in(clean_env(tmp_path), "DATABASES")["DATABASES"]["default"]
    assert (database["ENGINE"], database["NAME"]) == ("django.db.backends.postgresql", "slicedash")
    # Its unix socket in its data folder: no TCP port to collide with another checkout's.
    assert database["HOST"] == str(tmp_path / "var" / "postgres")


def test_it_uses_celerys_filesystem_broker_with_folders_under_var_dir_by_default(tmp_path):
    found = settings_in(clean_env(tmp_path), "CELERY_BROKER_URL", "CELERY_BROKER_TRANSPORT_OPTIONS")
    options = found["CELERY_BROKER_TRANSPORT_OPTIONS"]
    queue = tmp_path / "var" / "broker" / "queue"
    assert found["CELERY_BROKER_URL"] == "filesystem://"
    assert (options["data_folder_in"], options["data_folder_out"]) == (str(queue), str(queue))
    assert options["control_folder"] == str(tmp_path / "var" / "broker" / "control")
    assert queue.is_dir() and (tmp_path / "var" / "broker" / "control").is_dir()


def test_it_runs_on_the_simulated_grid_in_debug_by_default(tmp_path):
    found = settings_in(clean_env(tmp_path), "DEBUG", "GRID_BACKEND", "SIMGRID_PATH")
    assert (found["DEBUG"], found["GRID_BACKEND"]) == (True, "simulator")
    assert found["SIMGRID_PATH"] == str(tmp_path / "var" / "simgrid.sqlite3")


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"DEBUG": "false"}, "SECRET_KEY must be set when DEBUG is false"),
        (
            {"DEBUG": "false", "SECRET_KEY": "dev-only-insecure-key-do-not-use-in-production"},
            "SECRET_KEY is the development key",
        ),
        ({"GRID_RETRIES": "three"}, "GRID_RETRIES='three' is not a whole number"),
        ({"GRID_READ_TIMEOUT": "nan"}, "GRID_READ_TIMEOUT='nan' must be a finite number"),
        ({"DATABASE_URL": "not-a-url"}, "DATABASE_URL is malformed"),
    ],
)
def test_it_refuses_to_start_with_a_bad_setting_naming_it(tmp_path, variables, message):
    assert "ImproperlyConfigured: " + message in refusal_of(clean_env(tmp_path, **variables))


def production_env(tmp_path) -> dict:
    return clean_env(
        tmp_path,
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(64),
        ALLOWED_HOSTS="dash.example.com",
        DATABASE_URL=os.environ["DATABASE_URL"],
        CELERY_BROKER_URL=os.environ["CELERY_BROKER_URL"],
    )


@pytest.mark.slow  # a second and a half: `check --deploy` in a process of its own
def test_it_passes_the_deployment_checks_with_production_settings(tmp_path):
    done = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


@pytest.mark.slow
def test_it_fails_the_deployment_checks_with_debug_on(tmp_path):
    # The same check must be able to fail, or passing it proves nothing.
    done = manage("check", "--deploy", "--fail-level", "WARNING", env={**production_env(tmp_path), "DEBUG": "true"})
    assert done.returncode != 0 and "security.W018" in done.stderr


def test_it_turns_on_https_protections_in_production(tmp_path):
    found = settings_in(
        production_env(tmp_path),
        "SECURE_SSL_REDIRECT",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_HSTS_SECONDS",
    )
    assert found == {
        "SECURE_SSL_REDIRECT": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 31536000,
    }


def test_it_uses_postgresql_when_given_a_database_url(tmp_path):
    database = settings_in(production_env(tmp_path), "DATABASES")["DATABASES"]["default"]
    assert database["ENGINE"] == "django.db.backends.postgresql"


def test_it_ends_sessions_after_12_hours_or_2_idle_hours_by_default(tmp_path):
    found = settings_in(clean_env(tmp_path), "SESSION_COOKIE_AGE", "SESSION_IDLE_TIMEOUT")
    assert found == {"SESSION_COOKIE_AGE": 12 * 3600, "SESSION_IDLE_TIMEOUT": 2 * 3600}


def test_it_reads_the_session_lifetimes_and_the_grid_budgets_from_the_environment(tmp_path):
    env = clean_env(
        tmp_path, SESSION_COOKIE_AGE="28800", SESSION_IDLE_TIMEOUT="900", GRID_DEADLINE="20", GRID_STEP_DEADLINE="45"
    )
    found = settings_in(env, "SESSION_COOKIE_AGE", "SESSION_IDLE_TIMEOUT", "GRID_DEADLINE", "GRID_STEP_DEADLINE")
    assert found == {
        "SESSION_COOKIE_AGE": 28800,
        "SESSION_IDLE_TIMEOUT": 900,
        "GRID_DEADLINE": 20.0,
        "GRID_STEP_DEADLINE": 45.0,
    }


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"SESSION_IDLE_TIMEOUT": "2h"}, "SESSION_IDLE_TIMEOUT='2h' is not a whole number"),
        ({"SESSION_COOKIE_AGE": "10"}, "SESSION_COOKIE_AGE=10 must be at least 60"),
        ({"GRID_DEADLINE": "inf"}, "GRID_DEADLINE='inf' must be a finite number"),
    ],
)
def test_it_refuses_a_bad_session_or_deadline_setting_naming_it(tmp_path, variables, message):
    assert "ImproperlyConfigured: " + message in refusal_of(clean_env(tmp_path, **variables))


def test_the_beat_asks_for_a_fleet_watch_every_300_s_by_default_and_never_with_0(tmp_path):
    default = settings_in(clean_env(tmp_path), "CELERY_BEAT_SCHEDULE")["CELERY_BEAT_SCHEDULE"]
    off = settings_in(clean_env(tmp_path, FLEET_WATCH_EVERY="0"), "CELERY_BEAT_SCHEDULE")["CELERY_BEAT_SCHEDULE"]

    assert default["fleet-watch"] == {"task": "dashboard.fleet_watch", "schedule": 300.0}
    assert "fleet-watch" not in off


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"GRID_RATE_LIMIT": "3", "GRID_RATE_RESERVE": "3"}, "GRID_RATE_RESERVE"),
        ({"FLEET_WATCH_EVERY": "5"}, "FLEET_WATCH_EVERY"),
    ],
)
def test_it_refuses_a_budget_or_watch_setting_that_cannot_work(tmp_path, variables, named):
    assert named in refusal_of(clean_env(tmp_path, **variables))


def test_it_reads_per_farm_alert_routes_and_refuses_a_malformed_one(tmp_path):
    routes = "4242=json://hooks.example.com/a,4242=json://hooks.example.com/c,7=json://x.example.com/b"
    found = settings_in(clean_env(tmp_path, ALERT_FARM_URLS=routes), "ALERT_FARM_URLS")["ALERT_FARM_URLS"]
    bad = refusal_of(clean_env(tmp_path, ALERT_FARM_URLS="farm4242=json://secret@x"))

    assert found == {
        "4242": ["json://hooks.example.com/a", "json://hooks.example.com/c"],
        "7": ["json://x.example.com/b"],
    }
    assert "ALERT_FARM_URLS" in bad and "secret" not in bad


def test_a_job_running_when_the_broker_drops_runs_on():
    # RELIABILITY.md "Broker restarted while a job runs": Celery 6 would cancel it by default.
    from config.celery import app

    assert app.conf.worker_cancel_long_running_tasks_on_connection_loss is False
